package views

import (
	"context"
	"sort"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/inflight"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/internal/lru"
	"github.com/featurefs/featurefs/fs/naming"
)

// PredictionsFile is the file, in every directory under
// predictions/<model>/, that holds the top classes of the images directly
// in that directory's bucket prefix, one JSON line each (PredFile). Where
// the prefix has a subdirectory of that name, the subdirectory keeps it
// and the file is PredictionsFile.Moved() (naming.Generated).
const PredictionsFile naming.Generated = "predictions.jsonl"

// PredSnapshotBytes bounds the predictions files' listing snapshots kept
// between requests, all files together: about 700,000 images' records and
// line offsets.
const PredSnapshotBytes = 64 << 20

// PredStaleGrace is how long a stat of a predictions file whose snapshot
// is stale waits for the new one; predRefreshes bounds the snapshots being
// read again at once, all files together.
const (
	PredStaleGrace = time.Second
	predRefreshes  = 4
)

// predSnapshotCost is the bytes a snapshot of n images holds (an object
// record and a line offset each; the strings are the listing's).
func predSnapshotCost(n int) int {
	return 64 + n*int(unsafe.Sizeof(bucket.Object{})+8)
}

// Predictions is what every node under predictions/ shares: the tree's
// listings, the pipeline that predicts, and the files' listing snapshots
// (one LRU for the whole tree, PredSnapshotBytes) with their background
// refreshes (owned by owner, at most predRefreshes at once).
type Predictions struct {
	ns    Namespace
	p     *features.Pipeline
	ttl   time.Duration
	clock func() time.Time

	snaps      *lru.LRU[string, *PredSnapshot]
	refresh    inflight.Group[*PredSnapshot]
	refreshing chan struct{}
}

// NewPredictions returns the predictions views over ns and p, their
// refreshes owned by owner; a snapshot is taken again after the
// pipeline's MetadataTTL.
func NewPredictions(ns Namespace, p *features.Pipeline, owner *lifetime.Owner) *Predictions {
	c := p.Config()
	pr := &Predictions{ns: ns, p: p, ttl: c.MetadataTTL, clock: c.Now,
		snaps: lru.New[string, *PredSnapshot](PredSnapshotBytes), refreshing: make(chan struct{}, predRefreshes)}
	pr.refresh.Owner = owner
	return pr
}

// PredModel is predictions/<model>: the model, the view of its last layer
// (class scores) served now (Replace swaps it on a reload) and the lines'
// layout, constant (a reload keeps the layers' shapes, so the class
// count, and the labels are the mount's).
type PredModel struct {
	pr     *Predictions
	model  *api.Model
	cur    atomic.Pointer[features.View]
	layout *features.PredictionLayout
}

// Model returns predictions/<m>'s model view.
func (pr *Predictions) Model(m *api.Model) *PredModel {
	pm := &PredModel{pr: pr, model: m, layout: features.NewPredictionLayout(m, pr.p.Labels(m.Name), pr.p.Config().PredictionsTop)}
	pm.cur.Store(pr.p.PredictionView(m))
	return pm
}

// Name is the model's name.
func (pm *PredModel) Name() string { return pm.model.Name }

// Replace points pm at m's last layer, a reloaded model; changed is
// whether its digest changed (the files' bytes then did).
func (pm *PredModel) Replace(m *api.Model) (changed bool) {
	v := pm.pr.p.PredictionView(m)
	old := pm.cur.Swap(v)
	return old.Layer.Digest != v.Layer.Digest || old.Layer.Digest == ""
}

// Dir is predictions/<model>/<prefix>.
func (pm *PredModel) Dir(prefix string) *PredDir { return &PredDir{pm: pm, prefix: prefix} }

// File is predictions/<model>/<prefix>/predictions.jsonl.
func (pm *PredModel) File(prefix string) *PredFile { return &PredFile{pm: pm, prefix: prefix} }

// Ino is the inode number of the directory of prefix.
func (pm *PredModel) Ino(prefix string) uint64 { return Ino('p', pm.model.Name, prefix) }

func (pm *PredModel) fileIno(prefix string) uint64 { return Ino('j', pm.model.Name, prefix) }

// PredDir is predictions/<model>/<prefix>: the bucket prefix's
// subdirectories, as the feature directories show them, and its
// predictions file, listed after them. A subdirectory named
// predictions.jsonl keeps its name: the file is then
// PredictionsFile.Moved().
type PredDir struct {
	pm     *PredModel
	prefix string // "" or "a/b/"
}

// List lists the subdirectories and the predictions file. It reads the
// whole listing (the namespace keeps it, within the metadata budget) and
// keeps only directories: their number, not the images', is held.
func (d *PredDir) List(ctx context.Context) ([]Entry, error) {
	var out []Entry
	taken := false
	err := d.pm.pr.ns.Each(ctx, d.prefix, func(e naming.Entry) {
		if e.Dir {
			taken = taken || e.Name == string(PredictionsFile)
			out = append(out, Entry{Name: e.Name, Dir: true, Ino: d.pm.Ino(e.Sub)})
		}
	})
	if err != nil {
		return nil, err
	}
	return append(out, Entry{Name: PredictionsFile.Name(taken), Ino: d.pm.fileIno(d.prefix)}), nil
}

// Lookup finds the predictions file or a subdirectory (through the
// namespace's listings, shared with the feature directories).
func (d *PredDir) Lookup(ctx context.Context, name string) (Node, error) {
	if PredictionsFile.Is(name) {
		pf := d.pm.File(d.prefix)
		snap, err := pf.snapshot(ctx, true)
		if err != nil {
			return Node{}, err
		}
		switch name {
		case PredictionsFile.Name(snap.dirTaken):
			return Node{Ino: d.pm.fileIno(d.prefix), File: pf}, nil
		case PredictionsFile.Moved():
			return Node{}, bucket.ErrNotFound
		}
		// The bucket's subdirectory called predictions.jsonl.
	}
	e, err := d.pm.pr.ns.Lookup(ctx, d.prefix, name)
	if err != nil {
		return Node{}, err
	}
	if !e.Dir {
		return Node{}, bucket.ErrNotFound
	}
	return Node{Ino: d.pm.Ino(e.Sub), Dir: d.pm.Dir(e.Sub)}, nil
}

// PredFile is predictions/<model>/<prefix>/predictions.jsonl: one JSON
// line per image directly in the prefix, in listing order, with its top
// classes (features.PredictionLayout; an image that fails has an error
// line instead, and the others are unaffected).
//
// Sizes: stat never computes. Each line is padded with spaces to a width
// that depends only on its key, the model's class count, the labels and
// --predictions-top, so the file's size is the sum of its images' widths,
// known from the directory's listing alone (the one ls reads), like a
// feature file's size from its layer's shape.
//
// Reads: a read of [off, off+n) computes only the lines it covers (the
// line widths give their images), in parallel within the pipeline's bound
// on predictions (features.Pipeline.PredictAll), and each from the last
// layer's feature through the cache, the feature store and the
// extraction, as a read of that feature. The mount's READs are at most
// 1 MiB of lines, so memory per request is bounded whatever the prefix's
// size. The listing is the snapshot stat last took (taken again after
// --metadata-ttl), so a file's size and lines agree; one evicted, or too
// large for the snapshots' bound, is taken again from the namespace's
// listing.
type PredFile struct {
	pm     *PredModel
	prefix string
}

// PredSnapshot is one listing of a predictions file's prefix and its
// line offsets. Constant.
type PredSnapshot struct {
	objs  []bucket.Object
	ends  []int64 // ends[i]: the offset just past objs[i]'s line
	size  int64
	mtime time.Time
	taken time.Time
	// dirTaken is whether the listing holds a subdirectory called
	// predictions.jsonl, which then keeps the name (naming.Generated).
	dirTaken bool
}

// Images is how many images the snapshot lists.
func (s *PredSnapshot) Images() int { return len(s.objs) }

// Held returns the file's snapshot kept now, if any.
func (pf *PredFile) Held() (*PredSnapshot, bool) { return pf.pm.pr.snaps.Get(pf.id()) }

func (pf *PredFile) id() string { return pf.pm.model.Name + "\x00" + pf.prefix }

// snapshot returns the file's listing: the last one while it is younger
// than the mount's --metadata-ttl (or when fresh is false), else a new one
// read through the namespace. A stale one is read again in the background,
// waited for up to PredStaleGrace: past it, or when the store fails, the
// last one answers and the new one replaces it when it comes, so that a
// stat after the TTL never waits for a whole directory's listing (a
// prefix whose namespace listing was dropped under the metadata budget is
// read again page by page: on a large prefix and a loaded store, tens of
// seconds).
func (pf *PredFile) snapshot(ctx context.Context, fresh bool) (*PredSnapshot, error) {
	pr := pf.pm.pr
	id := pf.id()
	s, ok := pr.snaps.Get(id)
	if ok && (!fresh || pr.clock().Sub(s.taken) < pr.ttl) {
		return s, nil
	}
	if !ok {
		return pf.take(ctx, id)
	}
	c := pr.refresh.Start(ctx, id, pr.refreshSlot, func(ctx context.Context) (*PredSnapshot, error) {
		defer func() { <-pr.refreshing }()
		return pf.take(ctx, id)
	})
	if c == nil {
		return s, nil // every refresh slot busy: the last one
	}
	wctx, cancel := context.WithTimeout(ctx, PredStaleGrace)
	defer cancel()
	if ns, err := c.Wait(wctx); err == nil {
		return ns, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return s, nil
}

// refreshSlot takes one of the refresh slots, if one is free.
func (pr *Predictions) refreshSlot() bool {
	select {
	case pr.refreshing <- struct{}{}:
		return true
	default:
		return false
	}
}

// take reads the file's listing through the namespace and keeps it as
// the file's snapshot.
func (pf *PredFile) take(ctx context.Context, id string) (*PredSnapshot, error) {
	pr := pf.pm.pr
	s := &PredSnapshot{taken: pr.clock(), mtime: pr.p.Started()}
	err := pr.ns.Each(ctx, pf.prefix, func(e naming.Entry) {
		if e.Dir && e.Name == string(PredictionsFile) {
			s.dirTaken = true
		}
		if e.Dir || e.Obj.Plain {
			return
		}
		s.size += pf.pm.layout.Width(e.Obj.Key)
		s.objs = append(s.objs, e.Obj)
		s.ends = append(s.ends, s.size)
		if e.Obj.ModTime.After(s.mtime) {
			s.mtime = e.Obj.ModTime
		}
	})
	if err != nil {
		return nil, err
	}
	pr.snaps.Put(id, s, predSnapshotCost(len(s.objs)))
	return s, nil
}

// Stat reports the size the listing gives; it computes nothing.
func (pf *PredFile) Stat(ctx context.Context) (int64, time.Time, error) {
	s, err := pf.snapshot(ctx, true)
	if err != nil {
		return 0, time.Time{}, err
	}
	return s.size, s.mtime, nil
}

// Size is the held snapshot's (Stat takes one).
func (pf *PredFile) Size() int64 {
	if s, ok := pf.Held(); ok {
		return s.size
	}
	return 0
}

// ModTime is the held snapshot's.
func (pf *PredFile) ModTime() time.Time {
	if s, ok := pf.Held(); ok {
		return s.mtime
	}
	return pf.pm.pr.p.Started()
}

// Version is 0: the file keeps one inode, its size following its
// snapshot (Stat).
func (pf *PredFile) Version() uint64 { return 0 }

// ReadAt computes the lines [off, off+len(p)) covers and copies its part
// of them.
func (pf *PredFile) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s, err := pf.snapshot(ctx, false)
	if err != nil {
		return 0, err
	}
	if off < 0 || off >= s.size || len(p) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(p)), s.size)
	first := sort.Search(len(s.ends), func(i int) bool { return s.ends[i] > off })
	last := sort.Search(len(s.ends), func(i int) bool { return s.ends[i] >= end })
	start := int64(0)
	if first > 0 {
		start = s.ends[first-1]
	}
	pr := pf.pm.pr
	v := pf.pm.cur.Load() // one version for the whole read
	pr.p.Touch(v, pf.prefix)
	preds := pr.p.PredictAll(ctx, v, s.objs[first:last+1], pf.pm.layout.TopK)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	buf := make([]byte, 0, s.ends[last]-start)
	for _, x := range preds {
		buf = pf.pm.layout.Append(buf, x, true)
	}
	return copy(p, buf[off-start:end-start]), nil
}
