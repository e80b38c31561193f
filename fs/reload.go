package fs

import (
	"log/slog"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/views"
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
		if !ok || d.view.Model != m.Name {
			continue
		}
		l, ok := m.Lookup(d.view.Name)
		if !ok {
			continue // Reload keeps the layers; an alias always resolves
		}
		old := d.view.Replace(f.p, m, l)
		if old.Layer.Digest == l.Digest && old.Layer.Digest != "" {
			continue
		}
		changed = append(changed, d.view.Dir)
		f.dropTree(n)
	}
	if f.predictionsReplaced(m) {
		changed = append(changed, "predictions")
	}
	if md := f.modelDirNode(m.Name); md != nil {
		if ch := md.GetChild(spec.LayersFile); ch != nil {
			if vf, ok := ch.Operations().(*viewFile); ok {
				vf.file.(*views.Bytes).Replace([]byte(m.Table()))
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
	for _, pr := range preds {
		if pr.pm.Name() != m.Name {
			continue
		}
		if !pr.pm.Replace(m) {
			return false
		}
		f.dropPredictions(pr.node)
		return true
	}
	return false
}

// dropPredictions tells the kernel to drop the pages of every predictions
// file it holds under directory n, at any depth.
func (f *FS) dropPredictions(n *gofs.Inode) {
	for _, ch := range n.Children() {
		switch op := ch.Operations().(type) {
		case *viewFile:
			if _, ok := op.file.(*views.PredFile); ok {
				ch.NotifyContent(0, 0)
				f.stats.invalidations.Add(1)
			}
		case *viewDir:
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
		if d, ok := n.Operations().(*prefixDir); ok && d.view.Model == name && d.view.Aug == nil {
			_, parent := n.Parent()
			return parent
		}
	}
	return nil
}
