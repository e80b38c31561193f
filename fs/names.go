package fs

import (
	"strings"

	"github.com/featurefs/featurefs/fs/bucket"
)

// npyExt is the extension of every feature file.
const npyExt = ".npy"

// naming applies the naming rule (package doc, Names) for a set of image
// extensions. Constant after construction.
type naming struct {
	exts   []string // lower case, no dot
	maxExt string   // the largest of exts: "S."+maxExt bounds every key of stem S
}

func newNaming(exts []string) naming {
	n := naming{}
	for _, e := range exts {
		e = strings.ToLower(strings.TrimPrefix(e, "."))
		if e == "" {
			continue
		}
		n.exts = append(n.exts, e)
		if e > n.maxExt {
			n.maxExt = e
		}
	}
	return n
}

// split reports whether base (a key's last component) ends in an image
// extension, and returns its stem (without the dot). A base that is only an
// extension (".jpg") is not an image.
func (n naming) split(base string) (stem string, ok bool) {
	i := strings.LastIndexByte(base, '.')
	if i <= 0 {
		return "", false
	}
	ext := strings.ToLower(base[i+1:])
	for _, e := range n.exts {
		if e == ext {
			return base[:i], true
		}
	}
	return "", false
}

// bound is the largest key any object of stem key S ("prefix/S") can have:
// every case variant of every extension sorts at or below it.
func (n naming) bound(stemKey string) string { return stemKey + "." + n.maxExt }

// candidates returns the keys an object of stem key S may have: S.ext for
// every extension in lower and upper case.
func (n naming) candidates(stemKey string) []string {
	var keys []string
	for _, e := range n.exts {
		keys = append(keys, stemKey+"."+e)
		if u := strings.ToUpper(e); u != e {
			keys = append(keys, stemKey+"."+u)
		}
	}
	return keys
}

// fileName is the name of an image object with base name base and stem,
// given how many image objects share the stem.
func fileName(base, stem string, groupSize int) string {
	if groupSize > 1 {
		return base + npyExt
	}
	return stem + npyExt
}

// dirEntry is one name in a feature directory.
type dirEntry struct {
	name string
	dir  bool
	obj  bucket.Object // files only
}

// pendingObj is an image object whose name waits for the rest of its stem.
type pendingObj struct {
	obj  bucket.Object
	base string
	stem string
}

// resolver turns listing pages of one prefix, in key order, into directory
// entries, holding back each image object until every key that could share
// its stem has been seen. Not safe for concurrent use.
type resolver struct {
	naming naming
	prefix string

	pending []pendingObj
	seen    map[string]int // stem -> image objects seen, for stems with pending members
	left    map[string]int // stem -> pending members
	lastKey string
}

func newResolver(n naming, prefix string) *resolver {
	return &resolver{naming: n, prefix: prefix, seen: map[string]int{}, left: map[string]int{}}
}

// add takes one page and returns the entries decided so far: the page's
// directories and every held-back object whose stem is complete. With
// complete set (the last page), everything left is decided.
func (r *resolver) add(p bucket.Page, complete bool) []dirEntry {
	var out []dirEntry
	for _, pre := range p.Prefixes {
		name := strings.TrimSuffix(strings.TrimPrefix(pre, r.prefix), "/")
		if validName(name) {
			out = append(out, dirEntry{name: name, dir: true})
		}
		r.lastKey = max(r.lastKey, pre)
	}
	for _, o := range p.Objects {
		r.lastKey = max(r.lastKey, o.Key)
		base, ok := strings.CutPrefix(o.Key, r.prefix)
		if !ok || !validName(base) {
			continue
		}
		stem, ok := r.naming.split(base)
		if !ok {
			continue
		}
		r.pending = append(r.pending, pendingObj{obj: o, base: base, stem: stem})
		r.seen[stem]++
		r.left[stem]++
	}
	for len(r.pending) > 0 {
		po := r.pending[0]
		if !complete && r.naming.bound(r.prefix+po.stem) > r.lastKey {
			break
		}
		r.pending = r.pending[1:]
		out = append(out, dirEntry{name: fileName(po.base, po.stem, r.seen[po.stem]), obj: po.obj})
		if r.left[po.stem]--; r.left[po.stem] == 0 {
			delete(r.left, po.stem)
			delete(r.seen, po.stem)
		}
	}
	return out
}

// validName reports whether a key component can be a file name.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}
