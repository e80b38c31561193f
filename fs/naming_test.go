package fs

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
)

// trickyKeys exercise the naming rule: stems shared by several extensions
// (also in upper case), stems that are prefixes of other stems, hidden
// non-images and names that sort between members of one stem.
var trickyKeys = []string{
	"a.jpg", "a.png", "a.jpg.x", "a.b.jpg", "a.jpeg.png", "a.k",
	"b.jpg",
	"c.JPG", "c.png",
	"d.txt", "d.jpeg",
	"e.JPEG",
	"f.npy", "g", ".jpg",
	"h.jpg.jpg",
	"sub/x.jpg",
}

// wantNames is the naming rule applied by hand to trickyKeys.
var wantNames = map[string]string{
	"a.jpg":      "a.jpg.npy",
	"a.png":      "a.png.npy",
	"a.b.jpg":    "a.b.npy",
	"a.jpeg.png": "a.jpeg.npy",
	"b.jpg":      "b.npy",
	"c.JPG":      "c.JPG.npy",
	"c.png":      "c.png.npy",
	"d.jpeg":     "d.npy",
	"e.JPEG":     "e.npy",
	"h.jpg.jpg":  "h.jpg.npy",
}

// listAll runs the resolver over the fake bucket's pages of prefix "".
func listAll(t *testing.T, b *fakeBucket) map[string]string {
	t.Helper()
	r := newResolver(newNaming([]string{"jpg", "jpeg", "png"}), "")
	got := map[string]string{}
	token := ""
	for {
		p, err := b.List(t.Context(), "", token)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.add(p, p.Next == "") {
			if e.dir {
				got[e.name+"/"] = ""
				continue
			}
			if prev, dup := got[e.obj.Key]; dup {
				t.Fatalf("%s named twice (%s, %s)", e.obj.Key, prev, e.name)
			}
			got[e.obj.Key] = e.name
		}
		if p.Next == "" {
			return got
		}
		token = p.Next
	}
}

// TestNamingRuleIndependentOfPageSize decides the names of the same keys
// with every page size from 1 up: pages boundaries fall between members of
// a stem, and the names must not change.
func TestNamingRuleIndependentOfPageSize(t *testing.T) {
	for size := 1; size <= len(trickyKeys)+1; size++ {
		b := newFakeBucket(size)
		for _, k := range trickyKeys {
			b.put(k, []byte(k))
		}
		got := listAll(t, b)
		want := map[string]string{"sub/": ""}
		for k, v := range wantNames {
			want[k] = v
		}
		if fmt.Sprint(sortedMap(got)) != fmt.Sprint(sortedMap(want)) {
			t.Fatalf("page size %d:\n got %v\nwant %v", size, sortedMap(got), sortedMap(want))
		}
	}
}

func sortedMap(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func TestResolverHoldsBackAcrossPages(t *testing.T) {
	r := newResolver(newNaming([]string{"jpg", "png"}), "p/")
	es := r.add(bucket.Page{Objects: []bucket.Object{{Key: "p/a.jpg"}}}, false)
	if len(es) != 0 {
		t.Fatalf("a.jpg decided before a.png could be seen: %+v", es)
	}
	es = r.add(bucket.Page{Objects: []bucket.Object{{Key: "p/a.png"}, {Key: "p/b.jpg"}}}, false)
	if len(es) != 2 || es[0].name != "a.jpg.npy" || es[1].name != "a.png.npy" {
		t.Fatalf("got %+v", es)
	}
	es = r.add(bucket.Page{}, true)
	if len(es) != 1 || es[0].name != "b.npy" {
		t.Fatalf("last page: %+v", es)
	}
}

// TestNamingThroughTheMount checks the names a listing shows, and that
// lookups without any listing (Stat path: the listing never completes
// within RelistPages) resolve the same names, and refuse the others.
func TestNamingThroughTheMount(t *testing.T) {
	b := newFakeBucket(1000)
	for _, k := range trickyKeys {
		b.put(k, []byte(k))
	}
	e := testMount(t, b)
	var want []string
	for _, n := range wantNames {
		want = append(want, n)
	}
	want = append(want, "sub/")
	if got := names(t, e.path("features", "tiny", "layer2")); !same(got, want) {
		t.Errorf("listing = %q\nwant %q", got, want)
	}

	// A second mount over a bucket whose pages are too small to finish a
	// listing within one page: lookups go to Stat.
	b2 := newFakeBucket(1)
	for _, k := range trickyKeys {
		b2.put(k, []byte(k))
	}
	e2 := testMount(t, b2, func(c *Config) { c.RelistPages = 1 })
	for key, name := range wantNames {
		if key == "c.JPG" || key == "c.png" {
			continue // c.JPG and c.png: found by Stat as well, below
		}
		data, err := os.ReadFile(e2.path("features", "tiny", "layer2", name))
		if err != nil {
			t.Errorf("lookup %s (for %s) by Stat: %v", name, key, err)
			continue
		}
		if string(data) != string(expectedNPY(e2.x.models[0].Layers[2], []byte(key), e2.x.dtype)) {
			t.Errorf("%s: wrong content", name)
		}
	}
	for _, name := range []string{"c.JPG.npy", "c.png.npy", "sub"} {
		if _, err := os.Stat(e2.path("features", "tiny", "layer2", name)); err != nil {
			t.Errorf("stat %s by Stat: %v", name, err)
		}
	}
	for _, name := range []string{"a.npy", "b.jpg.npy", "c.npy", "d.npy.npy", "f.npy", "g.npy", "nosuch.npy", "nosuchdir", "a.k.npy"} {
		if _, err := os.Stat(e2.path("features", "tiny", "layer2", name)); !os.IsNotExist(err) {
			t.Errorf("stat %s by Stat: %v, want ENOENT", name, err)
		}
	}
	if e2.b.stats.Load() == 0 {
		t.Error("no Stat calls: the lookups did not take the Stat path")
	}
}
