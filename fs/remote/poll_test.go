package remote

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// countingTransport counts the requests it carries by method and path.
type countingTransport struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[req.Method+" "+req.URL.Path]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (c *countingTransport) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// TestClientPollsForServerReload: a client with a PollInterval follows
// its server's reload while it makes no read at all (a mount whose reads
// all hit its own cache): it asks with HEAD /v1/models (no body), fetches
// GET /v1/models only once the version changed, and hands the new version
// to OnModelReplaced within the interval and one fetch. Without one (as
// every client was at 1942f8f), the client stays on the old version until
// an answer reaches it. Closing the client stops the polls.
func TestClientPollsForServerReload(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	tr := &countingTransport{n: map[string]int{}}
	const interval = 100 * time.Millisecond
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, PollInterval: interval, Transport: tr})
	still := dial(t, ClientConfig{URLs: []string{ts.URL}}) // no polls
	replaced := make(chan *api.Model, 4)
	c.OnModelReplaced(func(m *api.Model) { replaced <- m })
	stillReplaced := make(chan *api.Model, 4)
	still.OnModelReplaced(func(m *api.Model) { stillReplaced <- m })

	time.Sleep(5 * interval)
	if heads, gets := tr.count("HEAD /v1/models"), tr.count("GET /v1/models"); heads < 2 || gets != 1 {
		t.Errorf("before any reload: %d HEAD and %d GET /v1/models, want polls (at least 2 HEAD) and the Dial's one GET", heads, gets)
	}

	vx.replace(tinyVersion("v2", 'a', 'c'))
	if err := ts.ModelsChanged(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case m := <-replaced:
		if m.Digest != "v2" {
			t.Errorf("OnModelReplaced got %s, want v2", m.Digest)
		}
		t.Logf("followed the reload in %v (poll interval %v)", time.Since(start).Round(time.Millisecond), interval)
	case <-time.After(10 * time.Second): // the bound is interval + one fetch: generous for a loaded machine
		t.Fatalf("a polling client with no reads did not follow the server's reload in 10 s (%d HEAD polls)", tr.count("HEAD /v1/models"))
	}
	if gets := tr.count("GET /v1/models"); gets != 2 {
		t.Errorf("%d GET /v1/models, want 2 (the Dial's and the refresh's)", gets)
	}
	if m, _ := c.Extractor().Model("tiny"); m.Digest != "v2" {
		t.Errorf("the polling client serves %s, want v2", m.Digest)
	}
	select {
	case m := <-stillReplaced:
		t.Errorf("a client without polls and without reads learnt of %s: the test does not show what polls add", m.Digest)
	case <-time.After(5 * interval):
	}
	if m, _ := still.Extractor().Model("tiny"); m.Digest != "v1" {
		t.Errorf("a client without polls or reads serves %s, want still v1", m.Digest)
	}

	c.Close()
	n := tr.count("HEAD /v1/models")
	time.Sleep(5 * interval)
	if after := tr.count("HEAD /v1/models"); after != n {
		t.Errorf("%d polls after Close", after-n)
	}
}
