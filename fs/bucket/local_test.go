package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
)

type localStore struct{ dir string }

func (s localStore) open(t *testing.T, prefix string, opts bucket.S3Options) bucket.Bucket {
	t.Helper()
	b, err := bucket.Open(context.Background(), filepath.Join(s.dir, filepath.FromSlash(prefix)), opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", s.dir, err)
	}
	return b
}

func (s localStore) put(t *testing.T, key string, data []byte) {
	t.Helper()
	p := filepath.Join(s.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s localStore) del(t *testing.T, key string) {
	t.Helper()
	if err := os.Remove(filepath.Join(s.dir, filepath.FromSlash(key))); err != nil {
		t.Fatal(err)
	}
}

func TestLocalConformance(t *testing.T) {
	testConformance(t, localStore{dir: t.TempDir()})
}

func TestLocalIdentityAndSources(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "f.jpg"), []byte("x"), 0o644)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{dir, "file://" + dir, link, dir + "/"} {
		b, err := bucket.Open(ctx, src, bucket.S3Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", src, err)
		}
		if got, want := b.Identity(), "file://"+real; got != want {
			t.Errorf("Open(%q).Identity() = %q, want %q", src, got, want)
		}
	}
	// A relative path.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bucket.Open(ctx, rel, bucket.S3Options{})
	if err != nil {
		t.Fatalf("Open(%q): %v", rel, err)
	}
	if _, err := b.Stat(ctx, "f.jpg"); err != nil {
		t.Errorf("relative source: Stat: %v", err)
	}
	for _, src := range []string{filepath.Join(dir, "f.jpg"), filepath.Join(dir, "missing"), "", "gs://x"} {
		if _, err := bucket.Open(ctx, src, bucket.S3Options{}); err == nil {
			t.Errorf("Open(%q) succeeded, want an error", src)
		}
	}
}

// TestLocalEscapes checks that no key reaches outside the root, whether by
// "..", an absolute path or a symbolic link, and that links inside work.
func TestLocalEscapes(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.jpg"), []byte("secret"), 0o644)
	root := filepath.Join(t.TempDir(), "root")
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "in.jpg"), []byte("inside"), 0o644)
	must(t, os.Symlink(filepath.Join(outside, "secret.jpg"), filepath.Join(root, "abs-out.jpg")))
	must(t, os.Symlink("../../"+filepath.Base(outside)+"/secret.jpg", filepath.Join(root, "rel-out.jpg")))
	must(t, os.Symlink(outside, filepath.Join(root, "outdir")))
	must(t, os.Symlink("d/in.jpg", filepath.Join(root, "in-link.jpg")))
	must(t, os.Symlink("d", filepath.Join(root, "in-dir")))
	must(t, os.Symlink("nowhere.jpg", filepath.Join(root, "dangling.jpg")))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo.jpg"), 0o644))

	b, err := bucket.Open(ctx, root, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, filepath.Join(outside, "secret.jpg"))
	bad := []string{"../x", "d/../../x", "/etc/passwd", filepath.Join(outside, "secret.jpg"), rel,
		"abs-out.jpg", "rel-out.jpg", "outdir/secret.jpg", "dangling.jpg", "fifo.jpg", "d", "d/", "./d/in.jpg", "d//in.jpg"}
	for _, k := range bad {
		if _, err := b.Stat(ctx, k); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("Stat(%q) = %v, want ErrNotFound", k, err)
		}
		if data, _, err := b.Get(ctx, k, 100); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("Get(%q) = %q, %v, want ErrNotFound", k, data, err)
		}
	}
	for _, p := range []string{"../", "outdir/", "/", "d/../../"} {
		if page, err := b.List(ctx, p, ""); err == nil && len(page.Objects)+len(page.Prefixes) > 0 {
			t.Errorf("List(%q) = %+v, want nothing", p, page)
		}
	}
	for k, want := range map[string]string{"in-link.jpg": "inside", "in-dir/in.jpg": "inside", "d/in.jpg": "inside"} {
		if data, _, err := b.Get(ctx, k, 100); err != nil || string(data) != want {
			t.Errorf("Get(%q) = %q, %v; want %q", k, data, err, want)
		}
	}
	page, err := b.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, o := range page.Objects {
		objs = append(objs, o.Key)
	}
	if want := []string{"in-link.jpg"}; !slices.Equal(objs, want) {
		t.Errorf("root objects = %q, want %q (escaping, dangling and special entries left out)", objs, want)
	}
	if want := []string{"d/", "in-dir/"}; !slices.Equal(page.Prefixes, want) {
		t.Errorf("root prefixes = %q, want %q", page.Prefixes, want)
	}
}

// TestLocalListLargeDirChanges pages through a directory while it changes:
// the cached sorted listing must be dropped when the directory changes.
func TestLocalListLargeDirChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := localStore{dir: dir}
	for i := range 30 {
		s.put(t, fmt.Sprintf("f%03d.jpg", i), []byte("x"))
	}
	// An old mtime lets the listing be cached (a directory changed within
	// the last second is never cached: mtime granularity is coarse).
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(dir, old, old))
	b, err := bucket.Open(ctx, dir, bucket.S3Options{ListPageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := b.List(ctx, "", "")
	if err != nil || len(p1.Objects) != 10 || p1.Next != "f009.jpg" {
		t.Fatalf("page 1 = %d objects, next %q, %v", len(p1.Objects), p1.Next, err)
	}
	s.put(t, "f0095.jpg", []byte("new")) // sorts right after f009.jpg
	p2, err := b.List(ctx, "", p1.Next)
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Objects) == 0 || p2.Objects[0].Key != "f0095.jpg" {
		t.Errorf("page 2 after adding f0095.jpg starts with %+v, want f0095.jpg", p2.Objects)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLocalSymlinkLoopsListedOnce: a symbolic link to the listed directory
// or one above it (links/up -> .., d/self -> ., d/e/top -> ../..) is left
// out of listings, so a walk of the whole tree ends and finds each object
// under one key, but for links to another directory (in-dir -> d) or file
// (d/b-link.jpg -> b.jpg), which are kept and carry the key of what they
// reach as their Identity (issue 24: prefetch made 719 extractions for
// about 30 images through links/up -> ..).
func TestLocalSymlinkLoopsListedOnce(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := localStore{dir: root}
	for _, k := range []string{"a.jpg", "d/b.jpg", "d/e/c.jpg", "links/x.jpg"} {
		s.put(t, k, []byte(k))
	}
	must(t, os.Symlink("..", filepath.Join(root, "links", "up")))
	must(t, os.Symlink(".", filepath.Join(root, "d", "self")))
	must(t, os.Symlink("../..", filepath.Join(root, "d", "e", "top")))
	must(t, os.Symlink("d", filepath.Join(root, "in-dir")))
	b := s.open(t, "", bucket.S3Options{})

	must(t, os.Symlink("b.jpg", filepath.Join(root, "d", "b-link.jpg")))
	var keys []string
	ids := map[string]string{}
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		if depth > 8 {
			t.Fatalf("listing %s: deeper than 8 levels: a loop is listed", prefix)
		}
		token := ""
		for {
			page, err := b.List(ctx, prefix, token)
			if err != nil {
				t.Fatalf("List(%q): %v", prefix, err)
			}
			for _, o := range page.Objects {
				keys = append(keys, o.Key)
				ids[o.Key] = o.Identity
			}
			for _, p := range page.Prefixes {
				walk(p, depth+1)
			}
			if token = page.Next; token == "" {
				return
			}
		}
	}
	walk("", 0)
	slices.Sort(keys)
	want := []string{"a.jpg", "d/b-link.jpg", "d/b.jpg", "d/e/c.jpg", "in-dir/b-link.jpg", "in-dir/b.jpg", "in-dir/e/c.jpg", "links/x.jpg"}
	if !slices.Equal(keys, want) {
		t.Errorf("objects listed:\n  %q\nwant:\n  %q", keys, want)
	}
	// Keys through a link carry the key of the object they reach
	// (Identity), in listings and from Stat; the others none.
	wantIDs := map[string]string{"d/b-link.jpg": "d/b.jpg", "in-dir/b-link.jpg": "d/b.jpg", "in-dir/b.jpg": "d/b.jpg", "in-dir/e/c.jpg": "d/e/c.jpg"}
	for _, k := range want {
		if ids[k] != wantIDs[k] {
			t.Errorf("listed %s: Identity %q, want %q", k, ids[k], wantIDs[k])
		}
		o, err := b.Stat(ctx, k)
		if err != nil || o.Identity != wantIDs[k] {
			t.Errorf("Stat(%s): Identity %q, %v; want %q", k, o.Identity, err, wantIDs[k])
		}
	}
}

// A look into a local directory (bucket.Peek, whether the tree shows it)
// reads n entries, the first its readdir gives, not a page of them in key
// order (each costs a stat, and key order needs every name read and
// sorted); a List from its Next covers the rest, and a directory of fewer
// than n entries is read whole, with no Next.
func TestLocalPeekReadsFirstEntries(t *testing.T) {
	s := localStore{dir: t.TempDir()}
	for i := range 50 {
		s.put(t, fmt.Sprintf("d/%02d.jpg", i), []byte{byte(i)})
	}
	s.put(t, "small/a.jpg", []byte{1})
	s.put(t, "small/sub/b.jpg", []byte{2})
	b := s.open(t, "", bucket.S3Options{})
	ctx := context.Background()
	p, err := bucket.Peek(ctx, b, "d/", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 5 || p.Next == "" {
		t.Fatalf("Peek(d/, 5) = %d objects, next %q; want 5 and a next token", len(p.Objects), p.Next)
	}
	seen := map[string]bool{}
	for _, o := range p.Objects {
		if o.Size != 1 || !strings.HasPrefix(o.Key, "d/") {
			t.Errorf("peeked %+v, want one of d/NN.jpg with its size", o)
		}
		seen[o.Key] = true
	}
	for token := p.Next; token != ""; {
		rest, err := b.List(ctx, "d/", token)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range rest.Objects {
			seen[o.Key] = true
		}
		token = rest.Next
	}
	if len(seen) != 50 {
		t.Errorf("the peek and the List from its Next saw %d of the 50 objects", len(seen))
	}
	p, err = bucket.Peek(ctx, b, "small/", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 1 || p.Objects[0].Key != "small/a.jpg" || len(p.Prefixes) != 1 || p.Prefixes[0] != "small/sub/" || p.Next != "" {
		t.Errorf("Peek(small/, 5) = %+v, want small/a.jpg, small/sub/ and no next", p)
	}
}

// A local file's ETag, in Stat and in a listing, is fmt's "%x-%x" of its
// size and mtime in nanoseconds (formatted without fmt): the cache keys
// made before hold.
func TestLocalETagIsSizeAndMtime(t *testing.T) {
	s := localStore{t.TempDir()}
	times := []time.Time{
		time.Unix(0, 0),
		time.Unix(1795000000, 123456789),
		time.Unix(1<<33, 999999999),
		time.Unix(-86400*365, 42), // before 1970: a negative count
	}
	for i, mt := range times {
		key := fmt.Sprintf("d/f%d", i)
		s.put(t, key, make([]byte, 677*i))
		if err := os.Chtimes(filepath.Join(s.dir, filepath.FromSlash(key)), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	b := s.open(t, "", bucket.S3Options{})
	page, err := b.List(context.Background(), "d/", "")
	if err != nil || len(page.Objects) != len(times) {
		t.Fatalf("List: %+v, %v", page, err)
	}
	for i, mt := range times {
		key := fmt.Sprintf("d/f%d", i)
		want := fmt.Sprintf("%x-%x", int64(677*i), mt.UnixNano())
		o, err := b.Stat(context.Background(), key)
		if err != nil || o.ETag != want {
			t.Errorf("Stat(%s): ETag %q, %v; want %q", key, o.ETag, err, want)
		}
		if got := page.Objects[i]; got.Key != key || got.ETag != want {
			t.Errorf("listed %s: ETag %q; want %s's %q", got.Key, got.ETag, key, want)
		}
	}
}
