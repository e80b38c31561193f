package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// get sends an authorized GET of path (with query) and returns the status
// and body.
func get(t *testing.T, base, path string) (int, []byte) {
	t.Helper()
	resp := authorizedDo(t, "GET", base+path, nil)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// `featurefs serve --image-extensions` is honoured, as a mount honours it:
// the server computes features of, and sends whole (split raw), only
// objects with one of its extensions, in any case; another object is 404
// (no such feature), never extracted. Without the setting, the default
// extensions (jpg, jpeg, png) apply. Fails on the old server, which computed
// every key it was asked for.
func TestServerImageExtensions(t *testing.T) {
	objects := map[string]string{"a/x.TIFF": "tiff image", "a/y.jpg": "jpeg image", "a/z.txt": "notes"}
	for _, c := range []struct {
		name    string
		exts    []string
		yes, no []string
	}{
		{name: "tiff only", exts: []string{"tiff"}, yes: []string{"a/x.TIFF"}, no: []string{"a/y.jpg", "a/z.txt"}},
		{name: "default", exts: nil, yes: []string{"a/y.jpg"}, no: []string{"a/x.TIFF", "a/z.txt"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := startServer(t, objects, func(cfg *testConfig) { cfg.ImageExtensions = c.exts })
			for _, key := range c.yes {
				q := "?model=tiny&layer=0&key=" + url.QueryEscape(key)
				st, body := get(t, ts.URL, "/v1/feature"+q)
				if st != http.StatusOK || !bytes.Equal(body, expectedFeature([]byte(objects[key]), 0)) {
					t.Errorf("feature of %s: %d %q, want 200 and its feature", key, st, body)
				}
				if st, body := get(t, ts.URL, "/v1/object?key="+url.QueryEscape(key)); st != http.StatusOK || string(body) != objects[key] {
					t.Errorf("object %s: %d %q, want 200 and its bytes", key, st, body)
				}
			}
			before := ts.Ex.Calls.Load()
			for _, key := range c.no {
				q := "?model=tiny&layer=0&key=" + url.QueryEscape(key)
				st, body := get(t, ts.URL, "/v1/feature"+q)
				if st != StatusNotFound || !strings.Contains(string(body), "not an image") || !strings.Contains(string(body), key) {
					t.Errorf("feature of %s: %d %q, want 404 saying it is not an image", key, st, body)
				}
				if st, body := get(t, ts.URL, "/v1/object?key="+url.QueryEscape(key)); st != StatusNotFound || !strings.Contains(string(body), "not an image") {
					t.Errorf("object %s: %d %q, want 404 saying it is not an image", key, st, body)
				}
			}
			if n := ts.Ex.Calls.Load() - before; n != 0 {
				t.Errorf("%d extractions of objects that are not images", n)
			}

			// Through a client, as a mount reads: a non-image is not found.
			cl := dial(t, ClientConfig{URLs: []string{ts.URL}})
			_, err := cl.Extractor().Extract(context.Background(), featureReq(c.no[0], 0, etagOf(t, cl, c.no[0])))
			if !errors.Is(err, bucket.ErrNotFound) {
				t.Errorf("client extract of %s: %v, want bucket.ErrNotFound", c.no[0], err)
			}
			got, err := cl.Extractor().Extract(context.Background(), featureReq(c.yes[0], 0, etagOf(t, cl, c.yes[0])))
			if err != nil || !bytes.Equal(got, expectedFeature([]byte(objects[c.yes[0]]), 0)) {
				t.Errorf("client extract of %s: %v", c.yes[0], err)
			}
		})
	}
}

// The pipeline refuses a non-image with ErrNotImage, which is a
// bucket.ErrNotFound (404 on the wire, ENOENT in a mount).
func TestErrNotImageIsNotFound(t *testing.T) {
	if !errors.Is(features.ErrNotImage, bucket.ErrNotFound) || StatusOf(features.ErrNotImage) != StatusNotFound {
		t.Errorf("ErrNotImage: status %d, want %d", StatusOf(features.ErrNotImage), StatusNotFound)
	}
}
