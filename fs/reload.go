package fs

import (
	"log/slog"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
)

// ModelReplaced points the tree at m, a new version of the model of that
// name (the extractor's Reload): every layer and alias directory of the
// model serves m's layer from then on. For each layer whose digest changed,
// the kernel is told to drop the pages and entries of the feature files it
// holds under that directory, so that the next lookup makes a node of the
// new version (its inode number carries the digest); a read in flight on
// an old node finishes on the version it was looked up at. Layers whose
// digest is unchanged keep the kernel's entries and pages. The layers file
// shows m's table. It returns the directories whose layer changed. Call it
// outside any request on the tree (it sends notifications).
func (f *FS) ModelReplaced(m *api.Model) []string {
	f.p.ModelsChanged()
	f.kernel.mu.Lock()
	layers := f.kernel.layers
	f.kernel.mu.Unlock()
	var changed []string
	for _, n := range layers {
		d, ok := n.Operations().(*prefixDir)
		if !ok || d.view.model != m.Name {
			continue
		}
		l, ok := m.Lookup(d.view.layer)
		if !ok {
			continue // Reload keeps the layers; an alias always resolves
		}
		old := d.view.cur.Swap(d.view.make(f, m, l))
		if old.Layer.Digest == l.Digest && old.Layer.Digest != "" {
			continue
		}
		changed = append(changed, d.view.dir)
		f.dropTree(n)
	}
	if f.predictionsReplaced(m) {
		changed = append(changed, "predictions")
	}
	if md := f.modelDirNode(m.Name); md != nil {
		if ch := md.GetChild(spec.LayersFile); ch != nil {
			if lf, ok := ch.Operations().(*layersFile); ok {
				b := []byte(m.Table())
				lf.data.Store(&b)
				ch.NotifyContent(0, 0)
			}
		}
	}
	f.log.Info("featurefs: model replaced", slog.String("model", m.Name), slog.String("digest", m.Digest), slog.Any("layers_changed", changed))
	return changed
}

// predictionsReplaced points predictions/<m.Name> at m's last layer and,
// when that layer's digest changed, drops the kernel's pages of every
// predictions file under it (their sizes stay: a reload keeps the class
// count). It reports whether the digest changed.
func (f *FS) predictionsReplaced(m *api.Model) bool {
	f.kernel.mu.Lock()
	preds := f.kernel.preds
	f.kernel.mu.Unlock()
	for _, n := range preds {
		d, ok := n.Operations().(*predDir)
		if !ok || d.pv.model.Name != m.Name {
			continue
		}
		v := f.p.PredictionView(m)
		old := d.pv.cur.Swap(v)
		if old.Layer.Digest == v.Layer.Digest && old.Layer.Digest != "" {
			return false
		}
		f.dropPredictions(n)
		return true
	}
	return false
}

// dropPredictions tells the kernel to drop the pages of every predictions
// file it holds under directory n, at any depth.
func (f *FS) dropPredictions(n *gofs.Inode) {
	for _, ch := range n.Children() {
		switch ch.Operations().(type) {
		case *predFile:
			ch.NotifyContent(0, 0)
			f.stats.invalidations.Add(1)
		case *predDir:
			f.dropPredictions(ch)
		}
	}
}

// dropTree tells the kernel to drop the pages and the entries of every
// feature file it holds under directory n, at any depth.
func (f *FS) dropTree(n *gofs.Inode) {
	for name, ch := range n.Children() {
		switch ch.Operations().(type) {
		case *featureFile:
			ch.NotifyContent(0, 0)
			n.NotifyEntry(name)
			f.stats.invalidations.Add(1)
		case *prefixDir:
			f.dropTree(ch)
		}
	}
}

// modelDirNode returns features/<name>'s inode, if the tree has it.
func (f *FS) modelDirNode(name string) *gofs.Inode {
	f.kernel.mu.Lock()
	layers := f.kernel.layers
	f.kernel.mu.Unlock()
	for _, n := range layers {
		if d, ok := n.Operations().(*prefixDir); ok && d.view.model == name && d.view.aug == nil {
			_, parent := n.Parent()
			return parent
		}
	}
	return nil
}
