package naming

import (
	"cmp"
	"slices"
	"strings"

	"github.com/featurefs/featurefs/fs/bucket"
)

// Entry is one name in a feature directory.
type Entry struct {
	Name string
	Dir  bool
	Sub  string        // directories only: the prefix it shows ("a/b/")
	Obj  bucket.Object // files only
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

// Note is told of each name that differs from the plain rule, with the
// reason (NewResolver).
type Note func(key, name, why string)

// Resolver turns listing pages of one prefix, in key order, into directory
// entries, holding back each image object until every key that can decide
// its name has been seen. What it holds is bounded by the key length: only
// objects whose stem (with its dot) is a prefix of the last key seen wait,
// and it remembers only image keys and "X.npy" directories that are
// prefixes of it. Not safe for concurrent use.
type Resolver struct {
	naming Rule
	prefix string
	note   Note // may be nil

	lastKey string
	groups  map[string]*group     // prefix+stem -> group
	lones   map[string]*group     // key -> group of a mixed-case image
	imgs    []string              // image keys, each a prefix of the next
	npyDirs []string              // prefix+X+"." of directories called X.npy, each a prefix of the next
	archs   map[string]*archGroup // prefix+NAME -> the archives NAME.<ext>/ waiting for their names
}

// archGroup is the archive prefixes of one NAME, held until the listing
// has gone past NAME/ (which sorts after them).
type archGroup struct {
	hi    string   // prefix+NAME+"/"
	subs  []string // the archives' prefixes
	comps []string // their components (NAME.<ext>)
	clash bool     // a prefix NAME/ exists
}

// NewResolver returns a resolver for the listing of prefix under rule n;
// note, if not nil, is told of every name other than the plain one.
func NewResolver(n Rule, prefix string, note Note) *Resolver {
	return &Resolver{naming: n, prefix: prefix, note: note, groups: map[string]*group{}, lones: map[string]*group{}, archs: map[string]*archGroup{}}
}

// Pending returns how many groups wait for their names.
func (r *Resolver) Pending() int { return len(r.groups) + len(r.lones) + len(r.archs) }

// Add takes one page and returns the entries decided so far: the page's
// directories and every held-back object whose names are decided. With
// complete set (the last page), everything left is decided.
func (r *Resolver) Add(p bucket.Page, complete bool) []Entry {
	var out []Entry
	i, j := 0, 0
	for i < len(p.Prefixes) || j < len(p.Objects) {
		if j == len(p.Objects) || (i < len(p.Prefixes) && p.Prefixes[i] < p.Objects[j].Key) {
			if e, ok := r.addDir(p.Prefixes[i], slices.Contains(p.Archives, p.Prefixes[i])); ok {
				out = append(out, e)
			}
			i++
		} else {
			if e, ok := r.addObject(p.Objects[j]); ok {
				out = append(out, e)
			}
			j++
		}
	}
	return append(out, r.decide(complete)...)
}

// see records that the listing has reached key.
func (r *Resolver) see(key string) {
	r.lastKey = max(r.lastKey, key)
	for len(r.imgs) > 0 && !strings.HasPrefix(key, r.imgs[len(r.imgs)-1]) {
		r.imgs = r.imgs[:len(r.imgs)-1]
	}
	for len(r.npyDirs) > 0 && !strings.HasPrefix(key, r.npyDirs[len(r.npyDirs)-1]) {
		r.npyDirs = r.npyDirs[:len(r.npyDirs)-1]
	}
}

// addDir takes the prefix pre; archive: it is an archive's
// (bucket.Page.Archives), which alone can be shown without its extension.
func (r *Resolver) addDir(pre string, archive bool) (Entry, bool) {
	r.see(pre)
	d, ok := strings.CutPrefix(pre, r.prefix)
	d, ok2 := strings.CutSuffix(d, "/")
	if !ok || !ok2 || !ValidName(d) {
		return Entry{}, false // "", "." and "..": hidden, never followed
	}
	if g := r.archs[r.prefix+d]; g != nil {
		g.clash = true // NAME/ beside NAME.tar/: each keeps its own name
	}
	if stem, ok := r.naming.archiveStem(d); ok && archive {
		g := r.archs[r.prefix+stem]
		if g == nil {
			g = &archGroup{hi: r.prefix + stem + "/"}
			r.archs[r.prefix+stem] = g
		}
		g.subs = append(g.subs, pre)
		g.comps = append(g.comps, d)
		return Entry{}, false // named by decide
	}
	name := DirName(d)
	if name != d && r.note != nil {
		r.note(pre, name, "the directory's name is over 255 bytes or of the shortened form")
	}
	if y, ok := strings.CutSuffix(d, NPYExt); ok && name == d {
		r.npyDirs = append(r.npyDirs, r.prefix+y+".")
		if g := r.groups[r.prefix+y]; g != nil {
			g.dirShort = true
		}
		if stem, ext, ok := r.naming.Parts(y); ok {
			g := r.lones[r.prefix+y]
			if PlainCase(ext) {
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
	return Entry{Name: name, Dir: true, Sub: pre}, true
}

// addObject takes one object; a plain object (bucket.Object.Plain) is
// an entry of its own name at once, an image waits in its group.
func (r *Resolver) addObject(o bucket.Object) (Entry, bool) {
	r.see(o.Key)
	base, ok := strings.CutPrefix(o.Key, r.prefix)
	if !ok || !ValidName(base) {
		return Entry{}, false
	}
	stem, ext, ok := r.naming.Parts(base)
	if !ok {
		// A plain file keeps its name; one that ends in .npy or is of the
		// shortened form could take a feature's: not shown.
		if o.Plain && Usable(base) && !strings.HasSuffix(asciiLower(base), NPYExt) {
			return Entry{Name: base, Obj: o}, true
		}
		return Entry{}, false
	}
	m := &member{obj: o, base: base, stem: stem}
	r.imgs = append(r.imgs, o.Key)
	if !PlainCase(ext) {
		r.lones[o.Key] = &group{hi: o.Key + NPYExt + "/", members: []*member{m}, lone: true}
		return Entry{}, false
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
	return Entry{}, false
}

// decide names the members of every group the listing has gone past (all
// of them when complete), in key order.
func (r *Resolver) decide(complete bool) []Entry {
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
	var out []Entry
	out = append(out, r.decideArchives(complete)...)
	for _, g := range done {
		for _, m := range g.members {
			name, why := g.name(m)
			if why != "" && r.note != nil {
				r.note(m.obj.Key, name, why)
			}
			out = append(out, Entry{Name: name, Obj: m.obj})
		}
	}
	return out
}

// decideArchives names the archives whose NAME/ the listing has gone past
// (all when complete): NAME alone, else each its own component.
func (r *Resolver) decideArchives(complete bool) []Entry {
	var out []Entry
	for k, g := range r.archs {
		if !complete && r.lastKey < g.hi {
			continue
		}
		delete(r.archs, k)
		for i, sub := range g.subs {
			name := DirName(strings.TrimSuffix(g.hi[len(r.prefix):], "/"))
			if g.clash || len(g.subs) > 1 {
				name = DirName(g.comps[i])
				if r.note != nil {
					r.note(sub, name, "a directory or another archive has the name without the extension")
				}
			}
			out = append(out, Entry{Name: name, Dir: true, Sub: sub})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Sub, b.Sub) })
	return out
}

// name applies the rule to one member of a complete group; why says, for a
// name other than the plain one (the extension replaced by .npy, or kept
// when images share the stem or the extension mixes cases), why.
func (g *group) name(m *member) (name, why string) {
	if !g.lone && len(g.members) == 1 {
		short := m.stem + NPYExt
		switch {
		case m.stem == "":
			why = "the name without the extension is empty"
		case g.imgBase:
			why = short + " is the feature file of image object " + m.stem
		case g.dirShort:
			why = "a directory is called " + short
		case !Usable(short):
			why = short + " is over 255 bytes or of the shortened form"
		default:
			return short, ""
		}
	}
	long := m.base + NPYExt
	switch {
	case m.dirLong:
		why = "a directory is called " + long
	case !Usable(long):
		why = long + " is over 255 bytes or of the shortened form"
	default:
		return long, why
	}
	return Shortened(m.base, NPYExt), why
}

// Probe is what a lookup by name must learn from the bucket to decide it
// without a listing: which keys exist (Stat) and which prefixes hold
// anything (List; the listing of an archive's directory says it is one:
// bucket.Page.Archives).
type Probe struct {
	Keys []string
	Dirs []string
}

// Probe returns what decides name under prefix. ok is false for a
// shortened name, which cannot be reversed: only a listing can find it.
func (n Rule) Probe(prefix, name string) (p Probe, ok bool) {
	if hashLike(name) {
		return Probe{}, false
	}
	p.Dirs = append(p.Dirs, prefix+name+"/")
	x, isFile := strings.CutSuffix(name, NPYExt)
	if !isFile {
		if len(n.archives) > 0 {
			// An archive shown as name, the archives and the directory that
			// decide whether name.<ext> keeps its extension, and a plain
			// file called name.
			stem := name
			if s, ok := n.archiveStem(name); ok {
				stem = s
				p.Dirs = append(p.Dirs, prefix+s+"/")
			}
			for _, e := range n.archives {
				p.Dirs = append(p.Dirs, prefix+stem+"."+e+"/")
			}
			if n.inArchive(prefix) {
				p.Keys = append(p.Keys, prefix+name) // plain files are archive members
			}
		}
		return p, true
	}
	// The short name of an image X.<ext>: the group of stem X, and whether
	// X is an image key (the directory X.npy is name's own).
	if x != "" {
		p.Keys = append(p.Keys, n.variants(prefix+x)...)
	}
	// The long name of image X = S.<ext>: X itself, and what decides
	// whether it has the short name: the group of stem S, the image key S
	// and the directory S.npy.
	if s, ext, img := n.Parts(x); img {
		p.Keys = append(p.Keys, prefix+x)
		if PlainCase(ext) {
			p.Keys = append(p.Keys, n.variants(prefix+s)...)
			if _, img := n.Split(s); img && s != "" {
				p.Keys = append(p.Keys, prefix+s)
			}
			p.Dirs = append(p.Dirs, prefix+s+NPYExt+"/")
		}
	}
	return p, true
}

// Resolve runs the rule over what a Probe found (objects, prefixes
// holding anything, and those of them that are archives' directories)
// and returns the entry called name, if any. It gives the same
// entry as a listing: everything that decides name is in the Probe, and
// nothing else can take name.
func (n Rule) Resolve(prefix, name string, objs []bucket.Object, dirs, archives []string, note Note) (Entry, bool) {
	slices.SortFunc(objs, func(a, b bucket.Object) int { return cmp.Compare(a.Key, b.Key) })
	objs = slices.CompactFunc(objs, func(a, b bucket.Object) bool { return a.Key == b.Key })
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	r := NewResolver(n, prefix, func(key, got, why string) {
		if got == name && note != nil {
			note(key, got, why)
		}
	})
	for _, e := range r.Add(bucket.Page{Prefixes: dirs, Objects: objs, Archives: archives}, true) {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}
