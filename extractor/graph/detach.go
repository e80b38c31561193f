package graph

// Detached models: the parsed graph without its weights in memory. A
// model's initializers are nearly all of its file (97 of ResNet-50's 98
// MiB), and a Model that keeps them keeps the file in the Go heap for as
// long as it is loaded. Detach leaves out the large ones and remembers
// where each was in the file, with the hash of its content that the
// digests already cover; Prune reads them back and checks each against
// that hash, so a pruned model is made of the bytes that were parsed and
// digested, or not made at all.

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrSourceChanged is matched by the error of Prune and PruneFrom on a
// detached model (Detach) when the source no longer holds, where an
// initializer was, the bytes that were parsed: the file changed since.
var ErrSourceChanged = errors.New("graph: the model file no longer holds the initializers it was parsed from")

// DetachMinBytes is the smallest initializer field that Detach leaves out
// of memory. Smaller ones, and every tensor whose values shape inference
// may read (maxConstElems), stay.
const DetachMinBytes = 64 << 10

// spill is where a detached initializer's field is in the source.
type spill struct {
	name string
	off  int64 // of the whole field (tag, length, TensorProto) in the source
	n    int64
	sum  [sha256.Size]byte // initSum of the TensorProto
}

// Detach returns a model that computes what m does but holds none of the
// bytes m was parsed from: the large initializers (DetachMinBytes and
// more, with more elements than shape inference reads, not external) are
// left out of memory and read back from src, which must give the bytes m
// was parsed from at the same offsets (the file, opened once). Each one
// read is checked against the hash of its content the digests cover, and
// its name: when they differ, Prune and PruneFrom fail with an error
// matching ErrSourceChanged, never returning a model made of other
// bytes. Digests, shapes and layers are those of m. Detach of a detached
// model returns it.
func (m *Model) Detach(src io.ReaderAt) (*Model, error) {
	if m.src != nil {
		return m, nil
	}
	names := map[string]int{}
	for _, f := range m.gfields {
		if f.num != fGraphInitializer {
			continue
		}
		b, _ := f.msg() // Parse read it
		t, err := parseTensor(b)
		if err != nil {
			return nil, err
		}
		names[t.name]++
	}
	spills := map[string]*spill{}
	var g []byte
	for _, f := range m.gfields {
		if f.num != fGraphInitializer || len(f.raw) < DetachMinBytes {
			g = append(g, f.raw...)
			continue
		}
		b, _ := f.msg()
		t, err := parseTensor(b)
		if err != nil {
			return nil, err
		}
		if n := numel(t.dims); t.external || names[t.name] != 1 || (n >= 0 && n <= maxConstElems) {
			g = append(g, f.raw...)
			continue
		}
		off := int64(cap(m.data) - cap(f.raw))
		if off < 0 || off+int64(len(f.raw)) > int64(len(m.data)) || &m.data[off] != &f.raw[0] {
			return nil, fmt.Errorf("graph: Detach: initializer %q is not in the parsed bytes", t.name)
		}
		sum, err := initSum(t)
		if err != nil {
			return nil, err
		}
		spills[t.name] = &spill{name: t.name, off: off, n: int64(len(f.raw)), sum: sum}
		g = appendMessage(g, fGraphInitializer, tensorStub(t))
	}
	var top []byte
	for i, f := range m.top {
		if i == m.graphAt {
			top = appendMessage(top, fModelGraph, g)
			continue
		}
		top = append(top, f.raw...)
	}
	d, err := Parse(top)
	if err != nil {
		return nil, fmt.Errorf("graph: Detach: the model without its initializers: %w", err)
	}
	for name, sp := range spills {
		d.inits[name].spill = sp
	}
	d.src = src
	return d, nil
}

// tensorStub is the TensorProto of a detached initializer: its name,
// element type and dimensions, which the graph's shape and type inference
// read, without its data.
func tensorStub(t *tensor) []byte {
	var b []byte
	if len(t.dims) > 0 {
		var packed []byte
		for _, d := range t.dims {
			packed = protowire.AppendVarint(packed, uint64(d))
		}
		b = appendMessage(b, fTensorDims, packed)
	}
	b = appendVarint(b, fTensorDataType, uint64(t.dtype))
	return appendString(b, fTensorName, t.name)
}

// initSum is the hash of an initializer's content the digests use
// (digester.of): every field of its TensorProto but the name and doc
// string.
func initSum(t *tensor) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	h := sha256.New()
	writeStr(h, "initializer")
	if err := hashTensor(h, t); err != nil {
		return out, err
	}
	h.Sum(out[:0])
	return out, nil
}

// read reads a detached initializer's field from src into dst (its size)
// and checks that it is the one parsed: one GraphProto initializer field,
// the same name, the same content hash.
func (sp *spill) read(src io.ReaderAt, dst []byte) error {
	if n, err := src.ReadAt(dst, sp.off); n != len(dst) {
		if err == nil || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: initializer %q: the file ends at %d bytes into it", ErrSourceChanged, sp.name, n)
		}
		return fmt.Errorf("graph: reading initializer %q: %w", sp.name, err)
	}
	num, typ, k := protowire.ConsumeTag(dst)
	if k < 0 || num != fGraphInitializer || typ != protowire.BytesType {
		return fmt.Errorf("%w: initializer %q: no initializer field at offset %d", ErrSourceChanged, sp.name, sp.off)
	}
	b, l := protowire.ConsumeBytes(dst[k:])
	if l < 0 || k+l != len(dst) {
		return fmt.Errorf("%w: initializer %q: another length at offset %d", ErrSourceChanged, sp.name, sp.off)
	}
	t, err := parseTensor(b)
	if err != nil || t.name != sp.name {
		return fmt.Errorf("%w: initializer %q: another tensor at offset %d", ErrSourceChanged, sp.name, sp.off)
	}
	sum, err := initSum(t)
	if err != nil || !bytes.Equal(sum[:], sp.sum[:]) {
		return fmt.Errorf("%w: initializer %q: other contents", ErrSourceChanged, sp.name)
	}
	return nil
}

// ExternalData reports whether an initializer of m is external data (in a
// file of its own, which ONNX Runtime reads relative to the model's path).
func (m *Model) ExternalData() bool {
	for _, t := range m.inits {
		if t.external {
			return true
		}
	}
	return false
}
