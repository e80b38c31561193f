package namespace

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
	par := newNS(t, parB, Config{ShowEmptyDirs: true, ListFanout: 4})
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
	// pages of 100, split into 19 ranges (7 empty).
	before := parB.Lists.Load()
	par.listings.RemoveIf("big/", func(*Listing) bool { return true })
	listAll(t, par.Namespace, "big/")
	if n := parB.Lists.Load() - before; n > 26+28 {
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
		"img001", "img002", "img003", "img004", "img005", "img006", "img007", "img008", "img009",
		"img01", "img02", "img03", "img04", "img05", "img06", "img07", "img08", "img09"}
	if !slices.Equal(got, want) {
		t.Errorf("splitPoints = %v, want %v", got, want)
	}
	if got := splitPoints("a.jpg", "b.jpg"); len(got) != 0 {
		t.Errorf("names sharing no start split at %v", got)
	}
	if got := splitPoints("~~a", "~~b"); len(got) != 0 {
		t.Errorf("a start of punctuation split at %v", got)
	}
	// Only positions of the varying character's class split.
	if got := splitPoints("ab0x", "ab9y"); len(got) != 0 {
		t.Errorf("splitPoints(ab0x, ab9y) = %v, want none (letters above a varying digit)", got)
	}
	if got := splitPoints("ab00x", "ab09y"); !slices.Equal(got, []string{"ab1", "ab2", "ab3", "ab4", "ab5", "ab6", "ab7", "ab8", "ab9"}) {
		t.Errorf("splitPoints(ab00x, ab09y) = %v", got)
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
	par := newNS(t, parB, Config{ShowEmptyDirs: true, ListFanout: 4})
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
