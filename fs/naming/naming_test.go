package naming

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
)

// pages returns the listing of prefix "" over keys ("/"-delimited, sorted
// by key as a bucket lists), cut into pages of size entries.
func pages(keys []string, size int) []bucket.Page { return pagesWith(keys, size, nil) }

// archivePrefix reports whether a test listing shows prefix as an
// archive's directory (bucket.Page.Archives): a name ending in .tar/ or
// .zip/ (any case), unless real holds it (a real prefix of that name).
func archivePrefix(prefix string, real map[string]bool) bool {
	l := strings.ToLower(prefix)
	return !real[prefix] && (strings.HasSuffix(l, ".tar/") || strings.HasSuffix(l, ".zip/"))
}

// pagesWith is pages, the prefixes in real being real prefixes, not
// archives, whatever their names.
func pagesWith(keys []string, size int, real map[string]bool) []bucket.Page {
	type entry struct {
		key string
		dir bool
	}
	var es []entry
	seen := map[string]bool{}
	for _, k := range keys {
		e := entry{key: k}
		if i := strings.IndexByte(k, '/'); i >= 0 {
			e = entry{key: k[:i+1], dir: true}
		}
		if !seen[e.key] {
			seen[e.key] = true
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	var out []bucket.Page
	for len(es) > 0 {
		n := min(size, len(es))
		var p bucket.Page
		for _, e := range es[:n] {
			if e.dir {
				p.Prefixes = append(p.Prefixes, e.key)
				if archivePrefix(e.key, real) {
					p.Archives = append(p.Archives, e.key)
				}
			} else {
				p.Objects = append(p.Objects, bucket.Object{Key: e.key})
			}
		}
		out = append(out, p)
		es = es[n:]
	}
	return append(out, bucket.Page{}) // the last page may be empty
}

// list runs a Resolver over the listing of keys in pages of size: object
// key -> name, and directory prefix -> name.
func list(t *testing.T, n Rule, keys []string, size int) map[string]string {
	t.Helper()
	return listWith(t, n, keys, size, nil)
}

// listWith is list, the prefixes in real being real prefixes (pagesWith).
func listWith(t *testing.T, n Rule, keys []string, size int, real map[string]bool) map[string]string {
	t.Helper()
	r := NewResolver(n, "", nil)
	got := map[string]string{}
	ps := pagesWith(keys, size, real)
	for i, p := range ps {
		for _, e := range r.Add(p, i == len(ps)-1) {
			k := e.Obj.Key
			if e.Dir {
				k = e.Sub
			}
			if prev, dup := got[k]; dup {
				t.Fatalf("%s named twice (%s, %s)", k, prev, e.Name)
			}
			got[k] = e.Name
		}
	}
	if r.Pending() != 0 {
		t.Fatalf("%d groups still wait after the last page", r.Pending())
	}
	return got
}

var (
	long250 = strings.Repeat("L", 250)      // long250.npy fits, long250.jpg.npy does not
	uni     = strings.Repeat("é", 130)      // 260 bytes: shortened, cut at a rune boundary
	exts    = spec.DefaultImageExtensions() // jpg, jpeg, png
)

// ruleCases are key sets with the names the tree gives them (want: object
// key or directory prefix -> name; keys not in want are not shown) and,
// where the feature store's name differs (Rule.StoreName decides from the
// stem's siblings alone), the store's (store).
var ruleCases = []struct {
	what  string
	keys  []string
	want  map[string]string
	store map[string]string
}{
	// The feature store's old Name cases (fs/featurestore TestName).
	{"alone", []string{"a.jpg"}, map[string]string{"a.jpg": "a.npy"}, nil},
	{"two extensions", []string{"a.jpg", "a.png"}, map[string]string{"a.jpg": "a.jpg.npy", "a.png": "a.png.npy"}, nil},
	{"case differences", []string{"a.JPG", "a.jpg"}, map[string]string{"a.JPG": "a.JPG.npy", "a.jpg": "a.jpg.npy"}, nil},
	{"longer stem and a non-image", []string{"a.b.jpg", "a.jpg", "a.txt"}, map[string]string{"a.b.jpg": "a.b.npy", "a.jpg": "a.npy"}, nil},
	{"a directory named like the image", []string{"a.jpg", "a.jpg/x.png"}, map[string]string{"a.jpg": "a.npy", "a.jpg/": "a.jpg"}, nil},
	{"mixed case", []string{"a.Png"}, map[string]string{"a.Png": "a.Png.npy"}, nil},
	{"upper case", []string{"a.JPEG"}, map[string]string{"a.JPEG": "a.npy"}, nil},
	// The tree's tricky keys (fs TestNamingRuleIndependentOfPageSize).
	{"tricky keys", []string{
		"a.jpg", "a.png", "a.jpg.x", "a.b.jpg", "a.jpeg.png", "a.k", "b.jpg", "c.JPG", "c.png", "d.txt", "d.jpeg",
		"e.JPEG", "f.npy", "g", ".jpg", "i.Jpg", "h.jpg.jpg", "sub/x.jpg",
	}, map[string]string{
		"a.jpg": "a.jpg.npy", "a.png": "a.png.npy", "a.b.jpg": "a.b.npy", "a.jpeg.png": "a.jpeg.npy",
		"b.jpg": "b.npy", "c.JPG": "c.JPG.npy", "c.png": "c.png.npy", "d.jpeg": "d.npy", "e.JPEG": "e.npy",
		"h.jpg.jpg": "h.jpg.npy", ".jpg": ".jpg.npy", "i.Jpg": "i.Jpg.npy", "sub/": "sub",
	}, map[string]string{".jpg": ".npy"}},
	// Multiple dots: only the last extension counts.
	{"multiple dots", []string{"x.tar.gz.png", "v1.2.jpg", "v1.2.png", "w..jpg"}, map[string]string{
		"x.tar.gz.png": "x.tar.gz.npy", "v1.2.jpg": "v1.2.jpg.npy", "v1.2.png": "v1.2.png.npy", "w..jpg": "w..npy",
	}, nil},
	// No extension, or an extension that is not an image's: not shown.
	{"no extension", []string{"README", "jpg", "npy", "m.", "q.jpgx"}, map[string]string{}, nil},
	{"non-image members", []string{"m.jpg", "m.txt", "m.json", "m.npy"}, map[string]string{"m.jpg": "m.npy"}, nil},
	{"empty stem", []string{".png"}, map[string]string{".png": ".png.npy"}, map[string]string{".png": ".npy"}},
	// Unicode: extensions are matched in ASCII case only.
	{"unicode stem", []string{"café.jpg", "ü.JPG"}, map[string]string{"café.jpg": "café.npy", "ü.JPG": "ü.npy"}, nil},
	{"unicode clash", []string{"café.jpg", "café.PNG"}, map[string]string{"café.jpg": "café.jpg.npy", "café.PNG": "café.PNG.npy"}, nil},
	{"unicode extension", []string{"a.jpǵ", "b.ＪＰＧ", "c.pnġ"}, map[string]string{}, nil},
	{"unicode too long", []string{uni + ".jpg"}, map[string]string{uni + ".jpg": Shortened(uni+".jpg", NPYExt)}, map[string]string{uni + ".jpg": uni + ".npy"}},
	// A mixed-case image is alone: it neither takes nor blocks the short name.
	{"mixed case beside plain", []string{"k.Jpg", "k.png"}, map[string]string{"k.Jpg": "k.Jpg.npy", "k.png": "k.npy"},
		map[string]string{"k.png": "k.png.npy"}},
	// An image key that is another image's stem keeps that short name.
	{"image key as stem", []string{"h.jpg", "h.jpg.jpg"}, map[string]string{"h.jpg": "h.npy", "h.jpg.jpg": "h.jpg.jpg.npy"},
		map[string]string{"h.jpg.jpg": "h.jpg.npy"}},
	// Directories take names first.
	{"directory S.npy", []string{"n.jpg", "n.npy/z.jpg"}, map[string]string{"n.jpg": "n.jpg.npy", "n.npy/": "n.npy"},
		map[string]string{"n.jpg": "n.npy"}},
	{"directory B.npy", []string{"o.jpg", "o.png", "o.jpg.npy/q.jpg"}, map[string]string{
		"o.jpg": Shortened("o.jpg", NPYExt), "o.png": "o.png.npy", "o.jpg.npy/": "o.jpg.npy",
	}, map[string]string{"o.jpg": "o.jpg.npy"}},
	// NAME_MAX and the shortened form.
	{"short fits", []string{long250 + ".jpg"}, map[string]string{long250 + ".jpg": long250 + ".npy"}, nil},
	{"long does not fit", []string{long250 + ".jpg", long250 + ".png"}, map[string]string{
		long250 + ".jpg": Shortened(long250+".jpg", NPYExt), long250 + ".png": Shortened(long250+".png", NPYExt),
	}, map[string]string{long250 + ".jpg": long250 + ".jpg.npy", long250 + ".png": long250 + ".png.npy"}},
	{"hash-like", []string{"q~0123456789abcdef.jpg"}, map[string]string{"q~0123456789abcdef.jpg": "q~0123456789abcdef.jpg.npy"},
		map[string]string{"q~0123456789abcdef.jpg": "q~0123456789abcdef.npy"}},
	{"hash-like directory", []string{"d~0123456789abcdef/x.jpg"}, map[string]string{"d~0123456789abcdef/": Shortened("d~0123456789abcdef", "")}, nil},
}

// TestRuleTable runs the tree's rule (Resolver) over each key set with every
// page size: the names are the table's, and never depend on the paging.
func TestRuleTable(t *testing.T) {
	n := New(exts)
	for _, c := range ruleCases {
		for size := 1; size <= len(c.keys)+1; size++ {
			got := list(t, n, c.keys, size)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("%s, pages of %d:\n got %v\nwant %v", c.what, size, got, c.want)
			}
			for k, name := range got {
				if len(name) > NameMax || !utf8.ValidString(name) || !ValidName(name) {
					t.Errorf("%s: %q named %q: not a usable file name", c.what, k, name)
				}
			}
		}
	}
}

// TestStoreNameAgreesWithTree names every image key of each key set as the
// feature store does (its siblings are the keys under stem+".", as the
// pipeline lists them) and compares with the tree's name: they are the
// same but where the table says the store's differs. A change to either
// rule that makes them part shows here.
func TestStoreNameAgreesWithTree(t *testing.T) {
	n := New(exts)
	for _, c := range ruleCases {
		for _, k := range c.keys {
			if strings.Contains(k, "/") {
				continue
			}
			stem, ok := n.Split(k)
			if !ok {
				if got := n.StoreName(k, c.keys); got != k+NPYExt {
					t.Errorf("%s: StoreName(%q) = %q for a non-image, want %q", c.what, k, got, k+NPYExt)
				}
				continue
			}
			var siblings []string
			for _, s := range c.keys {
				if strings.HasPrefix(s, stem+".") {
					siblings = append(siblings, s)
				}
			}
			want, differs := c.store[k]
			if !differs {
				want = c.want[k]
			}
			if got := n.StoreName(k, siblings); got != want {
				t.Errorf("%s: StoreName(%q, %q) = %q, want %q (the tree's is %q)", c.what, k, siblings, got, want, c.want[k])
			}
			if differs && want == c.want[k] {
				t.Errorf("%s: %q: the table says the store differs, but both say %q", c.what, k, want)
			}
		}
	}
}

// TestStoreName is the feature store's Name test (fs/featurestore), as it
// was: keys in directories, and siblings as given.
func TestStoreName(t *testing.T) {
	n := New(spec.DefaultImageExtensions())
	cases := []struct {
		key      string
		siblings []string
		want     string
	}{
		{"train/cat/a.jpg", []string{"train/cat/a.jpg"}, "train/cat/a.npy"},
		{"train/cat/a.jpg", []string{"train/cat/a.jpg", "train/cat/a.png"}, "train/cat/a.jpg.npy"},
		{"train/cat/a.jpg", []string{"train/cat/a.JPG", "train/cat/a.jpg"}, "train/cat/a.jpg.npy"},
		{"train/cat/a.jpg", []string{"train/cat/a.b.jpg", "train/cat/a.jpg", "train/cat/a.txt"}, "train/cat/a.npy"},
		{"train/cat/a.jpg", []string{"train/cat/a.jpg/x.png"}, "train/cat/a.npy"},
		{"a.Png", nil, "a.Png.npy"},
		{"a.JPEG", nil, "a.npy"},
	}
	for _, c := range cases {
		if got := n.StoreName(c.key, c.siblings); got != c.want {
			t.Errorf("Name(%q, %q) = %q, want %q", c.key, c.siblings, got, c.want)
		}
	}
	// With no image extensions nothing is an image: every name is long.
	if got := New(nil).StoreName("a.jpg", nil); got != "a.jpg.npy" {
		t.Errorf("no extensions: StoreName(a.jpg) = %q, want a.jpg.npy", got)
	}
}

func TestResolverHoldsBackAcrossPages(t *testing.T) {
	r := NewResolver(New([]string{"jpg", "png"}), "p/", nil)
	es := r.Add(bucket.Page{Objects: []bucket.Object{{Key: "p/a.jpg"}}}, false)
	if len(es) != 0 {
		t.Fatalf("a.jpg decided before a.png could be seen: %+v", es)
	}
	es = r.Add(bucket.Page{Objects: []bucket.Object{{Key: "p/a.png"}, {Key: "p/b.jpg"}}}, false)
	if len(es) != 2 || es[0].Name != "a.jpg.npy" || es[1].Name != "a.png.npy" {
		t.Fatalf("got %+v", es)
	}
	es = r.Add(bucket.Page{}, true)
	if len(es) != 1 || es[0].Name != "b.npy" {
		t.Fatalf("last page: %+v", es)
	}
}

// TestResolverMemoryIsBounded: 10,000 keys between two members of one
// stem (a.jpg ... a.png) do not pile up in the resolver: only objects
// whose stem is a prefix of the last key wait.
func TestResolverMemoryIsBounded(t *testing.T) {
	keys := []string{"a.jpg", "a.png"}
	for i := range 10000 {
		keys = append(keys, fmt.Sprintf("a.jpg-%05d.jpg", i))
	}
	r := NewResolver(New([]string{"jpg", "jpeg", "png"}), "", nil)
	names := map[string]string{}
	most := 0
	ps := pages(keys, 97)
	for i, p := range ps {
		for _, e := range r.Add(p, i == len(ps)-1) {
			names[e.Obj.Key] = e.Name
		}
		most = max(most, r.Pending(), len(r.imgs))
	}
	if len(names) != 10002 || names["a.jpg"] != "a.jpg.npy" || names["a.jpg-00042.jpg"] != "a.jpg-00042.npy" {
		t.Errorf("%d names; a.jpg %q, a.jpg-00042.jpg %q", len(names), names["a.jpg"], names["a.jpg-00042.jpg"])
	}
	if most > 4 {
		t.Errorf("the resolver held %d groups or keys at once, want a handful", most)
	}
}
