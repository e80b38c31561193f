package fs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
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

// genKeys returns a random key set built to collide: stems shared by
// several extensions in mixed case, empty stems, keys that are other
// keys' long names or stems, directories named like feature files (short,
// long and shortened forms), names of the shortened form, long names and
// a directory prefix over 255 bytes.
func genKeys(r *rand.Rand) []string {
	stems := []string{"a", "b", "", "a.jpg", "a.png", "a.jpg.jpg", "x~0123456789abcdef", "é", "a-1",
		strings.Repeat("s", 250), strings.Repeat("é", 120), strings.Repeat("t", 251)}
	for range 3 {
		stems = append(stems, string([]byte("ab.~-")[r.IntN(5)])+string([]byte("ab.-")[r.IntN(4)]))
	}
	exts := []string{".jpg", ".JPG", ".Jpg", ".png", ".PNG", ".pNg", ".jpeg", ".JPEG", ".txt", ".npy", ""}
	dirs := []string{"", "d/"}
	set := map[string]bool{}
	n := 3 + r.IntN(20)
	for len(set) < n {
		d := dirs[r.IntN(len(dirs))]
		s := stems[r.IntN(len(stems))]
		e := exts[r.IntN(len(exts))]
		var k string
		switch r.IntN(10) {
		case 0: // a directory named like a short or a long name
			k = d + s + e + ".npy/z.jpg"
		case 1: // a directory over 255 bytes, or of the shortened form
			k = d + []string{strings.Repeat("D", 300), "q~0123456789abcdef", naming.Shortened("b.jpg", naming.NPYExt), naming.Shortened(strings.Repeat("D", 300), "")}[r.IntN(4)] + "/z" + e
		case 2: // a key that is another key's long name, or has its stem
			for o := range set {
				k = o + []string{".jpg", ".npy", ".png"}[r.IntN(3)]
				break
			}
		default:
			k = d + s + e
		}
		if k != "" && !strings.HasSuffix(k, "/") {
			set[k] = true
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// refNames is the naming rule of the package doc applied to a whole key
// set at once (no pages, no look-ahead): key -> path for image objects,
// prefix -> path for directories.
func refNames(n naming.Rule, keys []string) map[string]string {
	out := map[string]string{}
	type dir struct {
		subs  map[string]bool // component names
		files map[string]bool // base names
	}
	dirs := map[string]*dir{}
	get := func(p string) *dir {
		if dirs[p] == nil {
			dirs[p] = &dir{subs: map[string]bool{}, files: map[string]bool{}}
		}
		return dirs[p]
	}
	for _, k := range keys {
		p := ""
		parts := strings.Split(k, "/")
		for _, c := range parts[:len(parts)-1] {
			get(p).subs[c] = true
			p += c + "/"
		}
		get(p).files[parts[len(parts)-1]] = true
	}
	pathOf := map[string]string{"": ""}
	var prefixes []string
	for p := range dirs {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes) // parents first
	for _, p := range prefixes {
		d := dirs[p]
		for c := range d.subs {
			pathOf[p+c+"/"] = pathOf[p] + naming.DirName(c) + "/"
			out[p+c+"/"] = pathOf[p+c+"/"]
		}
		group := map[string]int{}
		for b := range d.files {
			if stem, ext, ok := n.Parts(b); ok && naming.PlainCase(ext) {
				group[stem]++
			}
		}
		for b := range d.files {
			stem, ext, ok := n.Parts(b)
			if !ok {
				continue
			}
			_, baseIsImage := n.Split(stem)
			name := naming.Shortened(b, naming.NPYExt)
			switch {
			case naming.PlainCase(ext) && group[stem] == 1 && stem != "" && !(d.files[stem] && baseIsImage) &&
				!d.subs[stem+naming.NPYExt] && naming.Usable(stem+naming.NPYExt):
				name = stem + naming.NPYExt
			case !d.subs[b+naming.NPYExt] && naming.Usable(b+naming.NPYExt):
				name = b + naming.NPYExt
			}
			out[p+b] = pathOf[p] + name
		}
	}
	return out
}

// listTree names a fake bucket's tree with the resolver, as listings do:
// key -> path for image objects, prefix -> path for directories. It fails
// on a name repeated in a directory.
func listTree(t *testing.T, n naming.Rule, b *fakeBucket) map[string]string {
	t.Helper()
	out := map[string]string{}
	var rec func(prefix, at string)
	rec = func(prefix, at string) {
		r := naming.NewResolver(n, prefix, nil)
		seen := map[string]bool{}
		for token := ""; ; {
			p, err := b.List(t.Context(), prefix, token)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.Add(p, p.Next == "") {
				if seen[e.Name] {
					t.Fatalf("%q: name %q twice", prefix, e.Name)
				}
				seen[e.Name] = true
				if e.Dir {
					out[e.Sub] = at + e.Name + "/"
					rec(e.Sub, at+e.Name+"/")
				} else {
					out[e.Obj.Key] = at + e.Name
				}
			}
			if token = p.Next; token == "" {
				return
			}
		}
	}
	rec("", "")
	return out
}

// TestNamingProperties: over generated key sets, at every page size, the
// listing names every image object and directory once, under distinct
// usable names of at most 255 bytes, the same names whatever the page
// size and as the rule applied to the whole set; and a lookup of each name
// without a listing (Stat path) finds the same object, while a lookup of
// every other name a key could have finds nothing.
func TestNamingProperties(t *testing.T) {
	n := naming.New([]string{"jpg", "jpeg", "png"})
	iters := 300
	if testing.Short() {
		iters = 50
	}
	r := rand.New(rand.NewPCG(1, 2))
	for it := range iters {
		keys := genKeys(r)
		want := refNames(n, keys)
		for _, size := range append(seq(1, len(keys)+1), 1000) {
			b := newFakeBucket(size)
			for _, k := range keys {
				b.put(k, []byte(k))
			}
			got := listTree(t, n, b)
			if fmt.Sprint(sortedMap(got)) != fmt.Sprint(sortedMap(want)) {
				t.Fatalf("set %d %q, page size %d:\n got %q\nwant %q", it, keys, size, sortedMap(got), sortedMap(want))
			}
		}
		paths := map[string]string{}
		for k, p := range want {
			if prev, dup := paths[p]; dup {
				t.Fatalf("set %d %q: %s and %s both named %s", it, keys, prev, k, p)
			}
			paths[p] = k
			if base := path.Base(p); len(base) > naming.NameMax || !naming.ValidName(base) {
				t.Fatalf("set %d: %s named %q (%d bytes)", it, k, base, len(base))
			}
		}
		for _, k := range keys {
			if _, img := n.Split(path.Base(k)); img && want[k] == "" {
				t.Fatalf("set %d %q: image %s has no name", it, keys, k)
			}
		}

		// Lookups without a listing: every name resolves to its object or
		// directory; every other name a key could have, to nothing.
		b := newFakeBucket(1)
		for _, k := range keys {
			b.put(k, []byte(k))
		}
		// The rule names directories whether or not they hold an image;
		// hiding those that do not is TestEmptyDirectoriesHidden's.
		f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: newFakeExtractor(), Cache: newFakeCache(), MetadataTTL: time.Hour}, Config: Config{RelistPages: 1, ShowEmptyDirs: true}})
		if err != nil {
			t.Fatal(err)
		}
		probes := map[string]bool{}
		for p := range paths {
			probes[strings.TrimSuffix(p, "/")] = true
		}
		for _, k := range keys {
			for _, p := range naming.FeaturePaths(k) {
				probes[p] = true
			}
			probes[k] = true
			probes[k+naming.NPYExt] = true
			probes[strings.TrimSuffix(k, path.Ext(k))+naming.NPYExt] = true
		}
		for p := range probes {
			dirPath, name := path.Split(p)
			prefix, ok := keyPrefix(want, dirPath)
			if !ok {
				continue // under a directory that does not exist
			}
			e, err := f.statLookup(t.Context(), prefix, name)
			wantKey, exists := paths[p]
			if !exists {
				wantKey, exists = paths[p+"/"]
			}
			switch {
			case !exists && err == nil:
				t.Fatalf("set %d %q: %s found (%+v), but no listing has it", it, keys, p, e)
			case !exists && !errors.Is(err, bucket.ErrNotFound):
				t.Fatalf("set %d: %s: %v, want not found", it, p, err)
			case exists && err != nil:
				t.Fatalf("set %d %q: %s (%s) not found without a listing: %v", it, keys, p, wantKey, err)
			case exists && e.Dir && e.Sub != wantKey:
				t.Fatalf("set %d: %s is directory %s without a listing, %s with one", it, p, e.Sub, wantKey)
			case exists && !e.Dir && e.Obj.Key != wantKey:
				t.Fatalf("set %d %q: %s is %s without a listing, %s with one", it, keys, p, e.Obj.Key, wantKey)
			}
		}
	}
}

// keyPrefix returns the bucket prefix shown at dirPath ("" or ending in
// "/"), from a naming of the tree.
func keyPrefix(names map[string]string, dirPath string) (string, bool) {
	if dirPath == "" {
		return "", true
	}
	for k, p := range names {
		if p == dirPath {
			return k, true
		}
	}
	return "", false
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
