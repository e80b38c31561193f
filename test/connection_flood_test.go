package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodNoFile is the descriptor limit the flooded processes run with, so
// that a few thousand connections exhaust a listener without bounds.
const floodNoFile = 1024

// floodConns is how many held-open connections the flood makes.
const floodConns = 3000

// flood opens up to n connections to addr (127.0.0.1) within limit, each
// sending request headers that promise a 10-byte body it never sends, and
// keeps them open until the returned stop is called. It returns how many
// dials succeeded.
func flood(t *testing.T, addr string, n int, limit time.Duration) (stop func() int) {
	t.Helper()
	var (
		mu    sync.Mutex
		conns []net.Conn
		ok    int
	)
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: time.Second}
			for range next {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					continue
				}
				fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
				mu.Lock()
				conns = append(conns, c)
				ok++
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	return func() int {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		return ok
	}
}

// freeAddr returns a free 127.0.0.1 port's address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// timedDo sends a request (with the token if not empty) and returns how
// long it took and the body of a 200 answer.
func timedDo(client *http.Client, method, u, token string, body []byte) (time.Duration, []byte, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), client.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return time.Since(start), nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, lastBytes(string(b), 200))
	}
	return time.Since(start), b, err
}

// TestConnectionFloodServe: 3000 held-open connections (headers promising
// a body that never comes) against `featurefs serve` running with 1024
// descriptors: an authorized client's models and batch requests
// (features computed and cached) keep working within their normal
// latency, the server holds no more connections than its bound, and it
// logs that it sheds them. Before the bounds, the flood took every
// descriptor (accept: too many open files) and the authorized requests
// timed out.
func TestConnectionFloodServe(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "12", "--val", "0", "--formats", "jpg")
	s := startServeNoFile(t, floodNoFile, d.Dir, nil, "--heartbeat", "500ms")
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	imgs := d.images("train/")
	batch := func(keys ...string) []byte {
		var items []map[string]any
		for _, k := range keys {
			items = append(items, map[string]any{"model": modelName, "layer": 12, "key": k})
		}
		b, _ := json.Marshal(map[string]any{"items": items})
		return b
	}
	// Normal latency: a computed feature and a cached one, before the flood.
	if _, _, err := timedDo(client, "POST", s.URL+"/v1/batch", s.Token, batch(imgs[0].Key)); err != nil {
		t.Fatal(err)
	}
	var normal time.Duration
	for i := 1; i <= 3; i++ {
		took, _, err := timedDo(client, "POST", s.URL+"/v1/batch", s.Token, batch(imgs[i].Key))
		if err != nil {
			t.Fatal(err)
		}
		normal = max(normal, took)
	}
	t.Logf("normal latency of a computed feature: %v", normal)

	stop := flood(t, u.Host, floodConns, 20*time.Second)
	floodStopped := false
	defer func() {
		if !floodStopped {
			stop()
		}
	}()
	time.Sleep(2 * time.Second)       // the flood is under way
	bound := 3*normal + 5*time.Second // a loaded 2-core machine
	for i := 4; i < len(imgs); i++ {
		client.CloseIdleConnections() // a new connection each time, in the flood
		took, _, err := timedDo(client, "GET", s.URL+"/v1/models", s.Token, nil)
		if err != nil || took > bound {
			t.Errorf("GET /v1/models during the flood: %v after %v (bound %v)", err, took, bound)
		}
		took, body, err := timedDo(client, "POST", s.URL+"/v1/batch", s.Token, batch(imgs[i].Key, imgs[0].Key))
		if err != nil || took > bound {
			t.Errorf("POST /v1/batch (a computed and a cached feature) during the flood: %v after %v (bound %v)", err, took, bound)
		} else if len(body) < 2*800_000 {
			t.Errorf("POST /v1/batch during the flood: %d bytes, want two layer12 features", len(body))
		}
		if t.Failed() {
			break // (each failure waits out the client's timeout)
		}
	}
	fds := fdCount(t, s.PID())
	dialed := stop()
	floodStopped = true
	t.Logf("flood: %d connections made; server descriptors during it: %d (limit %d)", dialed, fds, floodNoFile)
	if dialed < floodConns/2 {
		t.Errorf("only %d of %d flood connections were made: the flood did not happen", dialed, floodConns)
	}
	if fds >= floodNoFile-100 {
		t.Errorf("the server held %d descriptors of %d during the flood", fds, floodNoFile)
	}
	if !strings.Contains(s.Log(), "connection bound reached") {
		t.Errorf("the server's log does not say it shed connections")
	}
}

// TestConnectionFloodMetrics: 3000 held-open connections against a
// mount's --metrics-addr, the mount running with 1024 descriptors: reads
// of features never computed before (each opens its image) keep working
// within their normal latency, and a /metrics scrape still answers. Before
// the bounds, the metrics port took every descriptor and reads failed
// with EIO (open: too many open files).
func TestConnectionFloodMetrics(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "12", "--val", "0", "--formats", "jpg")
	addr := freeAddr(t)
	m := testMount(t, mountConfig{Source: d.Dir, NoFile: floodNoFile, Args: []string{"--metrics-addr", addr, "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	imgs := d.images("train/")
	read := func(i int) (time.Duration, error) {
		start := time.Now()
		b, err := os.ReadFile(filepath.Join(m.Layer(testLayer), names[imgs[i].Key]))
		if err == nil && len(b) < 800_000 {
			err = fmt.Errorf("%d bytes", len(b))
		}
		return time.Since(start), err
	}
	if _, err := read(0); err != nil {
		t.Fatal(err)
	}
	var normal time.Duration
	for i := 1; i <= 3; i++ {
		took, err := read(i)
		if err != nil {
			t.Fatal(err)
		}
		normal = max(normal, took)
	}
	t.Logf("normal latency of a feature computed on read: %v", normal)

	base := fdCount(t, m.PID())
	stop := flood(t, addr, floodConns, 20*time.Second)
	floodStopped := false
	defer func() {
		if !floodStopped {
			stop()
		}
	}()
	time.Sleep(2 * time.Second)
	bound := 3*normal + 5*time.Second
	for i := 4; i < len(imgs); i++ {
		took, err := read(i)
		if err != nil || took > bound {
			t.Errorf("read of a new feature during the flood: %v after %v (bound %v)", err, took, bound)
			break
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	took, body, err := timedDo(client, "GET", "http://"+addr+"/metrics", "", nil)
	if err != nil || took > bound || !strings.Contains(string(body), "featurefs_") {
		t.Errorf("GET /metrics during the flood: %v after %v (bound %v)", err, took, bound)
	}
	client.CloseIdleConnections()
	fds := fdCount(t, m.PID())
	dialed := stop()
	floodStopped = true
	t.Logf("flood: %d connections made; mount descriptors before it %d, during it %d (limit %d)", dialed, base, fds, floodNoFile)
	if dialed < floodConns/2 {
		t.Errorf("only %d of %d flood connections were made: the flood did not happen", dialed, floodConns)
	}
	if fds > base+64+32 {
		t.Errorf("the mount held %d descriptors during the flood, %d before; its metrics port may take 64", fds, base)
	}
}
