package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
)

// TestSplitRawHonoursMaxObjectSize: split raw downloads an image of at most
// SplitConfig.MaxObjectSize (--max-object-size), as a local mount's fetch
// does; a larger one fails with bucket.ErrTooLarge (a bad object to the
// mount), whether the server announces its length or streams it. It used to
// read up to 1 GiB whatever the setting.
func TestSplitRawHonoursMaxObjectSize(t *testing.T) {
	ts := startServer(t, map[string]string{"a/small.jpg": strings.Repeat("s", 1000), "a/big.jpg": strings.Repeat("b", 4096)}, nil)
	var stream, streamed atomic.Bool
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !stream.Load() || r.URL.Path != "/v1/object" {
			ts.Server.ServeHTTP(w, r)
			return
		}
		// The same answer without a Content-Length.
		rec := httptest.NewRecorder()
		ts.Server.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(rec.Code)
		w.(http.Flusher).Flush()
		w.Write(rec.Body.Bytes())
		streamed.Store(true)
	}))
	t.Cleanup(hs.Close)
	c := dial(t, ClientConfig{URLs: []string{hs.URL}})
	ctx := context.Background()
	none := spec.SplitPolicy{Mode: "none"}

	x, err := c.Split(ctx, SplitConfig{Policy: none, MaxObjectSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for _, s := range []bool{false, true} {
		stream.Store(s)
		if b, err := x.object(ctx, "a/small.jpg", ""); err != nil || len(b) != 1000 {
			t.Errorf("streamed=%v: 1000-byte object with a 1024-byte limit: %d bytes, %v", s, len(b), err)
		}
		b, err := x.object(ctx, "a/big.jpg", "")
		if !errors.Is(err, bucket.ErrTooLarge) || !strings.Contains(err.Error(), "--max-object-size") || b != nil {
			t.Errorf("streamed=%v: 4096-byte object with a 1024-byte limit: %d bytes, %v; want an error matching bucket.ErrTooLarge naming --max-object-size", s, len(b), err)
		}
	}
	if !streamed.Load() {
		t.Fatal("the objects were never streamed without a length")
	}

	// No setting: bucket.DefaultMaxObjectBytes, as a local mount's default.
	stream.Store(false)
	d, err := c.Split(ctx, SplitConfig{Policy: none})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.maxRaw != bucket.DefaultMaxObjectBytes {
		t.Errorf("default limit %d, want bucket.DefaultMaxObjectBytes (%d)", d.maxRaw, bucket.DefaultMaxObjectBytes)
	}
	if b, err := d.object(ctx, "a/big.jpg", ""); err != nil || len(b) != 4096 {
		t.Errorf("4096-byte object with the default limit: %d bytes, %v", len(b), err)
	}
}
