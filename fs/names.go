package fs

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// npyExt is the extension of every feature file.
const npyExt = ".npy"

// nameMax is the longest name a directory entry may have (NAME_MAX).
const nameMax = 255

// hashDigits is how many hex digits of SHA-256 a shortened name carries.
const hashDigits = 16

// naming applies the naming rule (package doc, Names) for a set of image
// extensions. Constant after construction.
type naming struct {
	exts []string // lower case (ASCII), no dot
	// maxTail is the largest "<ext>.npy/" (or "npy/"): every key that can
	// decide the names of stem S sorts at or below "S."+maxTail.
	maxTail string
}

func newNaming(exts []string) naming {
	n := naming{maxTail: "npy/"}
	for _, e := range exts {
		e = asciiLower(strings.TrimPrefix(e, "."))
		if e == "" || slices.Contains(n.exts, e) {
			continue
		}
		n.exts = append(n.exts, e)
		n.maxTail = max(n.maxTail, e+npyExt+"/")
	}
	return n
}

// split reports whether base (a key's last component) ends in an image
// extension (in any ASCII case), and returns its stem (without the dot,
// possibly empty: ".jpg" is an image of stem "").
func (n naming) split(base string) (stem string, ok bool) {
	stem, _, ok = n.parts(base)
	return stem, ok
}

// parts is split that also returns the extension (without the dot).
func (n naming) parts(base string) (stem, ext string, ok bool) {
	if len(n.exts) == 0 { // spec's nil means its defaults; here, no image
		return "", "", false
	}
	return spec.SplitImage(base, n.exts)
}

// variants returns the keys of stem key S ("prefix/S") that can share its
// short name: S.ext for every extension, in lower and in upper case.
func (n naming) variants(stemKey string) []string {
	var keys []string
	for _, e := range n.exts {
		keys = append(keys, stemKey+"."+e)
		if u := asciiUpper(e); u != e {
			keys = append(keys, stemKey+"."+u)
		}
	}
	return keys
}

// plainCase reports whether an extension is all lower or all upper case:
// only such images can have a short name (a.Png is always a.Png.npy), so
// that the keys that can share a short name are few enough to Stat.
func plainCase(ext string) bool { return ext == asciiLower(ext) || ext == asciiUpper(ext) }

func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

func asciiUpper(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, s)
}

// hashLike reports whether a name has the form of a shortened name:
// "~" and 16 lower-case hex digits at the end, or just before ".npy".
// Only shortened names have it: a directory or file whose own name has it
// is shortened too, so shortened names collide with nothing.
func hashLike(name string) bool {
	s := strings.TrimSuffix(name, npyExt)
	if len(s) < hashDigits+1 || s[len(s)-hashDigits-1] != '~' {
		return false
	}
	for _, c := range []byte(s[len(s)-hashDigits:]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// usable reports whether a name can be shown as it is: a valid file name of
// at most NAME_MAX bytes that is not of the shortened form.
func usable(name string) bool {
	return validName(name) && len(name) <= nameMax && !hashLike(name)
}

// shortened is the name of a key component that cannot be shown as it is:
// the component cut to fit NAME_MAX at a UTF-8 boundary, "~", the first 16
// hex digits of the SHA-256 of the whole component, and suffix (".npy" for
// files, "" for directories).
func shortened(component, suffix string) string {
	sum := sha256.Sum256([]byte(component))
	t := component
	if n := nameMax - 1 - hashDigits - len(suffix); len(t) > n {
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n]
	}
	return t + "~" + hex.EncodeToString(sum[:])[:hashDigits] + suffix
}

// dirName is the name of the directory for prefix component d (a
// validName).
func dirName(d string) string {
	if usable(d) {
		return d
	}
	return shortened(d, "")
}

// dirEntry is one name in a feature directory.
type dirEntry struct {
	name string
	dir  bool
	sub  string        // directories only: the prefix it shows ("a/b/")
	obj  bucket.Object // files only
}

// member is one image object waiting for its name.
type member struct {
	obj        bucket.Object
	base, stem string
	dirLong    bool // a directory is called base+".npy"
}

// group is the image objects of one stem (plain-case extensions), or one
// image whose extension mixes cases (lone), with what decides their names.
type group struct {
	hi       string // the names are decided once the listing reached hi
	members  []*member
	lone     bool
	imgBase  bool // an image object's base name is the stem
	dirShort bool // a directory is called stem+".npy"
}

// renameNote is told of each name that differs from the plain rule, with
// the reason (see resolver.note).
type renameNote func(key, name, why string)

// resolver turns listing pages of one prefix, in key order, into directory
// entries, holding back each image object until every key that can decide
// its name has been seen. What it holds is bounded by the key length: only
// objects whose stem (with its dot) is a prefix of the last key seen wait,
// and it remembers only image keys and "X.npy" directories that are
// prefixes of it. Not safe for concurrent use.
type resolver struct {
	naming naming
	prefix string
	note   renameNote // may be nil

	lastKey string
	groups  map[string]*group // prefix+stem -> group
	lones   map[string]*group // key -> group of a mixed-case image
	imgs    []string          // image keys, each a prefix of the next
	npyDirs []string          // prefix+X+"." of directories called X.npy, each a prefix of the next
}

func newResolver(n naming, prefix string, note renameNote) *resolver {
	return &resolver{naming: n, prefix: prefix, note: note, groups: map[string]*group{}, lones: map[string]*group{}}
}

// pending returns how many groups wait for their names.
func (r *resolver) pending() int { return len(r.groups) + len(r.lones) }

// add takes one page and returns the entries decided so far: the page's
// directories and every held-back object whose names are decided. With
// complete set (the last page), everything left is decided.
func (r *resolver) add(p bucket.Page, complete bool) []dirEntry {
	var out []dirEntry
	i, j := 0, 0
	for i < len(p.Prefixes) || j < len(p.Objects) {
		if j == len(p.Objects) || (i < len(p.Prefixes) && p.Prefixes[i] < p.Objects[j].Key) {
			if e, ok := r.addDir(p.Prefixes[i]); ok {
				out = append(out, e)
			}
			i++
		} else {
			r.addObject(p.Objects[j])
			j++
		}
	}
	return append(out, r.decide(complete)...)
}

// see records that the listing has reached key.
func (r *resolver) see(key string) {
	r.lastKey = max(r.lastKey, key)
	for len(r.imgs) > 0 && !strings.HasPrefix(key, r.imgs[len(r.imgs)-1]) {
		r.imgs = r.imgs[:len(r.imgs)-1]
	}
	for len(r.npyDirs) > 0 && !strings.HasPrefix(key, r.npyDirs[len(r.npyDirs)-1]) {
		r.npyDirs = r.npyDirs[:len(r.npyDirs)-1]
	}
}

func (r *resolver) addDir(pre string) (dirEntry, bool) {
	r.see(pre)
	d, ok := strings.CutPrefix(pre, r.prefix)
	d, ok2 := strings.CutSuffix(d, "/")
	if !ok || !ok2 || !validName(d) {
		return dirEntry{}, false // "", "." and "..": hidden, never followed
	}
	name := dirName(d)
	if name != d && r.note != nil {
		r.note(pre, name, "the directory's name is over 255 bytes or of the shortened form")
	}
	if y, ok := strings.CutSuffix(d, npyExt); ok && name == d {
		r.npyDirs = append(r.npyDirs, r.prefix+y+".")
		if g := r.groups[r.prefix+y]; g != nil {
			g.dirShort = true
		}
		if stem, ext, ok := r.naming.parts(y); ok {
			g := r.lones[r.prefix+y]
			if plainCase(ext) {
				g = r.groups[r.prefix+stem]
			}
			if g != nil {
				for _, m := range g.members {
					if m.base == y {
						m.dirLong = true
					}
				}
			}
		}
	}
	return dirEntry{name: name, dir: true, sub: pre}, true
}

func (r *resolver) addObject(o bucket.Object) {
	r.see(o.Key)
	base, ok := strings.CutPrefix(o.Key, r.prefix)
	if !ok || !validName(base) {
		return
	}
	stem, ext, ok := r.naming.parts(base)
	if !ok {
		return
	}
	m := &member{obj: o, base: base, stem: stem}
	r.imgs = append(r.imgs, o.Key)
	if !plainCase(ext) {
		r.lones[o.Key] = &group{hi: o.Key + npyExt + "/", members: []*member{m}, lone: true}
		return
	}
	sk := r.prefix + stem
	g := r.groups[sk]
	if g == nil {
		g = &group{hi: sk + "." + r.naming.maxTail}
		g.imgBase = slices.Contains(r.imgs, sk)
		g.dirShort = slices.Contains(r.npyDirs, sk+".")
		r.groups[sk] = g
	}
	g.members = append(g.members, m)
}

// decide names the members of every group the listing has gone past (all
// of them when complete), in key order.
func (r *resolver) decide(complete bool) []dirEntry {
	var done []*group
	for _, m := range []map[string]*group{r.groups, r.lones} {
		for k, g := range m {
			if complete || r.lastKey >= g.hi {
				done = append(done, g)
				delete(m, k)
			}
		}
	}
	slices.SortFunc(done, func(a, b *group) int { return cmp.Compare(a.members[0].obj.Key, b.members[0].obj.Key) })
	var out []dirEntry
	for _, g := range done {
		for _, m := range g.members {
			name, why := g.name(m)
			if why != "" && r.note != nil {
				r.note(m.obj.Key, name, why)
			}
			out = append(out, dirEntry{name: name, obj: m.obj})
		}
	}
	return out
}

// name applies the rule to one member of a complete group; why says, for a
// name other than the plain one (the extension replaced by .npy, or kept
// when images share the stem or the extension mixes cases), why.
func (g *group) name(m *member) (name, why string) {
	if !g.lone && len(g.members) == 1 {
		short := m.stem + npyExt
		switch {
		case m.stem == "":
			why = "the name without the extension is empty"
		case g.imgBase:
			why = short + " is the feature file of image object " + m.stem
		case g.dirShort:
			why = "a directory is called " + short
		case !usable(short):
			why = short + " is over 255 bytes or of the shortened form"
		default:
			return short, ""
		}
	}
	long := m.base + npyExt
	switch {
	case m.dirLong:
		why = "a directory is called " + long
	case !usable(long):
		why = long + " is over 255 bytes or of the shortened form"
	default:
		return long, why
	}
	return shortened(m.base, npyExt), why
}

// validName reports whether a key component can be a file name
// (features.ValidName: walks use the same rule).
func validName(name string) bool { return features.ValidName(name) }

// probe is what a lookup by name must learn from the bucket to decide it
// without a listing: which keys exist (Stat) and which prefixes hold
// anything (List).
type probe struct {
	keys []string
	dirs []string
}

// probeFor returns what decides name under prefix. ok is false for a
// shortened name, which cannot be reversed: only a listing can find it.
func (n naming) probeFor(prefix, name string) (p probe, ok bool) {
	if hashLike(name) {
		return probe{}, false
	}
	p.dirs = append(p.dirs, prefix+name+"/")
	x, isFile := strings.CutSuffix(name, npyExt)
	if !isFile {
		return p, true
	}
	// The short name of an image X.<ext>: the group of stem X, and whether
	// X is an image key (the directory X.npy is name's own).
	if x != "" {
		p.keys = append(p.keys, n.variants(prefix+x)...)
	}
	// The long name of image X = S.<ext>: X itself, and what decides
	// whether it has the short name: the group of stem S, the image key S
	// and the directory S.npy.
	if s, ext, img := n.parts(x); img {
		p.keys = append(p.keys, prefix+x)
		if plainCase(ext) {
			p.keys = append(p.keys, n.variants(prefix+s)...)
			if _, img := n.split(s); img && s != "" {
				p.keys = append(p.keys, prefix+s)
			}
			p.dirs = append(p.dirs, prefix+s+npyExt+"/")
		}
	}
	return p, true
}

// resolve runs the rule over what a probe found (objects and prefixes
// holding anything) and returns the entry called name, if any. It gives
// the same entry as a listing: everything that decides name is in the
// probe, and nothing else can take name.
func (n naming) resolve(prefix, name string, objs []bucket.Object, dirs []string, note renameNote) (dirEntry, bool) {
	slices.SortFunc(objs, func(a, b bucket.Object) int { return cmp.Compare(a.Key, b.Key) })
	objs = slices.CompactFunc(objs, func(a, b bucket.Object) bool { return a.Key == b.Key })
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	r := newResolver(n, prefix, func(key, got, why string) {
		if got == name && note != nil {
			note(key, got, why)
		}
	})
	for _, e := range r.add(bucket.Page{Prefixes: dirs, Objects: objs}, true) {
		if e.name == name {
			return e, true
		}
	}
	return dirEntry{}, false
}

// FeaturePaths returns the paths, relative to a layer directory, that the
// feature file of image object key can have under the naming rule (package
// doc, Names), the most specific first: the long name (the key with .npy
// appended), the short name (its extension replaced by .npy) and the
// shortened name, each where usable. Which one it has depends on the other
// keys; directories are named by their own name alone. A key with an
// empty, "." or ".." component has none: it is not shown.
func FeaturePaths(key string) []string {
	i := strings.LastIndexByte(key, '/')
	dir, base := "", key
	if i >= 0 {
		for c := range strings.SplitSeq(key[:i], "/") {
			if !validName(c) {
				return nil
			}
			dir += dirName(c) + "/"
		}
		base = key[i+1:]
	}
	if !validName(base) {
		return nil
	}
	var out []string
	if long := base + npyExt; usable(long) {
		out = append(out, dir+long)
	}
	if j := strings.LastIndexByte(base, '.'); j > 0 && usable(base[:j]+npyExt) {
		out = append(out, dir+base[:j]+npyExt)
	}
	return append(out, dir+shortened(base, npyExt))
}
