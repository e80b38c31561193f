package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
)

// The stats file's recent errors and the log name an object's key once: in
// the record's key and the log line's key=, not again in front of the
// reason (it used to read "d/bad.jpg: d/bad.jpg: not an image", and
// `d/huge.png: get "d/huge.png": ...`). The store's own message may still
// say where the object is (bucket: get s3://BUCKET/KEY: ...).
func TestErrorRecordsNameTheKeyOnce(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/bad.jpg", []byte("BAD: not a jpeg"))
	b.put("d/huge.png", make([]byte, 4096))
	e := testMount(t, b, func(c *testConfig) { c.MaxObjectSize = 1024 })
	for _, name := range []string{"bad.npy", "huge.npy"} {
		for range 2 { // the second read is answered from the negative cache
			if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "d", name)); !errors.Is(err, syscall.EIO) {
				t.Fatalf("read %s: %v, want EIO", name, err)
			}
		}
	}
	recs := e.fs.Stats().RecentErrors
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Key] = true
		if strings.HasPrefix(r.Error, r.Key) || strings.Contains(r.Error, fmt.Sprintf("%q", r.Key)) {
			t.Errorf("recent error %q: %q puts the key in front of the reason again", r.Key, r.Error)
		}
	}
	if !seen["d/bad.jpg"] || !seen["d/huge.png"] {
		t.Errorf("recent errors %+v lack d/bad.jpg or d/huge.png", recs)
	}
	for _, r := range recs {
		if r.Key == "d/bad.jpg" && r.Error != "not an image" {
			t.Errorf("d/bad.jpg recorded as %q, want the reason alone, \"not an image\"", r.Error)
		}
	}
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "key=d/bad.jpg") && strings.Count(line, "d/bad.jpg") != 1 {
			t.Errorf("log line names d/bad.jpg more than once: %s", line)
		}
		if strings.Contains(line, "key=d/huge.png") && (strings.Contains(line, `err="d/huge.png`) || strings.Contains(line, `\"d/huge.png\"`)) {
			t.Errorf("log line puts d/huge.png in front of the reason again: %s", line)
		}
	}
}

// deniedBucket refuses the objects and listings under its prefix, as a store
// does that no longer accepts the mount's credentials (a feature server that
// refuses the mount's token).
type deniedBucket struct {
	*fakeBucket
	prefix atomic.Pointer[string]
}

func (b *deniedBucket) denies(key string) bool { return strings.HasPrefix(key, *b.prefix.Load()) }

func (b *deniedBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	if b.denies(prefix) {
		return bucket.Page{}, fmt.Errorf("list %q: %w", prefix, bucket.ErrAccessDenied)
	}
	return b.fakeBucket.List(ctx, prefix, token)
}

func (b *deniedBucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	if b.denies(key) {
		return nil, bucket.Object{}, fmt.Errorf("get %q: %w", key, bucket.ErrAccessDenied)
	}
	return b.fakeBucket.Get(ctx, key, maxBytes)
}

func ptr[T any](v T) *T { return &v }

// A store that refuses the mount's credentials (a feature server that
// refuses its token) answers EACCES, which says what happened, not EIO;
// the refusal is logged and kept in the recent errors, and is not counted
// as an I/O error. Nothing is cached: once the store accepts the
// credentials again, the same files read.
func TestAccessDeniedIsEACCES(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/a.jpg", []byte("image a"))
	b.put("d/sub/b.jpg", []byte("image b"))
	denied := &deniedBucket{fakeBucket: b}
	denied.prefix.Store(ptr("d/"))
	e := testMount(t, b, func(c *testConfig) { c.Bucket = denied })
	layer := e.path("features", "tiny", "layer1")
	if got := names(t, layer); !same(got, []string{"d/"}) {
		t.Fatalf("listing = %q", got)
	}
	for range 2 {
		if _, err := os.ReadDir(e.path("features", "tiny", "layer1", "d")); !errors.Is(err, syscall.EACCES) {
			t.Fatalf("listing a refused directory: %v, want EACCES", err)
		}
	}
	// The listing of d/ was refused; let it through so that the read's Get
	// is what the store refuses.
	denied.prefix.Store(ptr("d/a.jpg"))
	file := e.path("features", "tiny", "layer1", "d", "a.npy")
	for range 2 {
		if _, err := os.ReadFile(file); !errors.Is(err, syscall.EACCES) {
			t.Fatalf("reading a refused object's feature: %v, want EACCES", err)
		}
	}
	if n := e.fs.Stats().FS.IOErrors; n != 0 {
		t.Errorf("IOErrors = %d, want 0: a refusal is not an I/O error", n)
	}
	found := false
	for _, r := range e.fs.Stats().RecentErrors {
		found = found || (r.Key == "d/a.jpg" && strings.Contains(r.Error, "access denied"))
	}
	if !found {
		t.Errorf("recent errors %+v lack d/a.jpg's refusal", e.fs.Stats().RecentErrors)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "key=d/a.jpg") || !strings.Contains(logs, "access denied") {
		t.Errorf("the refusal was not logged:\n%s", logs)
	}
	denied.prefix.Store(ptr("nothing/"))
	if _, err := os.ReadFile(file); err != nil {
		t.Errorf("read once the store accepts the credentials again: %v", err)
	}
}
