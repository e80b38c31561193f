package fs

import (
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/views"
)

func TestListingCachedForMetadataTTL(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	e := testMount(t, b) // MetadataTTL 1h on the fake clock
	dir := e.path("features", "tiny", "layer0", "d")
	if got := names(t, dir); !same(got, []string{"1.npy"}) {
		t.Fatalf("listing = %q", got)
	}
	lists := b.lists.Load()
	b.put("d/2.jpg", []byte("two"))
	b.del("d/1.jpg")
	if got := names(t, dir); !same(got, []string{"1.npy"}) {
		t.Errorf("within the TTL: %q, want the cached listing", got)
	}
	// Other layers share the listing of the same prefix.
	if got := names(t, e.path("features", "tiny", "pool", "d")); !same(got, []string{"1.npy"}) {
		t.Errorf("other layer within the TTL: %q", got)
	}
	if b.lists.Load() != lists {
		t.Errorf("%d List calls within the TTL, want 0", b.lists.Load()-lists)
	}
	e.clock.Advance(61 * time.Minute)
	if got := names(t, dir); !same(got, []string{"2.npy"}) {
		t.Errorf("after the TTL: %q, want the new listing", got)
	}
}

// TestNoNegativeFromPartialListing: while a listing is incomplete, a name it
// has not reached is looked up by Stat, not reported missing.
func TestNoNegativeFromPartialListing(t *testing.T) {
	b := newFakeBucket(2)
	for i := range 10 {
		b.put(fmt.Sprintf("d/%02d.jpg", i), []byte{byte(i)})
	}
	e := testMount(t, b, func(c *testConfig) { c.RelistPages = 1 })
	// The first lookup reads one page (00, 01) and falls back to Stat.
	for _, n := range []string{"00.npy", "09.npy", "05.npy"} {
		if _, err := os.Stat(e.path("features", "tiny", "layer0", "d", n)); err != nil {
			t.Errorf("stat %s: %v", n, err)
		}
	}
	if _, err := os.Stat(e.path("features", "tiny", "layer0", "d", "10.npy")); !os.IsNotExist(err) {
		t.Errorf("stat 10.npy: %v, want ENOENT from Stat", err)
	}
	if b.stats.Load() == 0 {
		t.Error("no Stat calls")
	}
}

// TestPaginationOf2500Objects lists a prefix of 2500 objects in pages of
// 1000, with a stem straddling a page boundary.
func TestPaginationOf2500Objects(t *testing.T) {
	b := newFakeBucket(1000)
	var want []string
	for i := range 2498 {
		b.put(fmt.Sprintf("big/%05d.jpg", i), []byte{byte(i)})
		if i != 999 {
			want = append(want, fmt.Sprintf("%05d.npy", i))
		}
	}
	// 00999.jpg ends page 1; 00999.png starts page 2.
	b.put("big/00999.png", []byte("png"))
	b.put("big/zzz.txt", []byte("hidden"))
	want = append(want, "00999.jpg.npy", "00999.png.npy")
	e := testMount(t, b)
	dir := e.path("features", "tiny", "layer2", "big")
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	b.lists.Store(0) // the root's listing
	got := names(t, dir)
	if len(got) != 2499 || !same(got, want) {
		t.Fatalf("%d names; first differences: %v", len(got), diff(got, want))
	}
	if n := b.lists.Load(); n != 3 {
		t.Errorf("%d List calls, want 3 pages", n)
	}
	// Lookups after the listing come from it: no Stat calls.
	for _, n := range []string{"00000.npy", "00999.jpg.npy", "02497.npy"} {
		if _, err := os.Stat(dir + "/" + n); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(dir + "/00999.npy"); !os.IsNotExist(err) {
		t.Errorf("00999.npy: %v, want ENOENT", err)
	}
	if b.stats.Load() != 0 || b.lists.Load() != 3 {
		t.Errorf("lookups after a complete listing called the bucket: %d stats, %d lists", b.stats.Load(), b.lists.Load())
	}
	ls := e.fs.Stats().FS
	if ls.ListingEntries < 2499 {
		t.Errorf("listing cache holds %d entries", ls.ListingEntries)
	}
}

// TestListingCacheIsBounded: a listing larger than the bound still lists,
// and lookups then go to the bucket.
func TestListingCacheIsBounded(t *testing.T) {
	b := newFakeBucket(100)
	for i := range 300 {
		b.put(fmt.Sprintf("d/%03d.jpg", i), []byte{byte(i)})
	}
	e := testMount(t, b, func(c *testConfig) { c.MaxListingEntries = 50 })
	if got := names(t, e.path("features", "tiny", "layer0", "d")); len(got) != 300 {
		t.Fatalf("%d names, want 300", len(got))
	}
	if st := e.fs.Stats().FS; st.ListingEntries > 50 {
		t.Errorf("listing cache holds %d entries, bound 50", st.ListingEntries)
	}
	if _, err := os.Stat(e.path("features", "tiny", "layer0", "d", "150.npy")); err != nil {
		t.Error(err)
	}
}

// ino is FNV-1a over the kind and the 0-separated parts, as it was with
// hash/fnv: inode numbers stay those of earlier releases.
func TestInoIsFNV1a(t *testing.T) {
	for _, parts := range [][]string{nil, {""}, {"features", "tiny", "layer0", "d/"}, {"features", "m", "pool", "a/b.jpg", `"0123abc"`}} {
		h := fnv.New64a()
		h.Write([]byte{'f'})
		for _, p := range parts {
			h.Write([]byte{0})
			h.Write([]byte(p))
		}
		if got, want := ino('f', parts...), views.InoFrom(h.Sum64()); got != want {
			t.Errorf("ino(f, %q) = %d, want %d", parts, got, want)
		}
	}
}

func TestStableInodes(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/2.jpg", []byte("two"))
	inoOf := func(p string) uint64 {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	e1 := testMount(t, b)
	e2 := testMount(t, b)
	seen := map[uint64]string{}
	for _, p := range []string{"features", "features/tiny", "features/tiny/layer0", "features/tiny/layer0/d", "features/tiny/layer0/d/1.npy",
		"features/tiny/layer0/d/2.npy", "features/tiny/layer1/d/1.npy", "features/tiny/pool/d/1.npy", "features/tiny/layers", ".featurefs/stats"} {
		a, c := inoOf(e1.path(p)), inoOf(e2.path(p))
		if a != c {
			t.Errorf("%s: inode %d in one mount, %d in another", p, a, c)
		}
		if prev, dup := seen[a]; dup {
			t.Errorf("%s and %s share inode %d", p, prev, a)
		}
		seen[a] = p
	}
	// Reading from the directory listing gives the same numbers.
	des, err := os.ReadDir(e1.path("features/tiny/layer0/d"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		info, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Sys().(*syscall.Stat_t).Ino; got != inoOf(e2.path("features/tiny/layer0/d", de.Name())) {
			t.Errorf("%s: readdir inode differs", de.Name())
		}
	}
	// An overwritten object becomes a new file once the listing expires.
	old := inoOf(e1.path("features/tiny/layer0/d/1.npy"))
	b.put("d/1.jpg", []byte("one, edited"))
	e3 := testMount(t, b)
	if inoOf(e3.path("features/tiny/layer0/d/1.npy")) == old {
		t.Error("an overwritten object kept its inode number")
	}
}

func diff(got, want []string) string {
	g := map[string]bool{}
	for _, n := range got {
		g[n] = true
	}
	var missing []string
	for _, n := range want {
		if !g[n] {
			missing = append(missing, n)
		}
		delete(g, n)
	}
	var extra []string
	for n := range g {
		extra = append(extra, n)
	}
	return fmt.Sprintf("missing %s; extra %s", strings.Join(first(missing, 5), ","), strings.Join(first(extra, 5), ","))
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// TestStaleCompleteListingIsReadAgainWhole: after the TTL, a lookup in a
// directory whose listing was complete lists it again, whole, instead of
// a Stat per name, even past RelistPages.
func TestStaleCompleteListingIsReadAgainWhole(t *testing.T) {
	b := newFakeBucket(10)
	for i := range 50 {
		b.put(fmt.Sprintf("d/%02d.jpg", i), []byte{byte(i)})
	}
	e := testMount(t, b, func(c *testConfig) { c.RelistPages = 1 })
	dir := e.path("features", "tiny", "layer0", "d")
	if got := names(t, dir); len(got) != 50 {
		t.Fatalf("%d names", len(got))
	}
	e.clock.Advance(2 * time.Hour)
	stats, lists := b.stats.Load(), b.lists.Load()
	// A name the kernel has not cached yet.
	b.put("d/new.jpg", []byte("new"))
	if _, err := os.Stat(dir + "/new.npy"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/nope.npy"); !os.IsNotExist(err) {
		t.Errorf("nope.npy: %v", err)
	}
	if b.stats.Load() != stats {
		t.Errorf("%d Stat calls after the TTL, want a relisting instead", b.stats.Load()-stats)
	}
	if n := b.lists.Load() - lists; n != 6 {
		t.Errorf("%d List calls, want 6 (51 entries in pages of 10)", n)
	}
}
