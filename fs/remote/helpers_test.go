package remote

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/mountopts"

	"github.com/featurefs/featurefs/test/testenv"
)

// testToken is the bearer token of the test servers.
const testToken = "s3cr3t-t0ken-for-tests"

// fakeShape is the fake model's one layer shape (per sample).
var fakeShape = []int64{2, 4}

// fakeExtractor is an features.Extractor whose feature of an object is a fixed
// function of its bytes (expectedFeature), fetched through req.Fetch:
// objects starting with "BAD" are bad images. It counts calls, tracks
// concurrency, and can be slowed down.
type fakeExtractor = fakes.Extractor

func newFakeExtractor() *fakeExtractor { return newFakeExtractorShape(fakeShape) }

// newFakeExtractorShape returns a fake whose layers have shape; features
// of shapes other than fakeShape hold the object's size and the layer
// index, then zeros.
func newFakeExtractorShape(shape []int64) *fakeExtractor {
	m := &api.Model{Name: "tiny", Digest: "d1g35t", Preprocess: api.DefaultPreprocess(),
		Aliases: map[string]string{"pool": "layer1"}}
	for i := range 2 {
		m.Layers = append(m.Layers, api.Layer{Index: i, Name: "layer" + string(rune('0'+i)), Tensor: "t" + string(rune('0'+i)),
			Shape: shape, Bytes: 4 * api.Layer{Shape: shape}.Elements(), Digest: strings.Repeat(string(rune('a'+i)), 64)})
	}
	x := fakes.NewExtractor(func(l api.Layer, b []byte, _ api.DType) []byte {
		if !slices.Equal(l.Shape, fakeShape) {
			data := make([]float32, l.Elements())
			copy(data, []float32{float32(len(b)), float32(l.Index)})
			return api.EncodeNPY(l.Shape, data, api.Float32)
		}
		return expectedFeature(b, l.Index)
	}, m)
	x.BadErr = errors.New("fake decoder")
	return x
}

// expectedFeature is the fake model's feature of content at a layer.
func expectedFeature(content []byte, layer int) []byte {
	data := make([]float32, 8)
	for i := range data {
		if i < len(content) {
			data[i] = float32(content[i]) + float32(layer)*1000
		}
	}
	return api.EncodeNPY(fakeShape, data, api.Float32)
}

// memCache is a Cache in memory.
type memCache = fakes.Cache

func newMemCache() *memCache { return fakes.NewCache() }

// testServer is a Server behind httptest, over a directory of objects.
type testServer struct {
	*Server
	URL  string
	Dir  string
	Ex   *fakeExtractor
	Logs *syncBuffer
	http *httptest.Server
	// hang, when set, makes every request block until the test ends (a
	// server that stopped answering).
	hang    atomic.Bool
	release chan struct{}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = testenv.SyncBuffer

// pipelineConfig is features.Config, named so that testConfig can embed it
// next to ServerConfig.
type pipelineConfig = features.Config

// testConfig is what the tests build a server from: the settings of its
// pipeline and its own.
type testConfig struct {
	pipelineConfig
	ServerConfig
}

// newTestServer builds the pipeline of cfg and the server over it, as
// featurefs serve does: the pipeline's ReadTimeout is the item timeout,
// 5m unless cfg sets it. The pipeline is closed when the test ends, after
// the test's own clean-ups.
func newTestServer(t testing.TB, cfg testConfig) (*Server, error) {
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = mountopts.DefaultServe().ItemTimeout // serve's --item-timeout
	}
	p, err := features.New(cfg.pipelineConfig)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { p.Close() })
	return NewServer(p, serverLimits(cfg.ServerConfig))
}

// serverLimits gives the limits cfg leaves zero featurefs serve's defaults
// (mountopts), as its flags pass them: NewServer defaults none.
func serverLimits(cfg ServerConfig) ServerConfig {
	d := mountopts.DefaultServe()
	cfg.MaxConcurrent = cmp.Or(cfg.MaxConcurrent, d.MaxConcurrent)
	cfg.MaxBatchItems = cmp.Or(cfg.MaxBatchItems, d.MaxBatchItems)
	cfg.MaxRequestBytes = cmp.Or(cfg.MaxRequestBytes, d.MaxRequestBytes)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, d.Heartbeat)
	cfg.MaxBufferedBytes = cmp.Or(cfg.MaxBufferedBytes, d.MaxBufferedBytes)
	cfg.MaxBufferedBytesPerRequest = cmp.Or(cfg.MaxBufferedBytesPerRequest, d.MaxBufferedBytesPerRequest)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, d.WriteTimeout)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, 30*time.Second) // featurefs serve's serveBodyTimeout
	return cfg
}

// clientLimits gives the limits cfg leaves zero featurefs mount's
// defaults (mountopts), as its --remote-* flags pass them: Dial defaults
// none.
func clientLimits(cfg ClientConfig) ClientConfig {
	d := mountopts.DefaultRemote()
	cfg.Timeout = cmp.Or(cfg.Timeout, d.Timeout)
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, d.MaxBatch)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, d.BatchWait)
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, d.MaxInFlight)
	return cfg
}

// startServer serves objects (key -> content) with a fake extractor.
func startServer(t testing.TB, objects map[string]string, tweak func(*testConfig)) *testServer {
	t.Helper()
	return startServerIn(t, writeObjects(t, objects), tweak)
}

// writeObjects writes objects (key -> content) into a new directory.
func writeObjects(t testing.TB, objects map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range objects {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startServerIn serves the objects of dir with a fake extractor.
func startServerIn(t testing.TB, dir string, tweak func(*testConfig)) *testServer {
	t.Helper()
	return startServerEx(t, dir, newFakeExtractor(), tweak)
}

// startServerEx serves the objects of dir with ex.
func startServerEx(t testing.TB, dir string, ex *fakeExtractor, tweak func(*testConfig)) *testServer {
	t.Helper()
	b, err := bucket.Open(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Dir: dir, Ex: ex, Logs: &syncBuffer{}, release: make(chan struct{})}
	cfg := testConfig{pipelineConfig{
		Bucket: b, Extractor: ts.Ex, Cache: newMemCache(),
		Logger: slog.New(slog.NewTextHandler(ts.Logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, ServerConfig{Token: testToken, Heartbeat: 50 * time.Millisecond}}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := newTestServer(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Server = s
	ts.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ts.hang.Load() {
			<-ts.release
			return
		}
		s.ServeHTTP(w, r)
	}))
	ts.URL = ts.http.URL
	t.Cleanup(func() {
		close(ts.release)
		ts.http.CloseClientConnections()
		ts.http.Close()
		s.Close()
	})
	return ts
}

// dial connects a client to servers and closes it when the test ends.
func dial(t testing.TB, cfg ClientConfig) *Client {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, clientLimits(cfg))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// etagOf stats key on the server's source.
func etagOf(t *testing.T, c *Client, key string) string {
	t.Helper()
	o, err := c.Bucket().Stat(context.Background(), key)
	if err != nil {
		t.Fatalf("stat %s: %v", key, err)
	}
	return o.ETag
}

// mountTree is an fs.FS over a client, as `featurefs mount --remote` builds
// it, with a memory cache, and the pipeline it reads through (closed when
// the test ends).
func mountTree(t *testing.T, c *Client) (*featurefs.FS, *features.Pipeline, *memCache) {
	t.Helper()
	mc := newMemCache()
	p, err := features.New(features.Config{Bucket: c.Bucket(), Extractor: c.Extractor(), Cache: mc, MetadataTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tree, err := featurefs.New(p, featurefs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return tree, p, mc
}

// featureReq asks for the fake model's feature of key at layer.
func featureReq(key string, layer int, etag string) api.Request {
	return api.Request{Model: "tiny", Layer: layer, Key: key, ETag: etag}
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// authorizedDo sends a request with the test token; the caller closes the
// response's body.
func authorizedDo(t testing.TB, method, url string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// newTLSTestServer serves h over TLS with httptest's certificate.
func newTLSTestServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted client's handshake errors
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// layersTable returns the layers table of model name as x shows it
// (api.Model.Table), and whether x has the model.
func layersTable(x interface {
	Model(string) (*api.Model, bool)
}, name string) (string, bool) {
	m, ok := x.Model(name)
	if !ok {
		return "", false
	}
	return m.Table(), true
}
