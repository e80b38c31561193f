package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// rolling is two versioned servers (a and b, each behind a versionFront
// counting its GET /v1/models) over one source, a client of both, a key
// routed to each, and the client's OnModelReplaced calls and log.
type rolling struct {
	t            *testing.T
	vxA, vxB     *versionedExtractor
	tsA, tsB     *testServer
	frA, frB     *versionFront
	c            *Client
	keyA, keyB   string
	replaced     atomic.Int32
	lastReplaced atomic.Pointer[api.Model]
	logs         *syncBuffer
}

// startRolling starts both servers at v1 (layers a, b) and dials them.
func startRolling(t *testing.T, cfg ClientConfig) *rolling {
	return startRollingAfter(t, cfg, nil)
}

// startRollingAfter is startRolling, calling before (if not nil) between
// the servers' start and the dial.
func startRollingAfter(t *testing.T, cfg ClientConfig, before func(r *rolling)) *rolling {
	objs := map[string]string{}
	for i := range 16 {
		objs[fmt.Sprintf("r/%02d.jpg", i)] = fmt.Sprintf("r%d", i)
	}
	dir := writeObjects(t, objs)
	r := &rolling{t: t, vxA: newVersionedExtractor(tinyVersion("v1", 'a', 'b')), vxB: newVersionedExtractor(tinyVersion("v1", 'a', 'b')), logs: &syncBuffer{}}
	r.tsA = startServerIn(t, dir, func(c *testConfig) { c.Extractor = r.vxA })
	r.tsB = startServerIn(t, dir, func(c *testConfig) { c.Extractor = r.vxB })
	r.frA, r.frB = &versionFront{srv: r.tsA.Server}, &versionFront{srv: r.tsB.Server}
	ha, hb := httptest.NewServer(r.frA), httptest.NewServer(r.frB)
	t.Cleanup(ha.Close)
	t.Cleanup(hb.Close)
	cfg.URLs = []string{ha.URL, hb.URL}
	cfg.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	if before != nil {
		before(r)
	}
	r.c = dial(t, cfg)
	r.c.OnModelReplaced(func(m *api.Model) {
		r.replaced.Add(1)
		r.lastReplaced.Store(m)
	})
	for k := range objs {
		switch r.c.Route(k) {
		case ha.URL:
			r.keyA = k
		case hb.URL:
			r.keyB = k
		}
	}
	if r.keyA == "" || r.keyB == "" {
		t.Fatalf("no key routed to each server (%q, %q)", r.keyA, r.keyB)
	}
	return r
}

// read reads layer of key at the client's current version (no Digest) and
// returns the first byte of the digest its feature was computed at.
func (r *rolling) read(ctx context.Context, key string, layer int) (byte, error) {
	req := featureReq(key, layer, "")
	req.Fetch = nil
	data, err := r.c.Extractor().Extract(ctx, req)
	if err != nil {
		return 0, err
	}
	_, _, d, err := api.DecodeNPY(data)
	if err != nil {
		r.t.Fatal(err)
	}
	return byte(d[len(d)-1]), nil
}

// mustRead is read that must succeed.
func (r *rolling) mustRead(key string, layer int) byte {
	r.t.Helper()
	got, err := r.read(context.Background(), key, layer)
	if err != nil {
		r.t.Fatalf("read %s layer%d: %v", key, layer, err)
	}
	return got
}

// settle waits for the client's background refresh, if one runs.
func (r *rolling) settle() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.c.refreshing.Load() {
		if time.Now().After(deadline) {
			r.t.Fatal("the client's refresh did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reload replaces the model of one server with m, as serve's watcher does.
func reload(t *testing.T, vx *versionedExtractor, ts *testServer, m *api.Model) {
	t.Helper()
	vx.replace(m)
	if err := ts.ModelsChanged(); err != nil {
		t.Fatal(err)
	}
}

const olderLine = "serves an older model version than the mount's"

// A rolling deploy: server a reloads to v2 while b still serves v1. The
// client moves to v2 once; b's answers (v1, loaded earlier) do not move it
// back, and b's models are fetched at most once for its v1 (one INFO line).
// A read of the changed layer routed to b during the lag waits for b's
// reload and gets v2's feature.
func TestClientRollingDeployMovesForwardOnly(t *testing.T) {
	r := startRolling(t, ClientConfig{})
	v1 := r.c.Version()
	reload(t, r.vxA, r.tsA, tinyVersion("v2", 'a', 'c'))
	r.mustRead(r.keyA, 0)
	r.settle()
	v2 := r.c.Version()
	if v2 == v1 || r.replaced.Load() != 1 {
		t.Fatalf("after a's reload: version %s (was %s), %d OnModelReplaced calls; want a new one and 1", v2, v1, r.replaced.Load())
	}
	modelsB := r.frB.modelsFetched()
	// Answers from both servers, b's of v1 among them: layer0 (a) is the
	// same in both versions, and b answers it.
	for range 10 {
		if got := r.mustRead(r.keyB, 0); got != 'a' {
			t.Fatalf("layer0 from b: the feature at %c..., want a...", got)
		}
		r.settle()
		r.mustRead(r.keyA, 0)
		r.settle()
	}
	if got := r.c.Version(); got != v2 {
		t.Errorf("after b's answers (v1) the client's version is %s, want v2's %s (not moved back)", got, v2)
	}
	if n := r.replaced.Load(); n != 1 {
		t.Errorf("%d OnModelReplaced calls, want 1 (the move to v2 only)", n)
	}
	if n := r.frB.modelsFetched() - modelsB; n > 1 {
		t.Errorf("b's models fetched %d times for its v1, want at most once", n)
	}
	if n := strings.Count(r.logs.String(), olderLine); n != 1 {
		t.Errorf("%d INFO lines saying b serves an older version, want 1:\n%s", n, r.logs.String())
	}

	// Layer1 changed (b in v1, c in v2): a read routed to b waits for b's
	// reload, made 500 ms later.
	reloaded := make(chan struct{})
	time.AfterFunc(500*time.Millisecond, func() {
		defer close(reloaded)
		reload(t, r.vxB, r.tsB, tinyVersion("v2", 'a', 'c'))
	})
	got, err := r.read(context.Background(), r.keyB, 1)
	<-reloaded
	if err != nil || got != 'c' {
		t.Fatalf("layer1 from b during the lag: feature at %c..., %v; want v2's (c...) once b reloads", got, err)
	}
	if n, _ := r.frB.asked(1, strings.Repeat("c", 64)); n < 2 {
		t.Errorf("b asked for layer1 at c... %d times, want at least 2 (refused, then asked again)", n)
	}
	r.settle()
	if n := r.replaced.Load(); n != 1 || r.c.Version() != v2 {
		t.Errorf("after b's reload: %d OnModelReplaced calls, version %s; want 1, v2's %s", n, r.c.Version(), v2)
	}
	if n := r.frB.modelsFetched() - modelsB; n > 1 {
		t.Errorf("b's models fetched %d times since a's reload, want at most once", n)
	}
	r.vxB.mu.Lock()
	defer r.vxB.mu.Unlock()
	if n := r.vxB.calls[strings.Repeat("b", 64)]; n != 0 {
		t.Errorf("b computed layer1 of v1 %d times, want 0", n)
	}
}

// A rollback is adopted: server a reloads v2, then v1 again later (b, never
// reloaded, serves v1 loaded before both, judged older meanwhile). The
// rolled-back v1 was loaded after v2, so the client moves to it, and b's
// v1 answers are then the client's own.
func TestClientAdoptsRollback(t *testing.T) {
	r := startRolling(t, ClientConfig{})
	v1 := r.c.Version()
	reload(t, r.vxA, r.tsA, tinyVersion("v2", 'a', 'c'))
	r.mustRead(r.keyA, 0)
	r.settle()
	r.mustRead(r.keyB, 0) // b's v1: older
	r.settle()
	if r.c.Version() == v1 || r.replaced.Load() != 1 {
		t.Fatalf("before the rollback: version %s (v1 %s), %d OnModelReplaced calls; want v2 and 1", r.c.Version(), v1, r.replaced.Load())
	}
	reload(t, r.vxA, r.tsA, tinyVersion("v1", 'a', 'b'))
	r.mustRead(r.keyA, 0)
	r.settle()
	if got := r.c.Version(); got != v1 {
		t.Fatalf("after a's rollback to v1 the client's version is %s, want v1's %s", got, v1)
	}
	if m := r.lastReplaced.Load(); r.replaced.Load() != 2 || m.Digest != "v1" || m.Layers[1].Digest[0] != 'b' {
		t.Errorf("%d OnModelReplaced calls, the last with %s; want 2, the last v1", r.replaced.Load(), m.Digest)
	}
	if m, _ := r.c.Extractor().Model("tiny"); m.Digest != "v1" {
		t.Errorf("the client's model is at %s, want v1", m.Digest)
	}
	for _, key := range []string{r.keyA, r.keyB} {
		if got := r.mustRead(key, 1); got != 'b' {
			t.Errorf("layer1 of %s after the rollback: the feature at %c..., want v1's b...", key, got)
		}
	}
	r.settle()
	if got := r.c.Version(); got != v1 || r.replaced.Load() != 2 {
		t.Errorf("after reads from both: version %s, %d OnModelReplaced calls; want v1's %s, 2", got, r.replaced.Load(), v1)
	}
}

// A lagging server that never reloads: a read of a changed layer routed to
// it is asked again until the client's LagWait is spent, then fails with
// ErrModelReplaced naming the server, never with another version's
// feature; a read whose context ends first fails with its context's error.
func TestClientLaggingServerFailsAfterWait(t *testing.T) {
	r := startRolling(t, ClientConfig{LagWait: time.Second})
	reload(t, r.vxA, r.tsA, tinyVersion("v2", 'a', 'c'))
	r.mustRead(r.keyA, 0)
	r.settle()
	got, err := r.read(context.Background(), r.keyB, 1)
	if !errors.Is(err, api.ErrModelReplaced) || got != 0 {
		t.Fatalf("layer1 from b, which never reloads: feature at %c..., %v; want no feature and an error matching ErrModelReplaced", got, err)
	}
	if msg := err.Error(); !strings.Contains(msg, r.c.Route(r.keyB)) || !strings.Contains(msg, "older version") {
		t.Errorf("the error %q does not name b (%s) or say it serves an older version", msg, r.c.Route(r.keyB))
	}
	// 200 ms, 400 ms, then the 400 ms left: four asks.
	if n, _ := r.frB.asked(1, strings.Repeat("c", 64)); n < 3 {
		t.Errorf("b asked for layer1 at c... %d times, want at least 3 (asked again while waiting)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := r.read(ctx, r.keyB, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a read whose context ends during the wait: %v, want its context's error", err)
	}
	r.vxB.mu.Lock()
	defer r.vxB.mu.Unlock()
	if n := r.vxB.calls[strings.Repeat("b", 64)]; n != 0 {
		t.Errorf("b computed layer1 of v1 %d times, want 0", n)
	}
}

// Servers that do not say when they loaded a model (no loaded_at: older
// servers) are followed as before: the client moves to the version of the
// server that answered, whichever it is.
func TestClientFollowsServersWithoutLoadedAt(t *testing.T) {
	r := startRolling(t, ClientConfig{})
	r.vxA.mu.Lock()
	r.vxA.untimed = true
	r.vxA.mu.Unlock()
	r.vxB.mu.Lock()
	r.vxB.untimed = true
	r.vxB.mu.Unlock()
	v1 := r.c.Version()
	reload(t, r.vxA, r.tsA, tinyVersion("v2", 'a', 'c'))
	resp := authorizedDo(t, "GET", r.tsA.URL+"/v1/models", nil)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Contains(string(body), "loaded_at") {
		t.Fatalf("models answer of an extractor that does not tell load times: %v, loaded_at in it: %v", err, strings.Contains(string(body), "loaded_at"))
	}
	r.mustRead(r.keyA, 0)
	r.settle()
	v2 := r.c.Version()
	if v2 == v1 || r.replaced.Load() != 1 {
		t.Fatalf("after a's reload: version %s (v1 %s), %d OnModelReplaced calls; want v2 and 1", v2, v1, r.replaced.Load())
	}
	r.mustRead(r.keyB, 0) // b's v1, of no known load time: followed, as before
	r.settle()
	if got := r.c.Version(); got != v1 || r.replaced.Load() != 2 {
		t.Errorf("after b's answer (v1, no loaded_at): version %s, %d OnModelReplaced calls; want v1's %s and 2 (followed as before)", got, r.replaced.Load(), v1)
	}
}

// A mount dialled in the middle of a rolling deploy (server a reloaded to
// v2, b still at v1) starts on the newest version with one WARN line,
// instead of refusing to start because the servers disagree; a read of the
// changed layer routed to b waits for b's reload and gets v2's feature,
// and b's unchanged layer is served at once. Servers whose versions cannot
// be ordered (no loaded_at) still disagree.
func TestDialDuringRollingDeploy(t *testing.T) {
	r := startRollingAfter(t, ClientConfig{}, func(r *rolling) {
		time.Sleep(5 * time.Millisecond) // a's v2 loaded after b's v1
		reload(t, r.vxA, r.tsA, tinyVersion("v2", 'a', 'c'))
	})
	if m := r.c.set.Load().byName["tiny"]; m == nil || m.Digest != "v2" {
		t.Fatalf("dialled during a deploy, the client holds %v, want v2", m)
	}
	if !strings.Contains(r.logs.String(), "serve different versions of a model") {
		t.Errorf("no WARN line for the servers' different versions:\n%s", r.logs.String())
	}
	if got := r.mustRead(r.keyB, 0); got != 'a' {
		t.Errorf("b's unchanged layer0: digest %c..., want a...", got)
	}
	time.AfterFunc(500*time.Millisecond, func() { reload(t, r.vxB, r.tsB, tinyVersion("v2", 'a', 'c')) })
	start := time.Now()
	if got := r.mustRead(r.keyB, 1); got != 'c' {
		t.Errorf("b's changed layer1 after b's reload: digest %c..., want c... (v2)", got)
	}
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Errorf("layer1 on b came back after %v, before b reloaded", waited)
	}
	if got := r.mustRead(r.keyA, 1); got != 'c' {
		t.Errorf("a's layer1: digest %c..., want c...", got)
	}

	// No load times: the versions cannot be ordered, and the dial fails.
	objs := map[string]string{"x.jpg": "x"}
	dir := writeObjects(t, objs)
	vx1, vx2 := newVersionedExtractor(tinyVersion("v1", 'a', 'b')), newVersionedExtractor(tinyVersion("v2", 'a', 'c'))
	vx1.untimed, vx2.untimed = true, true
	ts1 := startServerIn(t, dir, func(c *testConfig) { c.Extractor = vx1 })
	ts2 := startServerIn(t, dir, func(c *testConfig) { c.Extractor = vx2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, clientLimits(ClientConfig{URLs: []string{ts1.URL, ts2.URL}, Token: testToken}))
	if err == nil {
		c.Close()
		t.Fatal("servers of unordered versions dialled; want them to disagree")
	}
	if !strings.Contains(err.Error(), "disagree") {
		t.Errorf("dial error %v, want one saying the servers disagree", err)
	}
}
