package features

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// The pipeline serves a feature without any tree: the first call extracts
// and stores it, the next is a cache hit; a bad object is extracted once and
// then refused from the negative cache until NegativeTTL has passed.
func TestFeatureCachesAndRemembersBadObjects(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"d/a.jpg": "abcd", "d/bad.jpg": "BADBAD"})
	x, c, clock := newFakeExtractor(), fakes.NewCache(), fakes.NewClock()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: c, NegativeTTL: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	obj, err := b.Stat(ctx, "d/a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	want := expectedNPY(testModel().Layers[1], []byte("abcd"))
	for i := range 2 {
		got, err := p.Feature(ctx, "tiny", 1, obj)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("call %d: %v, %v; want the layer's feature", i, got, err)
		}
	}
	if n := x.Calls.Load(); n != 1 {
		t.Errorf("%d extractions for two calls, want 1 (the second from the cache)", n)
	}

	bad, err := b.Stat(ctx, "d/bad.jpg")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := p.Feature(ctx, "tiny", 0, bad); !errors.Is(err, api.ErrBadImage) || !BadObject(err) {
			t.Fatalf("bad object, call %d: %v, want a bad image", i, err)
		}
	}
	if n := x.Calls.Load(); n != 2 {
		t.Errorf("%d extractions after two reads of a bad object, want 2 (one for it)", n)
	}
	clock.Advance(2 * time.Minute)
	if _, err := p.Feature(ctx, "tiny", 0, bad); !errors.Is(err, api.ErrBadImage) {
		t.Fatalf("bad object after NegativeTTL: %v", err)
	}
	if n := x.Calls.Load(); n != 3 {
		t.Errorf("%d extractions after NegativeTTL, want 3 (retried)", n)
	}

	st := p.Stats()
	if st.FS.CacheHits != 1 || st.FS.CacheMisses != 3 || st.FS.BadObjects != 1 || st.FS.BadObjectHits != 1 {
		t.Errorf("figures %+v; want 1 hit, 3 misses, 1 bad object, 1 negative-cache hit", st.FS)
	}
	if st.Extraction.Completed != 1 || st.Extraction.Failed != 2 || st.Store.Gets != 3 {
		t.Errorf("extraction %+v, store %+v; want 1 completed, 2 failed, 3 gets", st.Extraction, st.Store)
	}
	if len(st.RecentErrors) == 0 || st.RecentErrors[0].Key != "d/bad.jpg" {
		t.Errorf("recent errors %+v, want the bad object's", st.RecentErrors)
	}
	if _, err := p.Feature(ctx, "nope", 0, obj); !errors.Is(err, api.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := p.Feature(ctx, "tiny", 2, obj); !errors.Is(err, api.ErrUnknownLayer) {
		t.Errorf("unknown layer: %v", err)
	}
}

// An object overwritten since it was listed: Feature (the server's call)
// says so with ErrObjectChanged; Read (the tree's) serves the new version
// and remembers it for later opens.
func TestReadServesAChangedObject(t *testing.T) {
	b, dir := localBucket(t, map[string]string{"a.jpg": "old!"})
	x := newFakeExtractor()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	listed, err := b.Stat(ctx, "a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.jpg"), []byte("newer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Feature(ctx, "tiny", 0, listed); !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("Feature of a changed object: %v, want ErrObjectChanged", err)
	}
	v := p.NewView(testModel(), testModel().Layers[0])
	got, err := p.Read(ctx, v, listed)
	if err != nil || !bytes.Equal(got, expectedNPY(v.Layer, []byte("newer"))) {
		t.Fatalf("Read of a changed object: %v, %v; want the new version's feature", got, err)
	}
	nv, _, ok := p.NewerVersion("a.jpg")
	if !ok || nv.ETag == listed.ETag || nv.Size != 5 {
		t.Errorf("newer version %+v (%v), want the new one remembered", nv, ok)
	}
}

// The read path, and the feature server that calls it, link no FUSE: only
// the tree (package fs) and the binary do.
func TestNoFUSEDependency(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command (go test puts it on PATH): %v", err)
	}
	for _, pkg := range []string{".", "../remote"} {
		out, err := exec.Command(goTool, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), out)
		}
		for _, d := range deps {
			if strings.Contains(d, "go-fuse") || d == "github.com/featurefs/featurefs/fs" {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

// MaxObjectSize 0 leaves the size bound to the bucket (its MaxObjectBytes)
// rather than putting a second default of its own in its place.
func TestZeroMaxObjectSizeIsTheBucketsBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.jpg"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := bucket.Open(context.Background(), dir, bucket.S3Options{MaxObjectBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	obj, err := b.Stat(ctx, "a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max     int64
		tooLong bool
	}{{0, true}, {64, false}} {
		p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: fakes.NewCache(), MaxObjectSize: c.max})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Feature(ctx, "tiny", 0, obj)
		p.Close()
		if got := errors.Is(err, bucket.ErrTooLarge); got != c.tooLong {
			t.Errorf("MaxObjectSize %d over a bucket bounded at 4 bytes, a 10-byte object: %v; want too large %v", c.max, err, c.tooLong)
		}
	}
}
