package fs

import (
	"context"
	"fmt"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/fs/bucket"
)

// Feature returns the .npy bytes of obj's feature at a model's layer, by
// the same path as a read of the mounted file: a known bad object fails at
// once; else the cache, else an extraction whose result is stored; identical
// concurrent calls share one run. It needs no mount: featurefs serve calls it
// on an unmounted FS. An unknown model or layer matches
// extractor.ErrUnknownModel / extractor.ErrUnknownLayer. If ctx ends first,
// Feature returns ctx.Err() and the run goes on (and fills the cache).
func (f *FS) Feature(ctx context.Context, model string, layer int, obj bucket.Object) ([]byte, error) {
	m, ok := f.cfg.Extractor.Model(model)
	if !ok {
		return nil, fmt.Errorf("feature %s: %w %q", obj.Key, extractor.ErrUnknownModel, model)
	}
	if layer < 0 || layer >= len(m.Layers) {
		return nil, fmt.Errorf("feature %s: %w %d of model %s (it has %d)", obj.Key, extractor.ErrUnknownLayer, layer, model, len(m.Layers))
	}
	l := m.Layers[layer]
	return f.feature(ctx, newLayerView(f, m, l, l.Name), obj)
}

// ErrObjectChanged is matched by Feature's error when the object's ETag is
// no longer the one given (it changed since it was listed).
var ErrObjectChanged = errObjectChanged
