package namespace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/fs/naming"
)

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
func listTree(t *testing.T, n naming.Rule, b *fakes.Bucket) map[string]string {
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
			b := fakes.NewBucket(size)
			for _, k := range keys {
				b.Put(k, []byte(k))
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
		b := fakes.NewBucket(1)
		for _, k := range keys {
			b.Put(k, []byte(k))
		}
		// The rule names directories whether or not they hold an image;
		// hiding those that do not is TestEmptyDirectoriesHidden's.
		ns := newNS(t, b, Config{RelistPages: 1, ShowEmptyDirs: true})
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
			e, err := ns.statLookup(t.Context(), prefix, name)
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

// sortedMap lists a map as sorted key=value lines.
func sortedMap(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
