package namespace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/fs/naming"
)

// readDir reads a whole directory through OpenDir, as a directory handle
// does, and returns its names ("dir/" for a directory).
func readDir(t *testing.T, ns *Namespace, prefix string) []string {
	t.Helper()
	r := ns.OpenDir(t.Context(), prefix)
	var out []string
	for !r.Done() {
		es, err := r.Next(t.Context())
		if err != nil {
			t.Fatalf("reading %q: %v", prefix, err)
		}
		for _, e := range es {
			out = append(out, nameOf(e))
		}
	}
	return out
}

func nameOf(e naming.Entry) string {
	if e.Dir {
		return e.Name + "/"
	}
	return e.Name
}

// TestLookupNoNegativeFromPartialListing: while a listing is incomplete
// (RelistPages pages read), a name it has not reached is found by Stat
// calls, and a missing one is reported missing from Stat, not from the
// partial listing.
func TestLookupNoNegativeFromPartialListing(t *testing.T) {
	b := fakes.NewBucket(2)
	for i := range 10 {
		b.Put(fmt.Sprintf("d/%02d.jpg", i), []byte{byte(i)})
	}
	ns := newNS(t, b, Config{RelistPages: 1})
	for _, n := range []string{"00.npy", "09.npy", "05.npy"} {
		e, err := ns.Lookup(t.Context(), "d/", n)
		if err != nil || e.Dir || e.Obj.Key != "d/"+n[:2]+".jpg" {
			t.Errorf("lookup %s: %+v, %v", n, e, err)
		}
	}
	if _, err := ns.Lookup(t.Context(), "d/", "10.npy"); !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("lookup 10.npy: %v, want not found", err)
	}
	if c := ns.Counts(); c.StatCalls == 0 || c.StatLookups == 0 || b.Stats.Load() == 0 {
		t.Errorf("no Stat calls: %+v", c)
	}
}

// TestLookupFromCompleteListing: once a directory has been read whole,
// lookups in it answer from the listing, found or missing, and ask the
// store nothing until MetadataTTL has passed.
func TestLookupFromCompleteListing(t *testing.T) {
	b := fakes.NewBucket(3)
	for i := range 7 {
		b.Put(fmt.Sprintf("d/%d.jpg", i), []byte{byte(i)})
	}
	b.Put("d/sub/x.png", []byte("x"))
	ns := newNS(t, b, Config{})
	if got := readDir(t, ns.Namespace, "d/"); len(got) != 8 {
		t.Fatalf("d/ = %q, want 7 files and sub/", got)
	}
	lists, stats := b.Lists.Load(), b.Stats.Load()
	for _, n := range []string{"0.npy", "6.npy", "sub"} {
		if _, err := ns.Lookup(t.Context(), "d/", n); err != nil {
			t.Errorf("lookup %s: %v", n, err)
		}
	}
	if _, err := ns.Lookup(t.Context(), "d/", "7.npy"); !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("lookup 7.npy: %v, want not found", err)
	}
	if b.Lists.Load() != lists || b.Stats.Load() != stats {
		t.Errorf("lookups after a complete listing asked the store: %d lists, %d stats", b.Lists.Load()-lists, b.Stats.Load()-stats)
	}
	if c := ns.Counts(); c.Listings == 0 || c.ListingEntries < 8 {
		t.Errorf("listing cache: %+v", c)
	}
	// After the TTL, a new object is found: the directory is read again.
	b.Put("d/7.jpg", []byte{7})
	ns.clock.Advance(2 * time.Hour)
	if _, err := ns.Lookup(t.Context(), "d/", "7.npy"); err != nil {
		t.Errorf("lookup 7.npy after the TTL: %v", err)
	}
}

// failingBucket fails List while fail is set.
type failingBucket struct {
	*fakes.Bucket
	fail atomic.Bool
}

func (b *failingBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	if b.fail.Load() {
		return bucket.Page{}, errors.New("the store is down")
	}
	return b.Bucket.List(ctx, prefix, token)
}

// TestStaleListingServedWhileTheStoreFails: a stale directory whose store
// fails is read and looked up from its last complete listing, and the
// failure is logged once, saying so.
func TestStaleListingServedWhileTheStoreFails(t *testing.T) {
	b := &failingBucket{Bucket: fakes.NewBucket(10)}
	b.Put("d/a.jpg", []byte("a"))
	b.Put("d/b.jpg", []byte("b"))
	ns := newNS(t, b, Config{StaleGrace: time.Second})
	if got := readDir(t, ns.Namespace, "d/"); !same(got, []string{"a.npy", "b.npy"}) {
		t.Fatalf("d/ = %q", got)
	}
	b.fail.Store(true)
	b.Put("d/c.jpg", []byte("c"))
	ns.clock.Advance(2 * time.Hour)
	if got := readDir(t, ns.Namespace, "d/"); !same(got, []string{"a.npy", "b.npy"}) {
		t.Errorf("d/ while the store fails = %q, want the last complete listing", got)
	}
	if _, err := ns.Lookup(t.Context(), "d/", "a.npy"); err != nil {
		t.Errorf("lookup a.npy while the store fails: %v", err)
	}
	if _, err := ns.Lookup(t.Context(), "d/", "c.npy"); !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("lookup c.npy while the store fails: %v, want not found (the last listing lacks it)", err)
	}
	if logs := ns.logs.String(); !strings.Contains(logs, "serving the last complete listing") {
		t.Errorf("no log of the revived listing:\n%s", logs)
	}
	// Back: a read after the revived listing's TTL sees the new object.
	b.fail.Store(false)
	ns.clock.Advance(2 * time.Hour)
	if got := readDir(t, ns.Namespace, "d/"); !same(got, []string{"a.npy", "b.npy", "c.npy"}) {
		t.Errorf("d/ once the store is back = %q", got)
	}
}

// TestEmptyDirectoriesHiddenFromNamespace: a directory holding no image and
// no subdirectory is neither listed nor looked up (with or without a
// listing of its parent); with ShowEmptyDirs it is.
func TestEmptyDirectoriesHiddenFromNamespace(t *testing.T) {
	fill := func() *fakes.Bucket {
		b := fakes.NewBucket(2)
		b.Put("cls/a.jpg", []byte("a"))
		b.Put("trail/", nil)
		b.Put("docs/readme.txt", []byte("r"))
		for _, k := range []string{"late/0.txt", "late/1.txt", "late/2.txt", "late/z.png"} {
			b.Put(k, []byte(k))
		}
		return b
	}
	ns := newNS(t, fill(), Config{})
	for _, d := range []string{"trail", "docs"} {
		if _, err := ns.Lookup(t.Context(), "", d); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("lookup %s without a listing: %v, want not found", d, err)
		}
	}
	for _, d := range []string{"cls", "late"} {
		if e, err := ns.Lookup(t.Context(), "", d); err != nil || !e.Dir {
			t.Errorf("lookup %s without a listing: %+v, %v", d, e, err)
		}
	}
	if got := readDir(t, ns.Namespace, ""); !same(got, []string{"cls/", "late/"}) {
		t.Errorf("root = %q, want cls/ and late/", got)
	}
	shown := newNS(t, fill(), Config{ShowEmptyDirs: true})
	if got := readDir(t, shown.Namespace, ""); !same(got, []string{"cls/", "docs/", "late/", "trail/"}) {
		t.Errorf("ShowEmptyDirs: root = %q", got)
	}
}

// TestRevalidate: a directory too large for RelistPages and not cached
// comes back incomplete; one cached complete and stale is read again whole.
func TestRevalidate(t *testing.T) {
	b := fakes.NewBucket(2)
	for i := range 10 {
		b.Put(fmt.Sprintf("d/%02d.jpg", i), []byte{byte(i)})
	}
	ns := newNS(t, b, Config{RelistPages: 1, StaleGrace: time.Second})
	l := ns.Revalidate(t.Context(), "d/")
	if l == nil || l.Complete() || l.Prefix() != "d/" {
		t.Fatalf("Revalidate of an uncached large directory: %+v, want an incomplete listing of d/", l)
	}
	readDir(t, ns.Namespace, "d/")
	ns.clock.Advance(2 * time.Hour)
	if l := ns.Revalidate(t.Context(), "d/"); l == nil || !l.Complete() {
		t.Fatalf("Revalidate of a stale complete listing: %+v, want it read again whole", l)
	} else if _, found, _ := l.Find("09.npy"); !found {
		t.Error("the listing read again lacks 09.npy")
	}
}

// same reports whether two lists hold the same names, in any order.
func same(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[string]int{}
	for _, s := range a {
		n[s]++
	}
	for _, s := range b {
		if n[s]--; n[s] < 0 {
			return false
		}
	}
	return true
}

// TestStaleListingNoNegativeForANewName: after MetadataTTL, a lookup of a
// name the stale listing lacks, while the listing read again is slower
// than StaleGrace, asks the store (Stat) rather than answering "missing"
// from the stale listing: a directory or image added since is found, and a
// name still missing is missing. At 1942f8f the stale listing answered
// ENOENT (and the kernel kept it for another MetadataTTL): a stat of
// predictions/.../NEWCLASS/predictions.jsonl right after the bucket
// changed failed so (issue 40).
func TestStaleListingNoNegativeForANewName(t *testing.T) {
	b := fakes.NewBucket(10)
	b.Put("d/a.jpg", []byte("a"))
	ns := newNS(t, b, Config{StaleGrace: 20 * time.Millisecond})
	if got := readDir(t, ns.Namespace, "d/"); !same(got, []string{"a.npy"}) {
		t.Fatalf("d/ = %q", got)
	}
	b.Put("d/new.jpg", []byte("n"))
	b.Put("d/cls/x.jpg", []byte("x"))
	b.ListDelay = 300 * time.Millisecond // the new listing comes after the grace
	ns.clock.Advance(2 * time.Hour)
	if e, err := ns.Lookup(t.Context(), "d/", "new.npy"); err != nil || e.Obj.Key != "d/new.jpg" {
		t.Errorf("lookup of an image added since, the listing read again late: %+v, %v; want d/new.jpg", e, err)
	}
	if e, err := ns.Lookup(t.Context(), "d/", "cls"); err != nil || !e.Dir {
		t.Errorf("lookup of a directory added since, the listing read again late: %+v, %v; want the directory", e, err)
	}
	if _, err := ns.Lookup(t.Context(), "d/", "a.npy"); err != nil {
		t.Errorf("lookup of a name the stale listing has: %v", err)
	}
	if _, err := ns.Lookup(t.Context(), "d/", "gone.npy"); !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("lookup of a name nowhere: %v, want not found", err)
	}
}

// TestCrowdedLookupStatsTheName: once the cached listings fill the
// budget, a lookup in a directory whose listing is not cached Stats the
// name (a few calls) instead of reading the directory whole and evicting
// another listing; with room in the budget it reads the directory, so
// that the next names in it answer from the listing.
func TestCrowdedLookupStatsTheName(t *testing.T) {
	const dirs, per = 6, 300
	b := &prefixCountingBucket{Bucket: fakes.NewBucket(3)}
	for d := range dirs {
		for i := range per {
			b.Put(fmt.Sprintf("d%d/%03d.jpg", d, i), []byte{byte(i)})
		}
	}
	// The bytes of one directory's listing, read alone.
	one := newNS(t, b, Config{})
	readDir(t, one.Namespace, "d0/")
	_, _, perDir := one.listings.Size()

	for _, tc := range []struct {
		name    string
		budget  int64
		crowded bool
	}{
		{"room", 64 * perDir, false},
		{"full", 3*perDir + perDir/4, true}, // three listings fill it
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNS(t, b, Config{MetadataBytes: tc.budget})
			for d := range 3 {
				readDir(t, ns.Namespace, fmt.Sprintf("d%d/", d))
			}
			if got := ns.listings.Crowded(); got != tc.crowded {
				t.Fatalf("Crowded() = %v with 3 listings of %d bytes in %d, want %v", got, perDir, tc.budget, tc.crowded)
			}
			lists, stats, dropped := b.listed("d4/"), b.Stats.Load(), ns.Counts().ListingsDropped
			e, err := ns.Lookup(t.Context(), "d4/", "123.npy")
			if err != nil || e.Obj.Key != "d4/123.jpg" {
				t.Fatalf("lookup d4/123.npy = %+v, %v; want d4/123.jpg", e, err)
			}
			if _, err := ns.Lookup(t.Context(), "d4/", "999.npy"); !errors.Is(err, bucket.ErrNotFound) {
				t.Errorf("lookup of a name d4/ lacks: %v, want not found", err)
			}
			c := ns.Counts()
			if tc.crowded {
				if n := b.listed("d4/") - lists; n != 0 {
					t.Errorf("a crowded lookup listed d4/: %d List calls", n)
				}
				if b.Stats.Load() == stats || c.CrowdedLookups != 2 {
					t.Errorf("crowded lookups: %d Stat calls, CrowdedLookups %d; want Stat calls and 2", b.Stats.Load()-stats, c.CrowdedLookups)
				}
				if c.ListingsDropped != dropped {
					t.Errorf("a crowded lookup dropped %d listings", c.ListingsDropped-dropped)
				}
				return
			}
			if b.listed("d4/") == lists || c.CrowdedLookups != 0 {
				t.Errorf("with room, the lookup did not list d4/ (%d List calls, CrowdedLookups %d)", b.listed("d4/")-lists, c.CrowdedLookups)
			}
			if !ns.listings.Has("d4/") {
				t.Error("with room, d4/'s listing is not cached after a lookup in it")
			}
		})
	}
}

// prefixCountingBucket counts List calls by prefix.
type prefixCountingBucket struct {
	*fakes.Bucket
	mu    sync.Mutex
	lists map[string]int
}

func (b *prefixCountingBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	b.mu.Lock()
	if b.lists == nil {
		b.lists = map[string]int{}
	}
	b.lists[prefix]++
	b.mu.Unlock()
	return b.Bucket.List(ctx, prefix, token)
}

func (b *prefixCountingBucket) listed(prefix string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lists[prefix]
}

// TestEmptyDirectoryRuleOnALocalPeek: a local directory's first look reads
// the first names its readdir gives (bucket.Peek), not the first in key
// order; an image among later names is still found (the List from the
// peek's Next), and a directory of only other files is still hidden.
func TestEmptyDirectoryRuleOnALocalPeek(t *testing.T) {
	dir := t.TempDir()
	put := func(k string) {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		put(fmt.Sprintf("mixed/%03d.txt", i))
		put(fmt.Sprintf("notes/%03d.txt", i))
	}
	put("mixed/zz.jpg") // after the 200 in key order
	put("few/a.jpg")
	b, err := bucket.Open(t.Context(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := newNS(t, b, Config{})
	if got := readDir(t, ns.Namespace, ""); !same(got, []string{"few/", "mixed/"}) {
		t.Errorf("root = %q, want few/ and mixed/ (notes/ holds no image)", got)
	}
}
