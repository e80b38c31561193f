package namespace

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/fs/naming"
)

// A record keeps every field of an entry: a field added to naming.Entry or
// bucket.Object must be added to the record (packed.go) and here.
func TestPackedKeepsEveryField(t *testing.T) {
	fields := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			out = append(out, rt.Field(i).Name)
		}
		return out
	}
	if got, want := fields(naming.Entry{}), []string{"Name", "Dir", "Sub", "Obj"}; !slices.Equal(got, want) {
		t.Errorf("naming.Entry has fields %v; packed records keep %v", got, want)
	}
	if got, want := fields(bucket.Object{}), []string{"Key", "Size", "ETag", "ModTime", "Identity", "Plain"}; !slices.Equal(got, want) {
		t.Errorf("bucket.Object has fields %v; packed records keep %v", got, want)
	}
}

func TestPackedRoundTrip(t *testing.T) {
	local := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.Local)
	es := []naming.Entry{
		{Name: "cat.npy", Obj: bucket.Object{Key: "train/cat.jpg", Size: 12345, ETag: `"0123456789abcdef"`, ModTime: local.UTC()}},
		{Name: "dog.jpg.npy", Obj: bucket.Object{Key: "train/dog.jpg", Size: 0, ETag: "7-1700000000", ModTime: local, Identity: "real/dog.jpg"}},
		{Name: "cat.cls", Obj: bucket.Object{Key: "train/s.tar/cat.cls", Size: 2, ETag: "m-1", ModTime: local.UTC(), Plain: true}},
		{Name: "sub", Dir: true, Sub: "train/sub/"},
		{Name: "odd", Dir: true, Sub: "elsewhere/odd/"}, // a sub not under the prefix
		{Name: "zero.npy", Obj: bucket.Object{Key: "other/zero.png"}},
	}
	p := packed{prefix: "train/"}
	for _, e := range es {
		if ok, full := p.add(e); !ok || full {
			t.Fatalf("add %s: added %v, full %v", e.Name, ok, full)
		}
	}
	if ok, _ := p.add(naming.Entry{Name: "cat.npy", Dir: true, Sub: "train/cat/"}); ok {
		t.Error("a second entry called cat.npy was added")
	}
	if p.len() != len(es) {
		t.Fatalf("%d entries, want %d", p.len(), len(es))
	}
	for i, want := range es {
		if got := p.entry(i); got != want {
			t.Errorf("entry %d = %+v, want %+v", i, got, want)
		}
		j, ok := p.index(want.Name)
		if !ok || j != i {
			t.Errorf("index(%s) = %d, %v; want %d", want.Name, j, ok, i)
		}
	}
	if _, ok := p.index("missing.npy"); ok {
		t.Error("found a name never added")
	}
}

// A listing past its cache's bounds keeps no entry and is never complete
// (so that lookups ask the store), but still hands out what each page
// adds.
func TestListingOverflowKeepsNothing(t *testing.T) {
	l := testListing("d/", 4<<10, 1<<20)
	var handed int
	for i := range 200 {
		handed += len(l.append([]naming.Entry{fileEntry("d/", i)}))
	}
	if handed != 200 {
		t.Errorf("handed out %d entries, want 200", handed)
	}
	l.markComplete()
	if n, complete := l.snapshot(); n != 0 || complete {
		t.Errorf("overflowed listing: %d entries, complete %v; want 0, false", n, complete)
	}
	if b, _ := l.cost(); b > 1<<10 {
		t.Errorf("overflowed listing costs %d bytes", b)
	}
}

// The listing cache drops its coldest listings when what the tree holds
// grows, keeping a quarter of the budget for them, and says which.
func TestListingCacheHonoursTheBudget(t *testing.T) {
	var dropped []string
	c := newListingCache(1<<20, 1<<30, func(p string) { dropped = append(dropped, p) })
	for d := range 8 {
		prefix := fmt.Sprintf("d%d/", d)
		l := testListing(prefix, c.maxBytes, c.maxEntries)
		for i := range 500 {
			l.append([]naming.Entry{fileEntry(prefix, i)})
		}
		c.Put(prefix, l)
	}
	_, _, b := c.Size()
	if b > c.maxBytes || len(dropped) != 0 {
		t.Fatalf("8 small listings: %d bytes, dropped %v", b, dropped)
	}
	c.Get("d0/") // d0 is now the most recently used: d1 goes first
	c.held.Add(c.maxBytes - b/2)
	c.Trim()
	_, _, after := c.Size()
	if after+c.held.Load() > c.maxBytes && after > c.maxBytes/listingShare {
		t.Errorf("after the tree grew: listings %d bytes + held %d > budget %d", after, c.held.Load(), c.maxBytes)
	}
	if len(dropped) == 0 || dropped[0] != "d1/" || slices.Contains(dropped, "d0/") {
		t.Errorf("dropped %v; want the coldest first (d1/), never d0/", dropped)
	}
	if c.drops.Load() != int64(len(dropped)) {
		t.Errorf("drops = %d, %d dropped", c.drops.Load(), len(dropped))
	}
	c.held.Add(10 * c.maxBytes) // the tree holds far more than the budget
	c.Trim()
	if _, _, b := c.Size(); b > c.maxBytes/listingShare {
		t.Errorf("listings keep %d bytes, want at most a quarter of %d", b, c.maxBytes)
	}
}

func testListing(prefix string, maxBytes int64, maxEntries int) *Listing {
	return &Listing{prefix: prefix, p: packed{prefix: prefix}, maxBytes: maxBytes, maxEntries: maxEntries, checked: make(chan struct{})}
}

// fileEntry is the i-th image of an ImageNet-like directory.
func fileEntry(prefix string, i int) naming.Entry {
	stem := fmt.Sprintf("n01440764_%08d", i)
	return naming.Entry{Name: stem + ".npy", Obj: bucket.Object{
		Key: prefix + stem + ".JPEG", Size: 100000 + int64(i), ETag: fmt.Sprintf(`"%032x"`, i*7919),
		ModTime: time.Unix(1700000000+int64(i), 0).UTC()}}
}

// BenchmarkListingMemory lists n synthetic entries (ImageNet-like names and
// S3 ETags, 1,000 per directory) into a listing cache with a 64 MiB
// budget: bytes/entry is what one packed entry takes, heap-MiB the live
// heap after the listing, which stays flat from 1M to 10M entries.
func BenchmarkListingMemory(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			for range b.N {
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				c := newListingCache(64<<20, 1<<30, nil)
				const perDir = 1000
				for d := range n / perDir {
					prefix := fmt.Sprintf("train/n%08d/", d)
					l := testListing(prefix, c.maxBytes, c.maxEntries)
					es := make([]naming.Entry, 0, perDir)
					for i := range perDir {
						es = append(es, fileEntry(prefix, d*perDir+i))
					}
					l.append(es)
					l.markComplete()
					c.Put(prefix, l)
				}
				var after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&after)
				_, entries, bytes := c.Size()
				b.ReportMetric(float64(bytes)/float64(entries), "bytes/entry")
				b.ReportMetric(float64(after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))/(1<<20), "heap-MiB")
				b.ReportMetric(float64(entries), "entries-kept")
				runtime.KeepAlive(c)
			}
		})
	}
}

// A directory read lists the subdirectories that follow it in its parent
// in the background (up to aheadDirs, aheadRuns at a time): a walk then
// finds them listed, and reads each one from the store once.
func TestDirectoryReadListsSiblingsAhead(t *testing.T) {
	b := fakes.NewBucket(1000)
	for d := range 10 {
		for i := range 5 {
			b.Put(fmt.Sprintf("d%d/%d.jpg", d, i), []byte{byte(d), byte(i)})
		}
	}
	ns := newNS(t, b, Config{})
	if got := readDir(t, ns.Namespace, ""); len(got) != 10 {
		t.Fatalf("root lists %v", got)
	}
	ahead := func(prefix string) bool {
		l, ok := ns.listings.Peek(prefix)
		return ok && l.Complete()
	}
	waitAhead := func(prefixes ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, p := range prefixes {
			for !ahead(p) {
				if time.Now().After(deadline) {
					t.Fatalf("%s not listed ahead after 10s", p)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	// Looking into the 10 subdirectories (are they shown?) listed them
	// once each: count from here.
	before := b.Lists.Load()
	if got := readDir(t, ns.Namespace, "d0/"); len(got) != 5 {
		t.Fatalf("d0/ lists %v", got)
	}
	waitAhead("d1/", "d2/")
	for _, p := range []string{"d5/", "d9/"} {
		if ahead(p) {
			t.Errorf("%s listed ahead, further than %d directories after d0/", p, aheadDirs)
		}
	}
	// Reading d1/ and d2/ (listed ahead) calls no List for them, but starts
	// the next ones' in the background: counting List calls per read would
	// count those. That no directory is read twice is the total below.
	for d := 1; d < 10; d++ {
		if got := readDir(t, ns.Namespace, fmt.Sprintf("d%d/", d)); len(got) != 5 {
			t.Fatalf("d%d/ lists %v", d, got)
		}
	}
	waitAhead() // nothing: the runs end with the reads
	if c := ns.Counts(); c.ListedAhead < 2 || b.Lists.Load()-before != 10 {
		t.Errorf("%d listed ahead, %d List calls for 10 directories; want 2 or more, and one per directory", c.ListedAhead, b.Lists.Load()-before)
	}
}

// A walk goes on reading ahead when the listings fill the metadata budget:
// a listing read ahead evicts the coldest, a directory the walk has read,
// and stays until the walk reads it (at 10,000,000 entries a walk that
// stopped reading ahead once the listings took half the budget read each
// directory while its reader waited). The budget holds 40 of the 60
// directories' listings; each directory is found listed ahead, and listed
// once.
func TestWalkReadsAheadWithTheBudgetFull(t *testing.T) {
	b := fakes.NewBucket(1000)
	const dirs = 60
	for d := range dirs {
		for i := range 50 {
			b.Put(fmt.Sprintf("d%02d/%03d.jpg", d, i), []byte{byte(d), byte(i)})
		}
	}
	probe := newNS(t, b, Config{})
	readDir(t, probe.Namespace, "d00/")
	pl, ok := probe.listings.Peek("d00/")
	if !ok {
		t.Fatal("d00/ not cached")
	}
	one, _ := pl.cost()
	ns := newNS(t, b, Config{MetadataBytes: 40 * one})
	if got := readDir(t, ns.Namespace, ""); len(got) != dirs {
		t.Fatalf("root lists %d directories", len(got))
	}
	before := b.Lists.Load()
	for d := range dirs {
		p := fmt.Sprintf("d%02d/", d)
		if d > 0 {
			deadline := time.Now().Add(10 * time.Second)
			for {
				if l, ok := ns.listings.Peek(p); ok && l.Complete() {
					break
				}
				if time.Now().After(deadline) {
					_, _, bytes := ns.listings.Size()
					t.Fatalf("%s not listed ahead after 10s (listings %d of %d bytes)", p, bytes, ns.listings.limit())
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		if got := readDir(t, ns.Namespace, p); len(got) != 50 {
			t.Fatalf("%s lists %d entries", p, len(got))
		}
	}
	c := ns.Counts()
	if lists := b.Lists.Load() - before; lists != dirs || c.ListedAhead < dirs-1 {
		t.Errorf("%d List calls, %d listed ahead for %d directories; want one each, all but the first ahead", lists, c.ListedAhead, dirs)
	}
	if _, _, bytes := ns.listings.Size(); ns.listings.drops.Load() == 0 || bytes > ns.listings.limit() {
		t.Errorf("%d listings dropped, %d bytes of %d: the budget was not full, or was passed", ns.listings.drops.Load(), bytes, ns.listings.limit())
	}
}
