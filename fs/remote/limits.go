package remote

// What a client accepts from a server (docs/SERVE.md, "What a mount
// accepts"): a server, or anyone on a plain-http link, may send any
// number, so every number that sizes an allocation or a file is checked
// against a cap here before it is used. A model past a cap is refused (one
// log line; the other models are served); a frame past one fails its item
// or its batch (EIO to the readers, one log line); the mount stays up.

import (
	"errors"
	"fmt"
	"math"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/naming"
)

// MaxFeatureBytes bounds the .npy file of one layer for one sample that a
// mount accepts from a server: 1 GiB. The largest activation of the models
// featurefs runs is far below it (VGG-16's first layer: 12.25 MiB in
// float32; a 1024x1024-input segmentation net's first layer, 64 channels at
// half resolution: 64 MiB). A layer whose shape gives more is refused with
// its model.
const MaxFeatureBytes = 1 << 30

// Caps on GET /v1/models: bodies, counts and names.
const (
	// maxModelsBody bounds the JSON body of GET /v1/models (a ResNet-50
	// with its layers table takes about 6 KB).
	maxModelsBody = 16 << 20
	// maxModels bounds the models of one server; past it the answer is
	// refused.
	maxModels = 1024
	// maxLayers bounds the layers of one model (ViT-L/16: 29).
	maxLayers = 4096
	// maxRank bounds the dimensions of a layer's shape (numpy's own limit
	// is 64; the .npy header of 32 dimensions fits its 16-bit length).
	maxRank = 32
	// maxNameLen bounds a model's or layer's name (a file name's limit).
	maxNameLen = 255
	// maxTableLen bounds a model's layers table (the text of
	// features/<model>/layers).
	maxTableLen = 1 << 20
	// maxAliases bounds the aliases of one model: each is a directory of
	// the mount, and the layers table pairs every alias with every layer.
	maxAliases = maxLayers
	// maxLoadedAtLen bounds the loaded_at kept of a model (RFC 3339 with
	// nanoseconds takes 35 bytes): a longer one is taken as none.
	maxLoadedAtLen = 64
)

// maxJSONBody bounds the JSON body of the other metadata answers (GET
// /v1/list: a page of at most about a thousand keys of at most 1 KiB
// each; GET /v1/stat).
const maxJSONBody = 64 << 20

// errBadModel is matched by the reasons a model is refused.
var errBadModel = errors.New("refused: a number past the client's caps")

// checkDType checks the servers' element type.
func checkDType(dt api.DType) error {
	switch dt {
	case spec.Float32, spec.Float16:
		return nil
	}
	return fmt.Errorf("remote: the servers' dtype %q is neither %s nor %s", dt, spec.Float32, spec.Float16)
}

// checkModel checks one model of GET /v1/models against the caps: a
// usable, short name; at most maxLayers layers listed by index, each with a
// usable name and a shape of 1..maxRank positive dimensions whose .npy
// file is at most MaxFeatureBytes; a table of at most maxTableLen bytes;
// at most maxAliases aliases, each named in at most maxNameLen bytes (a
// name that is no directory name is ignored by the mount). It returns the .npy size of each layer.
func checkModel(mi ModelInfo, dt api.DType) ([]int64, error) {
	if !naming.ValidName(mi.Name) || len(mi.Name) > maxNameLen || mi.Name == spec.LayersFile {
		return nil, fmt.Errorf("%w: model name %.64q is not a usable directory name", errBadModel, mi.Name)
	}
	if len(mi.Layers) == 0 || len(mi.Layers) > maxLayers {
		return nil, fmt.Errorf("%w: %d layers (1 to %d)", errBadModel, len(mi.Layers), maxLayers)
	}
	if len(mi.Table) > maxTableLen {
		return nil, fmt.Errorf("%w: a layers table of %d bytes (at most %d)", errBadModel, len(mi.Table), maxTableLen)
	}
	if len(mi.Aliases) > maxAliases {
		return nil, fmt.Errorf("%w: %d aliases (at most %d)", errBadModel, len(mi.Aliases), maxAliases)
	}
	for a := range mi.Aliases {
		if len(a) > maxNameLen {
			return nil, fmt.Errorf("%w: alias %.64q: a name of %d bytes (at most %d)", errBadModel, a, len(a), maxNameLen)
		}
	}
	sizes := make([]int64, len(mi.Layers))
	names := make(map[string]bool, len(mi.Layers))
	for i, l := range mi.Layers {
		if l.Index != i {
			return nil, fmt.Errorf("%w: layer %d listed as %d", errBadModel, i, l.Index)
		}
		if !naming.ValidName(l.Name) || len(l.Name) > maxNameLen || l.Name == spec.LayersFile || names[l.Name] {
			return nil, fmt.Errorf("%w: layer %d's name %.64q is not a usable, unique directory name", errBadModel, i, l.Name)
		}
		names[l.Name] = true
		if !validDigest(l.Digest) {
			return nil, fmt.Errorf("%w: layer %d (%s): digest %.80q is not 64 lower-case hex digits", errBadModel, i, l.Name, l.Digest)
		}
		n, err := featureBytes(l.Shape, dt)
		if err != nil {
			return nil, fmt.Errorf("%w: layer %d (%s): %w", errBadModel, i, l.Name, err)
		}
		if l.CumGFLOPs < 0 || math.IsNaN(l.CumGFLOPs) || math.IsInf(l.CumGFLOPs, 0) {
			return nil, fmt.Errorf("%w: layer %d (%s): cumulative GFLOPs %g", errBadModel, i, l.Name, l.CumGFLOPs)
		}
		sizes[i] = n
	}
	return sizes, nil
}

// featureBytes returns the .npy size of a shape, or why it is past the
// caps: every dimension positive, at most maxRank of them, and at most
// MaxFeatureBytes in all (checked as it multiplies, so no product
// overflows).
func featureBytes(shape []int64, dt api.DType) (int64, error) {
	if len(shape) == 0 || len(shape) > maxRank {
		return 0, fmt.Errorf("shape of %d dimensions (1 to %d)", len(shape), maxRank)
	}
	elems := int64(1)
	for _, d := range shape {
		if d <= 0 {
			return 0, fmt.Errorf("shape %v: dimension %d", shape, d)
		}
		if elems > MaxFeatureBytes/d/dt.Size() {
			return 0, fmt.Errorf("shape %v: more than %d bytes per sample", shape, MaxFeatureBytes)
		}
		elems *= d
	}
	n := api.NPYSize(shape, dt)
	if n > MaxFeatureBytes {
		return 0, fmt.Errorf("shape %v: %d bytes per sample (at most %d)", shape, n, MaxFeatureBytes)
	}
	return n, nil
}

// validDigest reports whether d is a layer digest a client can key by (and
// name feature store directories with): empty (a server that predates
// digests) or 64 lower-case hex digits.
func validDigest(d string) bool {
	if d == "" {
		return true
	}
	if len(d) != 64 {
		return false
	}
	for _, c := range d {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
