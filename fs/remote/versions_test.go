package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// versionedExtractor is an extractor whose model can be replaced, keeping
// the previous version as extractor.Service does (Previous,
// Request.Digest). A feature's last element is the first byte of its
// layer's digest: a feature of another version of a changed layer is told
// apart.
type versionedExtractor struct {
	*fakeExtractor
	mu        sync.Mutex
	cur, prev *api.Model
	loaded    time.Time      // when cur was loaded (LoadedAt)
	untimed   bool           // LoadedAt tells nothing (an extractor that predates it)
	calls     map[string]int // Extract calls per layer digest
}

// tinyVersion is the fake model "tiny" at file digest d with the given
// layer digests' first characters.
func tinyVersion(d string, layers ...byte) *api.Model {
	m := &api.Model{Name: "tiny", Digest: d, Preprocess: api.DefaultPreprocess()}
	for i, c := range layers {
		m.Layers = append(m.Layers, api.Layer{Index: i, Name: fmt.Sprintf("layer%d", i), Tensor: fmt.Sprintf("t%d", i),
			Shape: fakeShape, Bytes: 4 * api.Layer{Shape: fakeShape}.Elements(), Digest: strings.Repeat(string(c), 64)})
	}
	return m
}

func newVersionedExtractor(m *api.Model) *versionedExtractor {
	return &versionedExtractor{fakeExtractor: newFakeExtractor(), cur: m, loaded: time.Now(), calls: map[string]int{}}
}

// replace makes m the current version, loaded now, and the current one
// the previous.
func (e *versionedExtractor) replace(m *api.Model) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.prev, e.cur, e.loaded = e.cur, m, time.Now()
}

// LoadedAt is extractor.Service.LoadedAt: when the current version was
// loaded.
func (e *versionedExtractor) LoadedAt(name, digest string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loaded, !e.untimed && name == e.cur.Name && digest == e.cur.Digest
}

func (e *versionedExtractor) Models() []*api.Model {
	e.mu.Lock()
	defer e.mu.Unlock()
	return []*api.Model{e.cur}
}

func (e *versionedExtractor) Model(name string) (*api.Model, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur, name == e.cur.Name
}

func (e *versionedExtractor) Previous(name string) (*api.Model, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.prev, e.prev != nil && name == e.prev.Name
}

func (e *versionedExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	e.mu.Lock()
	m := e.cur
	switch {
	case req.Digest == "" || req.Digest == e.cur.Digest:
	case e.prev != nil && req.Digest == e.prev.Digest:
		m = e.prev
	default:
		e.mu.Unlock()
		return nil, fmt.Errorf("extract %s: %w", req.Key, api.ErrModelReplaced)
	}
	l := m.Layers[req.Layer]
	e.calls[l.Digest]++
	e.mu.Unlock()
	data, err := req.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	return versionedFeature(data, l), nil
}

// versionedFeature is the feature of content at layer l of some version.
func versionedFeature(content []byte, l api.Layer) []byte {
	_, _, f, _ := api.DecodeNPY(expectedFeature(content, l.Index))
	f[len(f)-1] = float32(l.Digest[0])
	return api.EncodeNPY(fakeShape, f, api.Float32)
}

// The models answer carries a version, in its body and in every answer's
// header, which changes when the server's models do (ModelsChanged).
func TestModelsVersionFollowsReload(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	models := func() (ModelsResponse, string) {
		resp := authorizedDo(t, "GET", ts.URL+"/v1/models", nil)
		defer resp.Body.Close()
		var mr ModelsResponse
		if err := json.NewDecoder(resp.Body).Decode(&mr); err != nil {
			t.Fatal(err)
		}
		return mr, resp.Header.Get(ModelsVersionHeader)
	}
	m1, h1 := models()
	if m1.Version == "" || h1 != m1.Version {
		t.Fatalf("version %q, header %q: want one, the same", m1.Version, h1)
	}
	vx.replace(tinyVersion("v2", 'a', 'c'))
	if err := ts.ModelsChanged(); err != nil {
		t.Fatal(err)
	}
	m2, h2 := models()
	if m2.Version == m1.Version || h2 != m2.Version {
		t.Fatalf("after a reload: version %q (was %q), header %q", m2.Version, m1.Version, h2)
	}
	if m2.Models[0].Layers[1].Digest[0] != 'c' {
		t.Errorf("after a reload the models answer lists layer1 at %.8s, want the new version's", m2.Models[0].Layers[1].Digest)
	}
	// Each model says when the server loaded it: later after the reload.
	t1, err1 := time.Parse(time.RFC3339Nano, m1.Models[0].LoadedAt)
	t2, err2 := time.Parse(time.RFC3339Nano, m2.Models[0].LoadedAt)
	if err1 != nil || err2 != nil || !t2.After(t1) {
		t.Errorf("loaded_at %q before the reload, %q after (%v, %v): want two RFC 3339 times, the second later", m1.Models[0].LoadedAt, m2.Models[0].LoadedAt, err1, err2)
	}
}

// A batch item names the layer digest it is for: the server answers from
// the version whose layer has it (current or previous) and refuses one it
// no longer holds with StatusModelChanged, never another version's feature.
func TestBatchItemVersionCheck(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	vx.replace(tinyVersion("v2", 'a', 'c'))
	ts.ModelsChanged()
	item := func(layer int, d byte) string {
		return fmt.Sprintf(`{"model":"tiny","layer":%d,"key":"a.jpg","digest":%q}`, layer, strings.Repeat(string(d), 64))
	}
	body := `{"items":[` + strings.Join([]string{item(1, 'b'), item(1, 'c'), item(1, 'z'), item(0, 'a'), `{"model":"tiny","layer":1,"key":"a.jpg"}`}, ",") + `]}`
	resp, frames := postBatch(t, ts.URL, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %s", resp.Status)
	}
	for i, want := range []byte{'b', 'c', 0, 'a', 'c'} {
		f := frames[uint32(i)]
		if want == 0 {
			if f.Status != StatusModelChanged {
				t.Errorf("item %d (a version the server does not hold): status %d, want %d", i, f.Status, StatusModelChanged)
			}
			if err := ErrorOf(int(f.Status), f.Message, ts.URL, "a.jpg"); !errors.Is(err, api.ErrModelReplaced) {
				t.Errorf("item %d: client error %v, want one matching ErrModelReplaced", i, err)
			}
			continue
		}
		_, _, d, err := api.DecodeNPY(f.Data)
		if f.Status != StatusOK || err != nil {
			t.Fatalf("item %d: status %d %s, %v", i, f.Status, f.Message, err)
		}
		if got := byte(d[len(d)-1]); got != want {
			t.Errorf("item %d: feature of the version with digest %c..., want %c...", i, got, want)
		}
	}
}

// A client learns a server's reload from its answers: it refetches the
// models, hands each replaced model to OnModelReplaced, and reads made for
// the old version still get the old version's features while the server
// keeps it; once the server holds it no more, such a read fails with
// ErrModelReplaced (never another version's feature) and new reads get the
// new version.
func TestClientFollowsServerReload(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	replaced := make(chan *api.Model, 4)
	c.OnModelReplaced(func(m *api.Model) { replaced <- m })
	v1 := c.Version()
	ex := c.Extractor()
	read := func(layer int, digest string) (byte, error) {
		req := featureReq("a.jpg", layer, "")
		req.Digest = digest
		req.Fetch = nil
		data, err := ex.Extract(context.Background(), req)
		if err != nil {
			return 0, err
		}
		_, _, d, err := api.DecodeNPY(data)
		if err != nil {
			t.Fatal(err)
		}
		return byte(d[len(d)-1]), nil
	}
	if got, err := read(1, "v1"); err != nil || got != 'b' {
		t.Fatalf("before the reload: %c, %v", got, err)
	}
	vx.replace(tinyVersion("v2", 'a', 'c'))
	ts.ModelsChanged()
	// A read made for v1 after the server's reload: v1's feature.
	if got, err := read(1, "v1"); err != nil || got != 'b' {
		t.Fatalf("a v1 read after the server's reload: %c, %v; want v1's feature", got, err)
	}
	select {
	case m := <-replaced:
		if m.Digest != "v2" || m.Layers[1].Digest[0] != 'c' || m.Layers[0].Digest[0] != 'a' {
			t.Errorf("OnModelReplaced got %s with layers %.4s %.4s, want v2", m.Digest, m.Layers[0].Digest, m.Layers[1].Digest)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not learn the server's new models")
	}
	if c.Version() == v1 {
		t.Error("the client's version did not change")
	}
	if m, _ := ex.Model("tiny"); m.Digest != "v2" {
		t.Errorf("client's model at %s after the refresh, want v2", m.Digest)
	}
	if got, err := read(1, ""); err != nil || got != 'c' {
		t.Errorf("a new read: %c, %v; want v2's feature", got, err)
	}
	if got, err := read(1, "v1"); err != nil || got != 'b' {
		t.Errorf("a v1 read, both sides keeping v1: %c, %v; want v1's feature", got, err)
	}
	// The server replaces it again: v1 is gone there.
	vx.replace(tinyVersion("v3", 'a', 'd'))
	ts.ModelsChanged()
	got, err := read(1, "v1")
	if !errors.Is(err, api.ErrModelReplaced) {
		t.Errorf("a v1 read once no side holds v1: %c, %v; want an error matching ErrModelReplaced", got, err)
	}
	// An unchanged layer of v1 is still served: its digest is v3's too.
	if got, err := read(0, "v2"); err != nil || got != 'a' {
		t.Errorf("layer0 (unchanged) of v2: %c, %v", got, err)
	}
	if m, _ := ex.Model("tiny"); m.Digest != "v3" {
		t.Errorf("client's model at %s after the refused item, want v3 (the refusal refreshes)", m.Digest)
	}
}

// versionFront is a handler in front of a test server that records the
// items of every POST /v1/batch and counts GET /v1/models; when armed,
// the next batch is answered by the server in full first, then
// afterBatch runs (the server reloads between refusing an item and the
// client's refresh), then the answer goes out.
type versionFront struct {
	srv        http.Handler
	mu         sync.Mutex
	batches    [][]BatchItem
	models     int
	armed      bool
	afterBatch func(frames map[uint32]Frame)
}

func (f *versionFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		f.mu.Lock()
		f.models++
		f.mu.Unlock()
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/batch" {
		f.srv.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var br BatchRequest
	if err := json.Unmarshal(body, &br); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.mu.Lock()
	f.batches = append(f.batches, br.Items)
	armed := f.armed
	f.armed = false
	f.mu.Unlock()
	if !armed {
		f.srv.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, r)
	frames := map[uint32]Frame{}
	if rec.Code == http.StatusOK {
		rd := bytes.NewReader(rec.Body.Bytes())
		if n, err := readStreamHeader(rd); err == nil {
			for len(frames) < n {
				fr, err := ReadFrame(rd, 1<<20)
				if err != nil {
					break
				}
				if fr.Index != HeartbeatIndex {
					frames[fr.Index] = fr
				}
			}
		}
	}
	f.afterBatch(frames)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// asked returns how many batch items asked for layer at digest, and the
// number of batches.
func (f *versionFront) asked(layer int, digest string) (items, batches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.batches {
		for _, it := range b {
			if it.Layer == layer && it.Digest == digest {
				items++
			}
		}
	}
	return items, len(f.batches)
}

func (f *versionFront) modelsFetched() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.models
}

// A refused item (StatusModelChanged) makes the client refresh its models
// and ask once more when the version the read was made for still has the
// layer's digest: here the server, two reloads past the client's version,
// refuses layer0 of v1, then rolls layer0 back (v4 has v1's layer0) before
// the client refreshes; the one retry gets v1's layer0 feature. A layer
// whose digest that refresh changed (layer1: b in v1, e in v4) fails with
// ErrModelReplaced, asked once, never answered with another version's
// feature.
func TestClientRetriesRefusedItemAfterRefresh(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	front := &versionFront{srv: ts.Server}
	fsrv := httptest.NewServer(front)
	t.Cleanup(fsrv.Close)
	c := dial(t, ClientConfig{URLs: []string{fsrv.URL}})
	ex := c.Extractor()
	if m, _ := ex.Model("tiny"); m.Digest != "v1" {
		t.Fatalf("client's model at %s, want v1", m.Digest)
	}
	// Two reloads the client hears nothing of: the server holds v3 and
	// v2, neither with v1's layer0 (a) or layer1 (b).
	vx.replace(tinyVersion("v2", 'f', 'c'))
	ts.ModelsChanged()
	vx.replace(tinyVersion("v3", 'f', 'd'))
	ts.ModelsChanged()
	var refused map[uint32]Frame
	front.mu.Lock()
	front.armed = true
	front.afterBatch = func(frames map[uint32]Frame) {
		refused = frames
		vx.replace(tinyVersion("v4", 'a', 'e')) // layer0 rolled back to v1's
		ts.ModelsChanged()
	}
	front.mu.Unlock()
	read := func(layer int) ([]byte, error) {
		req := featureReq("a.jpg", layer, "")
		req.Digest = "v1"
		return ex.Extract(context.Background(), req)
	}
	la, lb := strings.Repeat("a", 64), strings.Repeat("b", 64)

	models := front.modelsFetched()
	data, err := read(0)
	if err != nil {
		t.Fatalf("layer0 of v1 (the server refused it, then holds it again): %v; want its feature after one retry", err)
	}
	if f, ok := refused[0]; !ok || f.Status != StatusModelChanged {
		t.Fatalf("the first ask was not refused by the server: frames %+v", refused)
	}
	_, _, d, err := api.DecodeNPY(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := byte(d[len(d)-1]); got != 'a' {
		t.Errorf("layer0: the feature of the version with digest %c..., want a...", got)
	}
	if n, batches := front.asked(0, la); n != 2 || batches != 2 {
		t.Errorf("layer0 at a...: asked %d times in %d batches, want 2 in 2 (the refused ask and one retry)", n, batches)
	}
	if front.modelsFetched() == models {
		t.Error("the client did not fetch the models after the refusal")
	}
	vx.mu.Lock()
	computed := vx.calls[la]
	vx.mu.Unlock()
	if computed != 1 {
		t.Errorf("the server computed layer0 at a... %d times, want 1 (the retry)", computed)
	}
	if m, _ := ex.Model("tiny"); m.Digest != "v4" {
		t.Errorf("client's model at %s after the refresh, want v4", m.Digest)
	}

	// Layer1 of v1 (b): the refresh changed it to e; the server holds
	// neither v1 nor v2.
	_, before := front.asked(1, lb)
	models = front.modelsFetched()
	data, err = read(1)
	if !errors.Is(err, api.ErrModelReplaced) || data != nil {
		t.Fatalf("layer1 of v1 (b, changed to e by the refresh): %d bytes, %v; want no data and an error matching ErrModelReplaced", len(data), err)
	}
	if n, batches := front.asked(1, lb); n != 1 || batches != before+1 {
		t.Errorf("layer1 at b...: asked %d times in %d batches, want once (no retry)", n, batches-before)
	}
	if front.modelsFetched() == models {
		t.Error("the client did not fetch the models after the refusal of layer1")
	}
	vx.mu.Lock()
	defer vx.mu.Unlock()
	for _, l := range []byte{'b', 'c', 'd', 'e', 'f'} {
		if n := vx.calls[strings.Repeat(string(l), 64)]; n != 0 {
			t.Errorf("the server computed a layer at %c... %d times, want 0", l, n)
		}
	}
}

// A refused item is not asked again when the refresh brings a version the
// client refuses (its layers' shapes changed: the client keeps the old
// one, whose digest the servers no longer list): the read fails with
// ErrModelReplaced after one ask, not two.
func TestClientNoRetryForRefusedVersion(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	front := &versionFront{srv: ts.Server}
	fsrv := httptest.NewServer(front)
	t.Cleanup(fsrv.Close)
	c := dial(t, ClientConfig{URLs: []string{fsrv.URL}})
	ex := c.Extractor()
	// Two reloads to versions of other shapes: the server holds no
	// version with v1's layer0.
	for _, v := range []string{"v2", "v3"} {
		m := tinyVersion(v, 'f', 'c')
		for i := range m.Layers {
			m.Layers[i].Shape = []int64{4, 4}
			m.Layers[i].Bytes = 4 * 16
		}
		vx.replace(m)
		ts.ModelsChanged()
	}
	models := front.modelsFetched()
	data, err := ex.Extract(context.Background(), featureReq("a.jpg", 0, ""))
	if !errors.Is(err, api.ErrModelReplaced) || data != nil {
		t.Fatalf("layer0 of v1, which the server computes no more: %d bytes, %v; want an error matching ErrModelReplaced", len(data), err)
	}
	if front.modelsFetched() == models {
		t.Error("the client did not fetch the models after the refusal")
	}
	if m, _ := ex.Model("tiny"); m.Digest != "v1" {
		t.Errorf("client's model at %s, want v1 (it refuses a version of other shapes)", m.Digest)
	}
	if n, batches := front.asked(0, strings.Repeat("a", 64)); n != 1 || batches != 1 {
		t.Errorf("layer0 at a...: asked %d times in %d batches, want once (no retry: the servers list it no more)", n, batches)
	}
}
