package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// postBatch sends a raw batch request and returns the item frames by index
// (heartbeats dropped) and the response.
func postBatch(t *testing.T, url, body string) (*http.Response, map[uint32]Frame) {
	t.Helper()
	resp := authorizedDo(t, "POST", url+"/v1/batch", strings.NewReader(body))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	n, err := readStreamHeader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	frames := map[uint32]Frame{}
	for len(frames) < n {
		f, err := ReadFrame(resp.Body, 1<<20)
		if err != nil {
			t.Fatalf("after %d of %d frames: %v", len(frames), n, err)
		}
		if f.Index == HeartbeatIndex {
			continue
		}
		if _, dup := frames[f.Index]; dup {
			t.Fatalf("item %d answered twice", f.Index)
		}
		frames[f.Index] = f
	}
	if f, err := ReadFrame(resp.Body, 1<<20); err == nil {
		t.Errorf("frame after the last item: %+v", f)
	}
	return resp, frames
}

// TestBatchPerItemErrors: one batch with good items, a bad image, a missing
// object, a stale ETag, an unknown model and layer, a duplicate: each item
// gets its own status and message, the good ones their features, and the
// client maps each status back to the error kind the mount needs.
func TestBatchPerItemErrors(t *testing.T) {
	ts := startServer(t, map[string]string{"a/good.jpg": "good-bytes", "a/other.jpg": "other", "a/bad.jpg": "BAD data"}, nil)
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	good := etagOf(t, c, "a/good.jpg")
	body := fmt.Sprintf(`{"items":[
		{"model":"tiny","layer":0,"key":"a/good.jpg","etag":%q},
		{"model":"tiny","layer":1,"key":"a/bad.jpg"},
		{"model":"tiny","layer":0,"key":"a/missing.jpg"},
		{"model":"tiny","layer":0,"key":"a/good.jpg","etag":"stale-etag"},
		{"model":"nope","layer":0,"key":"a/good.jpg"},
		{"model":"tiny","layer":7,"key":"a/good.jpg"},
		{"model":"tiny","layer":0,"key":""},
		{"model":"tiny","layer":0,"key":"a/good.jpg","etag":%q},
		{"model":"tiny","layer":1,"key":"a/other.jpg"}]}`, good, good)
	resp, frames := postBatch(t, ts.URL, body)
	if resp.Header.Get("Content-Type") != BatchContentType {
		t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	want := []struct {
		status int
		msg    string
		data   []byte
	}{
		{200, "", expectedFeature([]byte("good-bytes"), 0)},
		{422, "not an image", nil},
		{404, "not found", nil},
		{409, "changed", nil},
		{400, "unknown model", nil},
		{400, "unknown layer", nil},
		{400, "key", nil},
		{200, "", expectedFeature([]byte("good-bytes"), 0)},
		{200, "", expectedFeature([]byte("other"), 1)},
	}
	for i, w := range want {
		f := frames[uint32(i)]
		if int(f.Status) != w.status || !strings.Contains(f.Message, w.msg) || !bytes.Equal(f.Data, w.data) {
			t.Errorf("item %d: status %d message %q (%d bytes), want %d containing %q (%d bytes)", i, f.Status, f.Message, len(f.Data), w.status, w.msg, len(w.data))
		}
	}
	if ts.Stats().Shared != 1 {
		t.Errorf("duplicate items shared: %d, want 1", ts.Stats().Shared)
	}

	// Through the client: error kinds survive the wire.
	ex := c.Extractor()
	ctx := context.Background()
	if _, err := ex.Extract(ctx, featureReq("a/bad.jpg", 0, "")); !errors.Is(err, api.ErrBadImage) {
		t.Errorf("bad image: %v, want ErrBadImage", err)
	} else if ie := (*api.ImageError)(nil); !errors.As(err, &ie) || ie.Key != "a/bad.jpg" {
		t.Errorf("bad image: %v, want an *ImageError for a/bad.jpg", err)
	}
	if _, err := ex.Extract(ctx, featureReq("a/missing.jpg", 0, "")); !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("missing: %v, want bucket.ErrNotFound", err)
	}
	if _, err := ex.Extract(ctx, featureReq("a/good.jpg", 0, "stale")); !errors.Is(err, features.ErrObjectChanged) {
		t.Errorf("stale etag: %v, want features.ErrObjectChanged", err)
	}
	if _, err := ex.Extract(ctx, api.Request{Model: "nope", Key: "a/good.jpg"}); !errors.Is(err, api.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := ex.Extract(ctx, featureReq("a/good.jpg", 9, "")); !errors.Is(err, api.ErrUnknownLayer) {
		t.Errorf("unknown layer: %v", err)
	}
	got, err := ex.Extract(ctx, featureReq("a/good.jpg", 1, good))
	if err != nil || !bytes.Equal(got, expectedFeature([]byte("good-bytes"), 1)) {
		t.Errorf("good item: %v (%d bytes)", err, len(got))
	}
	st := ex.Stats()
	if st.BadImages != 1 || st.Completed != 1 || st.Failed != 3 {
		t.Errorf("client stats %+v: want 1 bad image, 1 completed, 3 failed", st)
	}
}

// TestBatchLimits: a body over MaxRequestBytes and a batch over
// MaxBatchItems are refused whole with 413; malformed JSON with 400; the
// features computed at once never exceed MaxConcurrent.
func TestBatchLimits(t *testing.T) {
	objs := map[string]string{}
	for i := range 40 {
		objs[fmt.Sprintf("k/%02d.jpg", i)] = fmt.Sprintf("content %d", i)
	}
	ts := startServer(t, objs, func(c *testConfig) {
		c.MaxRequestBytes = 4096
		c.MaxBatchItems = 40
		c.MaxConcurrent = 3
	})
	ts.Ex.Delay = 5 * time.Millisecond
	var items []string
	for i := range 40 {
		items = append(items, fmt.Sprintf(`{"model":"tiny","layer":0,"key":"k/%02d.jpg"}`, i))
	}
	resp, frames := postBatch(t, ts.URL, `{"items":[`+strings.Join(items, ",")+`]}`)
	if resp.StatusCode != 200 || len(frames) != 40 {
		t.Fatalf("40 items: status %d, %d frames", resp.StatusCode, len(frames))
	}
	if m := ts.Ex.MaxRunning.Load(); m > 3 || m < 2 {
		t.Errorf("at most %d extractions ran at once, want 2..3 (MaxConcurrent 3)", m)
	}
	resp, _ = postBatch(t, ts.URL, `{"items":[`+strings.Join(append(items, items[0]), ",")+`]}`)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("41 items: status %d, want 413", resp.StatusCode)
	}
	resp, _ = postBatch(t, ts.URL, `{"items":[{"model":"`+strings.Repeat("x", 5000)+`"}]}`)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("5000-byte body: status %d, want 413", resp.StatusCode)
	}
	resp, _ = postBatch(t, ts.URL, `{"items":[`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed body: status %d, want 400", resp.StatusCode)
	}
}

// TestConcurrentExtractsAreBatched: 48 concurrent Extract calls with one
// batch request in flight at a time reach the server in far fewer HTTP
// requests, each answer the right feature.
func TestConcurrentExtractsAreBatched(t *testing.T) {
	const n = 48
	objs := map[string]string{}
	for i := range n {
		objs[fmt.Sprintf("d/%02d.jpg", i)] = fmt.Sprintf("bytes of %d", i)
	}
	ts := startServer(t, objs, nil)
	ts.Ex.Delay = 2 * time.Millisecond
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, MaxInFlight: 1, MaxBatch: 16, MaxWait: 5 * time.Millisecond})
	before := c.Stats().HTTPRequests
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("d/%02d.jpg", i)
			b, err := c.Extractor().Extract(context.Background(), featureReq(key, 1, ""))
			if err == nil && !bytes.Equal(b, expectedFeature([]byte(objs[key]), 1)) {
				err = fmt.Errorf("%s: wrong feature", key)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := c.Stats()
	if st.BatchedItems != n {
		t.Errorf("%d items sent, want %d", st.BatchedItems, n)
	}
	if reqs := st.HTTPRequests - before; reqs > n/4 || st.Batches != reqs {
		t.Errorf("%d concurrent extractions took %d HTTP requests (%d batches), want at most %d", n, reqs, st.Batches, n/4)
	}
	if ts.Stats().Batches != st.Batches {
		t.Errorf("server saw %d batches, client sent %d", ts.Stats().Batches, st.Batches)
	}
}

// TestForegroundBeforeBackground: with one request of one item in flight,
// a reader's request queued after ten prefetch requests goes out next.
func TestForegroundBeforeBackground(t *testing.T) {
	objs := map[string]string{"fg.jpg": "fg"}
	for i := range 10 {
		objs[fmt.Sprintf("bg%d.jpg", i)] = "bg"
	}
	ts := startServer(t, objs, nil)
	ts.Ex.Delay = 20 * time.Millisecond
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, MaxBatch: 1, MaxInFlight: 1})
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	run := func(key string, p api.Priority) {
		defer wg.Done()
		req := featureReq(key, 0, "")
		req.Priority = p
		if _, err := c.Extractor().Extract(context.Background(), req); err != nil {
			t.Error(err)
		}
		mu.Lock()
		order = append(order, key)
		mu.Unlock()
	}
	for i := range 10 {
		wg.Add(1)
		go run(fmt.Sprintf("bg%d.jpg", i), api.Background)
	}
	time.Sleep(30 * time.Millisecond)
	wg.Add(1)
	go run("fg.jpg", api.Foreground)
	wg.Wait()
	pos := -1
	for i, k := range order {
		if k == "fg.jpg" {
			pos = i
		}
	}
	if pos < 0 || pos > 3 {
		t.Errorf("the reader's request finished %d-th of 11 (%v), want among the first 4", pos+1, order)
	}
}
