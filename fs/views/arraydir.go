package views

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// arrays/<model>/: beside every directory D of a layer's (alias's, view's)
// feature tree, D.npy, D.labels.npy and D.rows.jsonl, the array view of D:
// arrays/<model>/layer18.npy is the bucket's root,
// arrays/<model>/layer18/train.npy its train/ prefix,
// arrays/<model>/layer12-aug/0/train.npy augmented view 0's. Only
// directories and arrays are shown: the feature files are under
// features/. A directory's name wins over an array's (naming.Generated):
// where the bucket also shows a directory called X.npy, the array of X is
// shown under that name's moved form (X.npy~ and 16 hex digits).

// The array files' suffixes, by kind.
var arraySuffixes = [...]string{".labels.npy", ".rows.jsonl", ".npy"}

// arrayName splits an array file's name into its directory's name and
// its kind (an index of arraySuffixes); ok is false for another name.
func arrayName(name string) (dir string, kind int, ok bool) {
	for k, s := range arraySuffixes {
		if d, found := strings.CutSuffix(name, s); found && d != "" {
			return d, k, true
		}
	}
	return "", 0, false
}

// Arrays is what every array directory reads through: the tree's
// listings, the snapshots its arrays share, what arrays compute with, and
// the bound on one array's rows (a directory of more fails its array's
// lookup with ErrTooManyRows).
type Arrays struct {
	NS      Namespace
	Snaps   *Snapshots
	Env     *ArrayEnv
	MaxRows int
}

// ArrayGroup is a directory of layer views: arrays/<model>/ itself, or
// LAYER-aug/ in it.
type ArrayGroup struct {
	a      *Arrays
	path   string // under arrays/: its inode number's
	layers map[string]*Layer
	groups map[string]*ArrayGroup
}

// NewArrayGroup returns the group at path under arrays/ of the given
// layer views and nested groups, by name.
func NewArrayGroup(a *Arrays, path string, layers map[string]*Layer, groups map[string]*ArrayGroup) *ArrayGroup {
	return &ArrayGroup{a: a, path: path, layers: layers, groups: groups}
}

// Ino is the group's inode number.
func (g *ArrayGroup) Ino() uint64 { return Ino('A', "g", g.path) }

// List shows the layer views and nested groups, and each layer view's
// arrays (of the bucket's root), by name.
func (g *ArrayGroup) List(ctx context.Context) ([]Entry, error) {
	var out []Entry
	for name, v := range g.layers {
		out = append(out, Entry{Name: name, Dir: true, Ino: arrayDirIno(v, "")})
		for _, s := range arraySuffixes {
			out = append(out, Entry{Name: name + s})
		}
	}
	for name, ng := range g.groups {
		out = append(out, Entry{Name: name, Dir: true, Ino: ng.Ino()})
	}
	sortEntries(out)
	return out, nil
}

// Lookup finds a layer view, a nested group or a layer view's array.
func (g *ArrayGroup) Lookup(ctx context.Context, name string) (Node, error) {
	if v, ok := g.layers[name]; ok {
		return Node{Ino: arrayDirIno(v, ""), Dir: &ArrayDir{a: g.a, layer: v}}, nil
	}
	if ng, ok := g.groups[name]; ok {
		return Node{Ino: ng.Ino(), Dir: ng}, nil
	}
	if base, kind, ok := arrayName(name); ok {
		if v, found := g.layers[base]; found {
			return g.a.file(ctx, v, "", kind)
		}
	}
	return Node{}, bucket.ErrNotFound
}

// ArrayDir is a bucket prefix seen through a layer view, under
// arrays/<model>/: its subdirectories and each one's arrays.
type ArrayDir struct {
	a      *Arrays
	layer  *Layer
	prefix string // "" or "a/b/"
}

func arrayDirIno(v *Layer, prefix string) uint64 { return Ino('A', "d", v.Model, v.Dir, prefix) }

// arrayEntry is a name an ArrayDir shows: a directory (its bucket prefix
// sub), or an array file of kind kind of the directory of prefix sub.
type arrayEntry struct {
	dir  bool
	sub  string
	kind int
}

// shown returns every name the directory shows: its directories, and each
// one's three array files under the name naming.Generated gives them
// (moved where a directory of the bucket has the usual one). It reads the
// whole listing and keeps only its directories.
func (d *ArrayDir) shown(ctx context.Context) (map[string]arrayEntry, error) {
	dirs := map[string]string{}
	err := d.a.NS.Each(ctx, d.prefix, func(e naming.Entry) {
		if e.Dir {
			dirs[e.Name] = e.Sub
		}
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]arrayEntry, 4*len(dirs))
	for name, sub := range dirs {
		out[name] = arrayEntry{dir: true, sub: sub}
		for k, s := range arraySuffixes {
			_, taken := dirs[name+s]
			out[naming.Generated(name+s).Name(taken)] = arrayEntry{sub: sub, kind: k}
		}
	}
	return out, nil
}

// List shows the directories and their arrays, by name.
func (d *ArrayDir) List(ctx context.Context) ([]Entry, error) {
	shown, err := d.shown(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(shown))
	for name, e := range shown {
		en := Entry{Name: name, Dir: e.dir}
		if e.dir {
			en.Ino = arrayDirIno(d.layer, e.sub)
		}
		out = append(out, en)
	}
	sortEntries(out)
	return out, nil
}

// Lookup finds a directory, or an array of one.
func (d *ArrayDir) Lookup(ctx context.Context, name string) (Node, error) {
	e, err := d.a.NS.Lookup(ctx, d.prefix, name)
	if err == nil && e.Dir {
		return Node{Ino: arrayDirIno(d.layer, e.Sub), Dir: &ArrayDir{a: d.a, layer: d.layer, prefix: e.Sub}}, nil
	}
	base, kind, ok := arrayName(name)
	if !ok {
		if strings.Contains(name, "~") { // an array's moved name (shown)
			shown, serr := d.shown(ctx)
			if serr != nil {
				return Node{}, serr
			}
			if ae, found := shown[name]; found && !ae.dir {
				return d.a.file(ctx, d.layer, ae.sub, ae.kind)
			}
		}
		if err != nil {
			return Node{}, err
		}
		return Node{}, bucket.ErrNotFound
	}
	if e, err = d.a.NS.Lookup(ctx, d.prefix, base); err != nil {
		return Node{}, err
	}
	if !e.Dir {
		return Node{}, fmt.Errorf("%s%s: not a directory: %w", d.prefix, base, bucket.ErrNotFound)
	}
	return d.a.file(ctx, d.layer, e.Sub, kind)
}

// file is the array file of kind kind of prefix's directory seen through
// v: a snapshot of its listing (shared with its other array files for the
// listings' TTL) made into the file, one inode per version of its rows.
func (a *Arrays) file(ctx context.Context, v *Layer, prefix string, kind int) (Node, error) {
	fv := v.View()
	ds, err := a.Snaps.Get(ctx, v.Model+"\x00"+v.Dir+"\x00"+prefix, func(ctx context.Context) (*Dataset, error) {
		return Scan(ctx, ListAll(a.NS), prefix, a.MaxRows)
	})
	if err != nil {
		return Node{}, err
	}
	var file File
	switch kind {
	case 0:
		file = NewLabels(ds)
	case 1:
		file = NewRows(ds)
	default:
		file = NewArray(a.Env, fv, ds)
	}
	return Node{Ino: Ino('A', "f", v.Model, v.Dir, prefix, arraySuffixes[kind], fv.Layer.Digest,
		strconv.FormatUint(file.Version(), 16)), File: file}, nil
}

func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
}
