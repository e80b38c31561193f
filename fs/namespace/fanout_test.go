package namespace

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"

	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// listAll reads prefix's listing whole (as a lookup's or a read ahead's
// listing does) and returns its entries, by name.
func listAll(t *testing.T, ns *Namespace, prefix string) []string {
	t.Helper()
	l, err := ns.relist(prefix, 0)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !l.Complete() {
		t.Fatalf("%q: listing not complete", prefix)
	}
	es, _ := l.from(0, l.len())
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%s dir=%v sub=%s key=%s etag=%s", e.Name, e.Dir, e.Sub, e.Obj.Key, e.Obj.ETag)
	}
	// The naming rule holds an object back until its name is decided,
	// which a page's end can delay: the order of the entries follows the
	// page bounds (as between two page sizes), their set does not.
	slices.Sort(out)
	return out
}

// TestFanOutListsAsSequential lists large prefixes (decimal names, letters,
// subdirectories among the objects, names that split nowhere) with
// ListFanout 4 and one page at a time: the same entries, names and
// objects; the split listing had more than one request in flight and never
// more than ListFanout, and few more requests than pages.
func TestFanOutListsAsSequential(t *testing.T) {
	fill := func(b *fakes.Bucket) {
		for i := range 2500 {
			b.Put(fmt.Sprintf("big/img%06d.jpg", i), []byte(fmt.Sprint(i)))
		}
		for i := range 30 {
			b.Put(fmt.Sprintf("big/img%06d/x.jpg", i*83), []byte{1})
		}
		for i := range 600 {
			b.Put(fmt.Sprintf("abc/%c%c%03d.png", 'a'+i%26, 'A'+i/26, i), []byte(fmt.Sprint(i)))
		}
		for i := range 300 {
			b.Put(fmt.Sprintf("odd/~%03d.jpg", i), []byte(fmt.Sprint(i)))
		}
	}
	seqB, parB := fakes.NewBucket(100), fakes.NewBucket(100)
	fill(seqB)
	fill(parB)
	parB.ListDelay = 2 * time.Millisecond
	// ShowEmptyDirs: no looks into subdirectories, so that every List
	// call in flight is one of a key range.
	seq := newNS(t, seqB, Config{ShowEmptyDirs: true})
	par := newNS(t, parB, Config{ShowEmptyDirs: true, ListFanout: 4, ListRanges: true})
	for _, prefix := range []string{"big/", "abc/", "odd/"} {
		want := listAll(t, seq.Namespace, prefix)
		got := listAll(t, par.Namespace, prefix)
		if !slices.Equal(got, want) {
			i := firstDiff(got, want)
			t.Errorf("%s: split listing has %d entries, sequential %d; first difference at %d: %v vs %v", prefix, len(got), len(want),
				i, got[max(0, i-2):min(len(got), i+3)], want[max(0, i-2):min(len(want), i+3)])
		}
	}
	if n := len(listAll(t, seq.Namespace, "big/")); n != 2530 {
		t.Errorf("big/: %d entries, want 2530", n)
	}
	if m := parB.MaxListsInFlight.Load(); m < 2 || m > 4 {
		t.Errorf("split listings had at most %d List calls in flight, want 2..4 (ListFanout)", m)
	}
	// The split costs one request more per range of whole pages (its end
	// is known from a page past it) and one per empty range: big/ is 26
	// pages of 100, in ranges of about a page, the last splitting again.
	before := parB.Lists.Load()
	par.listings.RemoveIf("big/", func(*Listing) bool { return true })
	listAll(t, par.Namespace, "big/")
	if n := parB.Lists.Load() - before; n > 2*26+10 {
		t.Errorf("a split listing of 26 pages made %d List calls", n)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestSplitPoints(t *testing.T) {
	got := splitPoints("img000000.jpg", "img000099.jpg")
	want := []string{"img0001", "img0002", "img0003", "img0004", "img0005", "img0006", "img0007", "img0008", "img0009",
		"img0010", "img0011", "img0012", "img0013", "img0014", "img0015", "img0016"}
	if !slices.Equal(got, want) {
		t.Errorf("splitPoints = %v, want %v", got, want)
	}
	// Counting carries within each position's class.
	if got := splitPoints("ay9a", "ay9z"); len(got) != 16 || got[0] != "az0" || got[10] != "ba0" {
		t.Errorf("splitPoints(ay9a, ay9z) = %v", got)
	}
	if got := splitPoints("a.jpg", "b.jpg"); len(got) != 0 {
		t.Errorf("names sharing no start split at %v", got)
	}
	if got := splitPoints("~~a", "~~b"); len(got) != 0 {
		t.Errorf("a start ending in punctuation split at %v", got)
	}
	if got := splitPoints("Z9a", "Z9b"); len(got) != 0 {
		t.Errorf("a start that cannot count on split at %v", got)
	}
}

// TestDirectoryReaderReadsRangesInBackground reads a 2,500-object prefix
// with a directory reader (ls of a directory never listed): from its third
// page on, the reader's pages come from key ranges read at once in the
// background, and it hands out the entries a reader of one page at a time
// gets. A reader closed after its first pages stops its background read
// and frees its slot.
func TestDirectoryReaderReadsRangesInBackground(t *testing.T) {
	fill := func(b *fakes.Bucket) {
		for i := range 2500 {
			b.Put(fmt.Sprintf("big/img%06d.jpg", i), []byte(fmt.Sprint(i)))
		}
	}
	seqB, parB := fakes.NewBucket(100), fakes.NewBucket(100)
	fill(seqB)
	fill(parB)
	parB.ListDelay = 2 * time.Millisecond
	seq := newNS(t, seqB, Config{ShowEmptyDirs: true})
	par := newNS(t, parB, Config{ShowEmptyDirs: true, ListFanout: 4, ListRanges: true})
	want, got := readDir(t, seq.Namespace, "big/"), readDir(t, par.Namespace, "big/")
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != 2500 || !slices.Equal(got, want) {
		t.Fatalf("ranges read in the background gave %d entries, one page at a time %d", len(got), len(want))
	}
	if m := parB.MaxListsInFlight.Load(); m < 2 || m > 4 {
		t.Errorf("the reader had at most %d List calls in flight, want 2..4 (ListFanout)", m)
	}

	// Closed early: the slot comes back, and nothing is listed after.
	par.listings.RemoveIf("big/", func(*Listing) bool { return true })
	r := par.OpenDir(t.Context(), "big/")
	for range 3 {
		if _, err := r.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(par.streamSlots) != 1 {
		t.Fatalf("a reader past its second page holds %d background slots, want 1", len(par.streamSlots))
	}
	r.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(par.streamSlots) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a closed reader still holds its background slot after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	lists := parB.Lists.Load()
	time.Sleep(50 * time.Millisecond)
	if n := parB.Lists.Load() - lists; n != 0 {
		t.Errorf("%d List calls after the reader was closed", n)
	}
}

// latencyBucket is a one-prefix bucket of sorted keys whose List answers
// in a fixed delay whatever the calls in flight: a remote store's round
// trip, without the CPU cost of fakes.Bucket's listing.
type latencyBucket struct {
	fakes.Bucket // Stat, Get, Keys, Identity of an empty bucket
	prefix       string
	keys         []string // sorted, under prefix
	delay        time.Duration
	lists        atomic.Int64
}

func (b *latencyBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	b.lists.Add(1)
	time.Sleep(b.delay)
	if k, ok := bucket.AfterKey(token); ok {
		token = k
	}
	if prefix != b.prefix {
		return bucket.Page{}, nil
	}
	i, found := slices.BinarySearch(b.keys, token)
	if found {
		i++
	}
	var p bucket.Page
	for ; i < len(b.keys) && len(p.Objects) < 1000; i++ {
		p.Objects = append(p.Objects, bucket.Object{Key: b.keys[i], ETag: "e"})
	}
	if i < len(b.keys) {
		p.Next = b.keys[i-1]
	}
	return p, nil
}

// BenchmarkLatencyBoundListing lists a 50,000-object prefix (50 pages of
// 1,000) whole from a store that answers each List call in 20ms whatever
// the calls in flight (a remote store's round trip): one page at a time
// (seq) against key ranges at once (ListFanout 8). Compare the two
// ns/op of one run.
func BenchmarkLatencyBoundListing(b *testing.B) {
	bk := &latencyBucket{prefix: "flat/", delay: 20 * time.Millisecond}
	for i := range 50_000 {
		bk.keys = append(bk.keys, fmt.Sprintf("flat/i%07d.jpg", i))
	}
	for _, c := range []struct {
		name   string
		fanout int
	}{{"seq", 0}, {"fanout8", 8}} {
		b.Run(c.name, func(b *testing.B) {
			ns := newNS(b, bk, Config{ShowEmptyDirs: true, ListFanout: c.fanout, ListRanges: true})
			lists := bk.lists.Load()
			for b.Loop() {
				ns.listings.RemoveIf("flat/", func(*Listing) bool { return true })
				l, err := ns.relist("flat/", 0)(context.Background())
				if err != nil || !l.Complete() || l.len() != 50_000 {
					b.Fatalf("listing: %v, %d entries", err, l.len())
				}
			}
			b.ReportMetric(float64(bk.lists.Load()-lists)/float64(b.N), "lists/op")
		})
	}
}
