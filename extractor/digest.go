package extractor

// Layer digests: what identifies a layer's features (docs/MODELS.md).

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/featurefs/featurefs/extractor/graph"
)

// layerDigests returns the digest (api.Layer.Digest) of each tensor's
// features: a SHA-256 of the graph's digest of what computes it
// (graph.Model.Digests: nodes, attributes, initializer bytes, no names,
// nothing after it) and of the preprocessing's canonical string. A tensor
// that depends on external data, whose bytes the graph's digest cannot
// cover, gets one of the whole file's digest and its tensor name instead
// (as every feature was keyed before digests), which changes with any
// change of the file.
func layerDigests(g *graph.Model, fileDigest string, tensors []string, pre Preprocess) ([]string, error) {
	out := make([]string, len(tensors))
	gd, err := g.Digests(tensors...)
	external := errors.Is(err, graph.ErrExternalData)
	if err != nil && !external {
		return nil, err
	}
	for i, t := range tensors {
		h := sha256.New()
		if external {
			writeField(h, "featurefs-layer-file-1")
			writeField(h, fileDigest)
			writeField(h, t)
		} else {
			writeField(h, "featurefs-layer-1")
			writeField(h, string(gd[i][:]))
		}
		writeField(h, pre.Key())
		out[i] = hex.EncodeToString(h.Sum(nil))
	}
	return out, nil
}

func writeField(h interface{ Write([]byte) (int, error) }, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.Write([]byte(s))
}

// LayerDigests parses the ONNX file at path and returns the digest of each
// of its layers, in order, under the preprocessing pre: the
// api.Layer.Digest a mount of it gives them. It needs no ONNX Runtime.
func LayerDigests(path string, pre Preprocess) ([]string, error) {
	data, err := readModelFile(path)
	if err != nil {
		return nil, err
	}
	g, err := graph.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	gl, err := g.Layers()
	if err != nil {
		return nil, fmt.Errorf("%s: layers: %w", path, err)
	}
	tensors := make([]string, len(gl))
	for i, l := range gl {
		tensors[i] = l.Tensor
	}
	sum := graph.Sum256(data)
	return layerDigests(g, hex.EncodeToString(sum[:]), tensors, pre)
}
