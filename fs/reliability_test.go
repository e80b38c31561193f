package fs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// TestKeysCannotEscapeTheTree lists a bucket whose keys try to leave the
// tree or break it ("..", ".", absolute and empty elements) next to keys
// with components longer than the 255-byte NAME_MAX (S3 keys go up to 1024
// bytes in all): the mount shows none of the former and every one of the
// latter, under shortened names (package doc, Names), every listed file
// reads, and the extractor is only ever asked for well-formed keys.
func TestKeysCannotEscapeTheTree(t *testing.T) {
	b := newFakeBucket(3)
	bad := []string{"../escape.jpg", "/abs.jpg", "a/../b.jpg", "./dot.jpg", "a//b.jpg", "a/./c.jpg", "..", "a/.", "a/"}
	long := strings.Repeat("L", 300)
	good := map[string]string{ // key -> file under the layer directory
		"ok/fine.jpg":                       "ok/fine.npy",
		"a/real.png":                        "a/real.npy",
		long + ".jpg":                       naming.Shortened(long+".jpg", naming.NPYExt),
		"d" + long + "/x.jpg":               naming.Shortened("d"+long, "") + "/x.npy",
		"ok/" + long + ".jpg":               "ok/" + naming.Shortened(long+".jpg", naming.NPYExt),
		"ok/" + long + ".png":               "ok/" + naming.Shortened(long+".png", naming.NPYExt),
		strings.Repeat("k/", 400) + "x.jpg": strings.Repeat("k/", 400) + "x.npy",
	}
	for _, k := range bad {
		b.put(k, []byte("image "+k))
	}
	for k := range good {
		b.put(k, []byte("image "+k))
	}
	e := testMount(t, b)
	root := e.path("features", "tiny", "layer1")

	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if name == "." || name == ".." || name == "" || strings.Contains(name, "/") {
			t.Errorf("listed a name that cannot be a file name: %q", name)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the tree: %v", err)
	}
	var want []string
	for _, f := range good {
		want = append(want, f)
	}
	if !same(files, want) {
		t.Errorf("files = %q, want %q", files, want)
	}
	for _, f := range files {
		if _, err := os.ReadFile(filepath.Join(root, f)); err != nil {
			t.Errorf("read %s: %v", f, err)
		}
	}
	// Lookups of names that were not listed find nothing.
	for _, name := range []string{"..%2Fescape.npy", "abs.npy", "b.npy", "dot.npy", "escape.npy"} {
		if _, err := os.Stat(filepath.Join(root, name)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat %s: %v, want ENOENT", name, err)
		}
	}
	for _, k := range e.x.Keys() {
		for _, bk := range bad {
			if k == bk {
				t.Errorf("the extractor was asked for key %q", k)
			}
		}
	}
}

// outageBucket wraps a fakeBucket: while down, every call fails at once;
// while stalled, every call blocks until its context ends.
type outageBucket struct {
	*fakeBucket
	down, stalled atomic.Bool
	getCalls      atomic.Int64
}

var errStoreDown = errors.New("connection refused")

func (b *outageBucket) fault(ctx context.Context) error {
	if b.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if b.down.Load() {
		return errStoreDown
	}
	return nil
}

func (b *outageBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	if err := b.fault(ctx); err != nil {
		return bucket.Page{}, err
	}
	return b.fakeBucket.List(ctx, prefix, token)
}

func (b *outageBucket) Stat(ctx context.Context, key string) (bucket.Object, error) {
	if err := b.fault(ctx); err != nil {
		return bucket.Object{}, err
	}
	return b.fakeBucket.Stat(ctx, key)
}

func (b *outageBucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	b.getCalls.Add(1)
	if err := b.fault(ctx); err != nil {
		return nil, bucket.Object{}, err
	}
	return b.fakeBucket.Get(ctx, key, maxBytes)
}

// TestStaleListingServedWhileStoreDown lists a directory, lets its listing
// go stale and takes the store down: the directory still lists (the last
// complete listing is served again, with one log line) and its cached
// feature still reads; a directory never listed fails with EIO; a bad
// object is not recorded for a store error; when the store is back, a
// fresh listing shows new objects.
func TestStaleListingServedWhileStoreDown(t *testing.T) {
	fb := newFakeBucket(1000)
	fb.put("d/a.jpg", []byte("a"))
	fb.put("d/b.jpg", []byte("b"))
	fb.put("e/c.jpg", []byte("c"))
	b := &outageBucket{fakeBucket: fb}
	e := testMount(t, fb, func(c *testConfig) { c.Bucket = b })
	dir := e.path("features", "tiny", "layer1", "d")
	if got := names(t, dir); !same(got, []string{"a.npy", "b.npy"}) {
		t.Fatalf("ls d = %q", got)
	}
	want, err := os.ReadFile(filepath.Join(dir, "a.npy"))
	if err != nil {
		t.Fatal(err)
	}

	e.clock.Advance(2 * time.Hour) // every listing is stale
	b.down.Store(true)
	if got := names(t, dir); !same(got, []string{"a.npy", "b.npy"}) {
		t.Errorf("ls d with the store down = %q, want the last listing", got)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "a.npy")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("cached a.npy with the store down: %v", err)
	}
	if _, err := os.ReadDir(e.path("features", "tiny", "layer1", "e")); !errors.Is(err, syscall.EIO) {
		t.Errorf("ls of a never-listed directory with the store down: %v, want EIO", err)
	}
	if _, err := os.ReadFile(filepath.Join(dir, "b.npy")); !errors.Is(err, syscall.EIO) {
		t.Errorf("uncached b.npy with the store down: %v, want EIO", err)
	}
	if n := e.fs.Stats().FS.BadObjects; n != 0 {
		t.Errorf("store errors recorded %d bad objects", n)
	}
	if n := len(linesWith(e.logs.String(), "serving the last complete listing", "key=d/ ")); n != 1 {
		t.Errorf("%d log lines about serving the last listing, want 1:\n%s", n, e.logs.String())
	}

	b.down.Store(false)
	fb.put("d/new.jpg", []byte("n"))
	e.clock.Advance(2 * time.Hour)
	if got := names(t, dir); !same(got, []string{"a.npy", "b.npy", "new.npy"}) {
		t.Errorf("ls d with the store back = %q", got)
	}
	if _, err := os.ReadFile(filepath.Join(dir, "b.npy")); err != nil {
		t.Errorf("b.npy with the store back: %v", err)
	}
}

// TestStalledStoreFailsWithinReadTimeout stalls every bucket call: a
// listing, a lookup by Stat and a read each fail with EIO about
// ReadTimeout later instead of blocking.
func TestStalledStoreFailsWithinReadTimeout(t *testing.T) {
	fb := newFakeBucket(1000)
	fb.put("d/a.jpg", []byte("a"))
	fb.put("f/x.jpg", []byte("x"))
	b := &outageBucket{fakeBucket: fb}
	const timeout = 300 * time.Millisecond
	e := testMount(t, fb, func(c *testConfig) { c.Bucket = b; c.ReadTimeout = timeout })
	layer := e.path("features", "tiny", "layer1")
	if _, err := os.Stat(filepath.Join(layer, "d", "a.npy")); err != nil {
		t.Fatal(err)
	}
	b.stalled.Store(true)
	for name, op := range map[string]func() error{
		"ls f":     func() error { _, err := os.ReadDir(filepath.Join(layer, "f")); return err },
		"read a":   func() error { _, err := os.ReadFile(filepath.Join(layer, "d", "a.npy")); return err },
		"stat f/x": func() error { _, err := os.Stat(filepath.Join(layer, "f", "x.npy")); return err },
	} {
		t0 := time.Now()
		err := op()
		took := time.Since(t0)
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s with the store stalled: %v, want EIO", name, err)
		}
		if took > 3*timeout+time.Second {
			t.Errorf("%s with the store stalled took %v, ReadTimeout is %v", name, took, timeout)
		}
	}
	// The kernel retries a failed read on the same handle: the handle
	// answers it with the same error instead of fetching (and waiting) again.
	if n := b.getCalls.Load(); n != 1 {
		t.Errorf("one read of a with the store stalled made %d Get calls, want 1", n)
	}
}

// linesWith returns the lines of s that contain every one of subs.
func linesWith(s string, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}
