package fs

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/naming"
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
	"f.npy", "g", ".jpg", "i.Jpg",
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
	".jpg":       ".jpg.npy",
	"i.Jpg":      "i.Jpg.npy",
}

// listAll runs the resolver over the fake bucket's pages of prefix "".
func listAll(t *testing.T, b *fakeBucket) map[string]string {
	t.Helper()
	r := naming.NewResolver(naming.New([]string{"jpg", "jpeg", "png"}), "", nil)
	got := map[string]string{}
	token := ""
	for {
		p, err := b.List(t.Context(), "", token)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Add(p, p.Next == "") {
			if e.Dir {
				got[e.Name+"/"] = ""
				continue
			}
			if prev, dup := got[e.Obj.Key]; dup {
				t.Fatalf("%s named twice (%s, %s)", e.Obj.Key, prev, e.Name)
			}
			got[e.Obj.Key] = e.Name
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
	e2 := testMount(t, b2, func(c *testConfig) { c.RelistPages = 1 })
	for key, name := range wantNames {
		data, err := os.ReadFile(e2.path("features", "tiny", "layer2", name))
		if err != nil {
			t.Errorf("lookup %s (for %s) by Stat: %v", name, key, err)
			continue
		}
		if string(data) != string(expectedNPY(e2.x.Models()[0].Layers[2], []byte(key), e2.x.DType())) {
			t.Errorf("%s: wrong content", name)
		}
	}
	for _, name := range []string{"sub"} {
		if _, err := os.Stat(e2.path("features", "tiny", "layer2", name)); err != nil {
			t.Errorf("stat %s by Stat: %v", name, err)
		}
	}
	for _, name := range []string{"a.npy", "b.jpg.npy", "c.npy", "d.npy.npy", "f.npy", "g.npy", "nosuch.npy", "nosuchdir", "a.k.npy", ".npy", "i.npy", "a.jpg.jpg.npy"} {
		if _, err := os.Stat(e2.path("features", "tiny", "layer2", name)); !os.IsNotExist(err) {
			t.Errorf("stat %s by Stat: %v, want ENOENT", name, err)
		}
	}
	if e2.b.stats.Load() == 0 {
		t.Error("no Stat calls: the lookups did not take the Stat path")
	}
}

// issueKeys are the keys of issues 15 (items 3 and 4) and 16 (item 1):
// a directory named like a feature file, a base name that is only an
// extension, a key that is another key's long name, names too long for
// NAME_MAX, and a directory prefix longer than 255 bytes.
func issueKeys() []string {
	long := strings.Repeat("L", 250)
	return []string{
		"c.jpg", "c.npy/z.jpg", ".jpg",
		"col/a.jpg", "col/a.png", "col/a.jpg.jpg",
		"L/" + long + ".jpg", "L/" + long + ".png",
		"D/" + strings.Repeat("d", 300) + "/x.jpg",
	}
}

// walkFeatures lists a directory of a mount recursively and reads every
// file: it returns object key -> path (want maps content to key), failing
// on a repeated name, a name over 255 bytes or a feature reached twice.
func walkFeatures(t *testing.T, e *env, dir string, want map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	var walk func(rel string)
	walk = func(rel string) {
		des, err := os.ReadDir(e.path(dir, rel))
		if err != nil {
			t.Errorf("readdir %s: %v", rel, err)
			return
		}
		seen := map[string]bool{}
		for _, de := range des {
			n := de.Name()
			if seen[n] {
				t.Errorf("%s: name %q listed twice", rel, n)
			}
			seen[n] = true
			if len(n) > naming.NameMax {
				t.Errorf("%s: a name of %d bytes", rel, len(n))
			}
			p := path.Join(rel, n)
			if de.IsDir() {
				walk(p)
				continue
			}
			data, err := os.ReadFile(e.path(dir, p))
			if err != nil {
				t.Errorf("read %s: %v", p, err)
				continue
			}
			key, ok := want[string(data)]
			if !ok {
				t.Errorf("%s: the content of no object", p)
				continue
			}
			if prev, dup := got[key]; dup {
				t.Errorf("%s reached twice: as %s and %s", key, prev, p)
			}
			got[key] = p
		}
	}
	walk("")
	return got
}

// TestIssueKeysNamedOnce: every image object of the issues' keys is reached
// exactly once, under distinct names of at most 255 bytes, through listings
// (pages of 1 and of 1000 keys) and through lookups of those names on a
// mount that has no complete listing (Stat path).
func TestIssueKeysNamedOnce(t *testing.T) {
	for _, pageSize := range []int{1, 1000} {
		b := newFakeBucket(pageSize)
		for _, k := range issueKeys() {
			b.put(k, []byte("content of "+k))
		}
		e := testMount(t, b)
		want := map[string]string{}
		for _, k := range issueKeys() {
			want[string(expectedNPY(e.x.Models()[0].Layers[2], []byte("content of "+k), e.x.DType()))] = k
		}
		got := walkFeatures(t, e, "features/tiny/layer2", want)
		for _, k := range issueKeys() {
			if _, ok := got[k]; !ok {
				t.Errorf("page size %d: %s not reached", pageSize, k)
			}
		}
		for k, name := range map[string]string{"c.jpg": "c.jpg.npy", ".jpg": ".jpg.npy", "col/a.jpg": "col/a.jpg.npy",
			"col/a.png": "col/a.png.npy", "col/a.jpg.jpg": "col/a.jpg.jpg.npy", "c.npy/z.jpg": "c.npy/z.npy"} {
			if got[k] != name {
				t.Errorf("%s is %q, want %q", k, got[k], name)
			}
		}

		b2 := newFakeBucket(1)
		for _, k := range issueKeys() {
			b2.put(k, []byte("content of "+k))
		}
		e2 := testMount(t, b2, func(c *testConfig) { c.RelistPages = 1 })
		for key, p := range got {
			data, err := os.ReadFile(e2.path("features/tiny/layer2", p))
			if err != nil {
				t.Errorf("lookup %s (%s) without a listing: %v", p, key, err)
				continue
			}
			if want[string(data)] != key {
				t.Errorf("lookup %s without a listing: got %s, want %s", p, want[string(data)], key)
			}
		}
		if e2.b.stats.Load() == 0 {
			t.Error("no Stat calls: the lookups did not take the Stat path")
		}
	}
}

// TestRenameLoggedOnce: a name other than the plain rule's is logged once,
// at WARN with the key, however often the directory is listed.
func TestRenameLoggedOnce(t *testing.T) {
	b := newFakeBucket(1000)
	for _, k := range issueKeys() {
		b.put(k, []byte(k))
	}
	e := testMount(t, b)
	for range 3 {
		names(t, e.path("features", "tiny", "layer0"))
		names(t, e.path("features", "tiny", "layer0", "L"))
		e.clock.Advance(2 * time.Hour)
	}
	logs := e.logs.String()
	for _, key := range []string{"c.jpg", ".jpg", "L/" + strings.Repeat("L", 250) + ".png"} {
		n := 0
		for line := range strings.SplitSeq(logs, "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "renamed") && strings.Contains(line, " key="+key+" ") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d rename lines, want 1:\n%s", key, n, logs)
		}
	}
}
