package remote

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestBearerSchemeAnyCase: the Authorization scheme is case-insensitive
// (RFC 7235 section 2.1): "bearer", "BEARER" and "Bearer" with the token
// are accepted; the token itself is not.
func TestBearerSchemeAnyCase(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "hello"}, nil)
	for auth, want := range map[string]int{
		"bearer " + testToken:                  200,
		"BEARER " + testToken:                  200,
		"Bearer  " + testToken:                 200,
		"bearer " + "S3CR3T":                   401,
		"bearer" + testToken:                   401,
		"Bearer " + strings.ToUpper(testToken): 401,
	} {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: status %d, want %d", strings.ReplaceAll(auth, testToken, "TOKEN"), resp.StatusCode, want)
		}
	}
}

// TestWrongMethodIs405: a known path with another method is 405 with an
// Allow header naming its method; an unknown path is 404; both need the
// token first.
func TestWrongMethodIs405(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "hello"}, nil)
	for _, e := range []struct{ method, path, allow string }{
		{"POST", "/v1/models", "GET, HEAD"},
		{"DELETE", "/v1/list", "GET, HEAD"},
		{"PUT", "/v1/stat", "GET, HEAD"},
		{"POST", "/v1/feature", "GET, HEAD"},
		{"GET", "/v1/batch", "POST"},
		{"PATCH", "/v1/stats", "GET, HEAD"},
		{"POST", "/v1/profile", "GET, HEAD"},
		{"POST", "/v1/probe", "GET, HEAD"},
		{"PUT", "/v1/object", "GET, HEAD"},
		{"POST", "/v1/load", "GET, HEAD"},
	} {
		resp := authorizedDo(t, e.method, ts.URL+e.path, nil)
		var er ErrorResponse
		json.NewDecoder(resp.Body).Decode(&er)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != e.allow || er.Status != 405 {
			t.Errorf("%s %s: status %d, Allow %q, body %+v; want 405, Allow %q", e.method, e.path, resp.StatusCode, resp.Header.Get("Allow"), er, e.allow)
		}
	}
	resp := authorizedDo(t, "GET", ts.URL+"/v1/nothing", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/nothing: %d, want 404", resp.StatusCode)
	}
	resp, err := http.Post(ts.URL+"/v1/models", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/models without a token: %d, want 401", resp.StatusCode)
	}
}

// batchStatuses posts items and returns each item's status and message.
func batchStatuses(t *testing.T, ts *testServer, items []BatchItem) ([]int, []string) {
	t.Helper()
	body, _ := json.Marshal(BatchRequest{Items: items})
	resp := authorizedDo(t, "POST", ts.URL+"/v1/batch", bytes.NewReader(body))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("batch: %d %s", resp.StatusCode, b)
	}
	n, err := readStreamHeader(resp.Body)
	if err != nil || n != len(items) {
		t.Fatalf("batch stream header: %d items, %v", n, err)
	}
	st, msgs := make([]int, n), make([]string, n)
	for got := 0; got < n; {
		f, err := ReadFrame(resp.Body, 1<<30)
		if err != nil {
			t.Fatalf("batch frame: %v", err)
		}
		if f.Index == HeartbeatIndex {
			continue
		}
		st[f.Index], msgs[f.Index] = int(f.Status), f.Message
		got++
	}
	return st, msgs
}

// TestLongKeysAreNotServerErrors: a 300-byte key (one name longer than the
// file system allows) is 404, a key over MaxKeyBytes 400, never 500, in a
// batch, GET /v1/feature, /v1/stat and /v1/object.
func TestLongKeysAreNotServerErrors(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "hello"}, nil)
	k300 := "a/" + strings.Repeat("k", 294) + ".jpg"
	k2000 := strings.Repeat("d/", 1000) + "x.jpg"
	st, msgs := batchStatuses(t, ts, []BatchItem{{Model: "tiny", Layer: 0, Key: k300}, {Model: "tiny", Layer: 0, Key: k2000}, {Model: "tiny", Layer: 0, Key: "a/x.jpg"}})
	if st[0] != StatusNotFound || st[1] != StatusBadRequest || st[2] != StatusOK {
		t.Errorf("batch statuses %v (%q); want 404 for a 300-byte key, 400 for a 2000-byte one, 200", st, msgs)
	}
	for _, key := range []string{k300, k2000} {
		want := StatusNotFound
		if len(key) > MaxKeyBytes {
			want = StatusBadRequest
		}
		for _, p := range []string{"/v1/feature?model=tiny&layer=0&key=", "/v1/stat?key=", "/v1/object?key="} {
			resp := authorizedDo(t, "GET", ts.URL+p+url.QueryEscape(key), nil)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s<%d-byte key>: %d, want %d", p, len(key), resp.StatusCode, want)
			}
		}
	}
}

// TestErrorsNameKeysNotPaths: the errors a client is told (batch items,
// /v1/feature, /v1/stat, /v1/object, /v1/list) name the key but never the
// server's directory; the server's log keeps it.
func TestErrorsNameKeysNotPaths(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "hello", "a/dir.jpg/y.jpg": "x", "a/bad.jpg": "BAD image"}, nil)
	items := []BatchItem{{Model: "tiny", Layer: 0, Key: "a/missing.jpg"}, {Model: "tiny", Layer: 0, Key: "a/dir.jpg"},
		{Model: "tiny", Layer: 0, Key: "a/bad.jpg"}, {Model: "tiny", Layer: 0, Key: "a/x.jpg/under.jpg"}}
	st, msgs := batchStatuses(t, ts, items)
	var told []string
	for i, m := range msgs {
		if st[i] == StatusOK || st[i] == StatusInternal {
			t.Errorf("item %s: status %d %q, want an error status other than 500", items[i].Key, st[i], m)
		}
		// A bad image's message is its reason (the client names the key).
		if st[i] != StatusBadImage && !strings.Contains(m, items[i].Key) {
			t.Errorf("item %s: message %q does not name the key", items[i].Key, m)
		}
		told = append(told, m)
	}
	for _, p := range []string{"/v1/feature?model=tiny&layer=0&key=a/missing.jpg", "/v1/stat?key=a/missing.jpg", "/v1/object?key=a/missing.jpg",
		"/v1/stat?key=a/dir.jpg", "/v1/list?prefix=a/x.jpg/"} {
		resp := authorizedDo(t, "GET", ts.URL+p, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			continue // a listing of a missing prefix may be empty
		}
		told = append(told, string(b))
	}
	for _, m := range told {
		if strings.Contains(m, ts.Dir) || strings.Contains(m, "file://") {
			t.Errorf("a client was told the server's path: %q", m)
		}
	}
	if !strings.Contains(ts.Logs.String(), ts.Dir) {
		t.Errorf("the server's log does not keep the path of the failures")
	}
}

// TestSlowReaderHoldsBoundedBytes: a batch of large features from a client
// that never reads: the server holds at most MaxBufferedBytesPerRequest of
// its answers, computes not much more than that, disconnects it after
// WriteTimeout, gives every byte back, and answers another client
// meanwhile.
func TestSlowReaderHoldsBoundedBytes(t *testing.T) {
	objects := map[string]string{}
	var items []BatchItem
	for i := range 200 {
		k := fmt.Sprintf("big/%03d.jpg", i)
		objects[k] = k
		items = append(items, BatchItem{Model: "tiny", Layer: 0, Key: k})
	}
	objects["other/x.jpg"] = "x"
	const perRequest = 8 << 20
	dir := writeObjects(t, objects)
	// Features of 1 MiB (256x32x32 float32).
	ts := startServerEx(t, dir, newFakeExtractorShape([]int64{256, 32, 32}), func(c *testConfig) {
		c.MaxBufferedBytesPerRequest = perRequest
		c.MaxBufferedBytes = 2 * perRequest
		c.WriteTimeout = 500 * time.Millisecond
	})
	body, _ := json.Marshal(BatchRequest{Items: items})
	u, _ := url.Parse(ts.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A small receive buffer: the server's writes block soon.
	c.(*net.TCPConn).SetReadBuffer(64 << 10)
	fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testToken, len(body), body)

	deadline := time.Now().Add(15 * time.Second)
	var peak int64
	for time.Now().Before(deadline) {
		st := ts.Stats()
		peak = max(peak, st.BufferedBytes)
		if st.BufferedBytes > perRequest {
			t.Fatalf("%d bytes buffered for a client that does not read, bound %d", st.BufferedBytes, perRequest)
		}
		if st.Batches == 1 && st.BufferedBytes == 0 && ts.Ex.Calls.Load() > 0 && st.InFlight == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Another client is answered while (or after) the first one stalls.
	st, _ := batchStatuses(t, ts, []BatchItem{{Model: "tiny", Layer: 0, Key: "other/x.jpg"}})
	if st[0] != StatusOK {
		t.Errorf("another client's item: %d", st[0])
	}
	// (The other answer's bytes are given back just after they are written.)
	for wait := time.Now().Add(2 * time.Second); ts.Stats().BufferedBytes != 0 && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	if b := ts.Stats().BufferedBytes; b != 0 {
		t.Errorf("%d bytes still buffered after the client was disconnected", b)
	}
	calls := ts.Ex.Calls.Load() - 1
	// The client's socket buffers and the server's hold some items; the
	// budget 8 more; the rest were never computed.
	if calls >= int64(len(items))/2 {
		t.Errorf("%d of %d items computed for a client that read nothing: its work was not cancelled", calls, len(items))
	}
	// The connection was closed by the server.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the connection of a client that read nothing is still open (%d bytes read)", n)
	}
	t.Logf("peak buffered %d bytes (bound %d), %d items computed of %d, %d bytes had reached the client", peak, perRequest, calls, len(items), n)
	if !strings.Contains(ts.Logs.String(), "not reading") {
		t.Errorf("no log line says the client was disconnected")
	}
}
