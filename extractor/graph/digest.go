package graph

// Digests of what computes a tensor (docs/MODELS.md): a Merkle hash over
// the graph, so that a tensor's digest covers exactly the nodes it depends
// on, whatever their names.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sort"
)

// ErrExternalData is matched by Digests' error when a tensor depends on an
// initializer whose bytes live outside the ONNX file: its digest cannot
// cover them.
var ErrExternalData = errors.New("graph: tensor depends on external data")

// DigestVersion names the digest's derivation; it is hashed into every
// digest, so that a change of derivation changes every digest.
const DigestVersion = "featurefs-graph-digest-1"

// Digests returns, for each tensor, a SHA-256 of what computes it: the
// nodes it depends on (op type, domain, attributes, and which tensors feed
// which input), the bytes, element types and dimensions of the initializers
// and constants they read, the element type and fixed dimensions of the
// graph input, and the model's operator set versions. Nothing else takes
// part: no tensor, node, initializer or graph name, no doc string, no node
// the tensor does not depend on (nothing after it in the graph). Two models
// that compute a tensor the same way give it the same digest.
//
// Each tensor's hash is built from its producer's hash and its output
// position, each node's from its inputs' hashes (a Merkle DAG), so names
// become positions in the computation and one pass over the nodes gives
// every digest. A node's subgraph attributes (If, Loop, Scan) are hashed
// as written, names included: two such models may differ in digest where
// they compute alike, never the other way round.
func (m *Model) Digests(tensors ...string) ([][sha256.Size]byte, error) {
	d := &digester{m: m, tensor: map[string][sha256.Size]byte{}, external: map[string]bool{}}
	if err := d.run(); err != nil {
		return nil, err
	}
	root := d.opsets()
	out := make([][sha256.Size]byte, len(tensors))
	for i, t := range tensors {
		if !m.defined(t) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownTensor, t)
		}
		if d.external[t] {
			return nil, fmt.Errorf("%w: %q", ErrExternalData, t)
		}
		th, err := d.of(t)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		writeStr(h, DigestVersion)
		h.Write(root[:])
		h.Write(th[:])
		h.Sum(out[i][:0])
	}
	return out, nil
}

// digester holds one pass's hashes.
type digester struct {
	m        *Model
	tensor   map[string][sha256.Size]byte // tensor name -> its hash
	external map[string]bool              // tensors depending on external data
}

// run hashes every node output in topological order.
func (d *digester) run() error {
	for _, n := range d.m.nodes {
		h := sha256.New()
		writeStr(h, "node")
		writeStr(h, n.domain)
		writeStr(h, n.opType)
		names := make([]string, 0, len(n.attrs))
		for name := range n.attrs {
			names = append(names, name)
		}
		sort.Strings(names)
		writeInt(h, int64(len(names)))
		for _, name := range names {
			if err := d.attr(h, n.attrs[name]); err != nil {
				return fmt.Errorf("node %q attribute %q: %w", n.name, name, err)
			}
		}
		ext := false
		for _, list := range [][]string{n.inputs, n.implicit} {
			writeInt(h, int64(len(list)))
			for _, in := range list {
				if in == "" {
					writeStr(h, "") // an omitted optional input
					continue
				}
				th, err := d.of(in)
				if err != nil {
					return err
				}
				ext = ext || d.external[in]
				h.Write(th[:])
			}
		}
		var nh [sha256.Size]byte
		h.Sum(nh[:0])
		for k, o := range n.outputs {
			if o == "" {
				continue
			}
			oh := sha256.New()
			oh.Write(nh[:])
			writeInt(oh, int64(k))
			var th [sha256.Size]byte
			oh.Sum(th[:0])
			d.tensor[o] = th
			if ext {
				d.external[o] = true
			}
		}
	}
	return nil
}

// of returns a tensor's hash: a node output's (run), an initializer's
// content hash, or a graph input's position and type.
func (d *digester) of(name string) ([sha256.Size]byte, error) {
	if th, ok := d.tensor[name]; ok {
		return th, nil
	}
	var th [sha256.Size]byte
	if t, ok := d.m.inits[name]; ok {
		if t.spill != nil {
			th = t.spill.sum // Detach hashed it, as initSum does here
		} else {
			var err error
			if th, err = initSum(t); err != nil {
				return th, err
			}
		}
		d.tensor[name] = th
		if t.external {
			d.external[name] = true
		}
		return th, nil
	}
	k := 0
	for _, in := range d.m.inputs {
		if _, isInit := d.m.inits[in.name]; isInit {
			continue
		}
		if in.name == name {
			h := sha256.New()
			writeStr(h, "input")
			writeInt(h, int64(k))
			writeInt(h, int64(in.elem))
			writeInt(h, int64(len(in.dims)))
			for _, dm := range in.dims {
				writeInt(h, dm.value) // -1 for a symbolic or unknown dimension, whatever its name
			}
			h.Sum(th[:0])
			d.tensor[name] = th
			return th, nil
		}
		k++
	}
	return th, fmt.Errorf("%w: %q", ErrUnknownTensor, name)
}

// attr hashes one attribute: its name and every field of the
// AttributeProto but its doc string, with a tensor value hashed by content
// (not its name).
func (d *digester) attr(h hash.Hash, a *attr) error {
	fs, err := fields(a.raw)
	if err != nil {
		return err
	}
	writeInt(h, int64(len(fs)))
	for _, f := range fs {
		switch f.num {
		case fAttrDoc:
			continue
		case fAttrT:
			t, err := parseTensor(f.val)
			if err != nil {
				return err
			}
			writeStr(h, "tensor")
			if err := hashTensor(h, t); err != nil {
				return err
			}
		default:
			writeBytes(h, f.raw)
		}
	}
	return nil
}

// hashTensor writes a TensorProto's content: every field but its name and
// doc string, in the order written.
func hashTensor(h hash.Hash, t *tensor) error {
	fs, err := fields(t.msg)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if f.num == fTensorName || f.num == fTensorDoc {
			continue
		}
		writeBytes(h, f.raw)
	}
	return nil
}

// opsets hashes the model's operator set imports (domain and version),
// sorted, which give the ops their meaning.
func (d *digester) opsets() [sha256.Size]byte {
	type imp struct {
		dom string
		ver int64
	}
	var imps []imp
	for _, f := range d.m.top {
		if f.num != fModelOpset {
			continue
		}
		b, err := f.msg()
		if err != nil {
			continue // Parse read it
		}
		dom, ver, err := parseOpset(b)
		if err != nil {
			continue
		}
		if dom == "ai.onnx" {
			dom = ""
		}
		imps = append(imps, imp{dom, ver})
	}
	slices.SortFunc(imps, func(a, b imp) int {
		if a.dom != b.dom {
			if a.dom < b.dom {
				return -1
			}
			return 1
		}
		return int(a.ver - b.ver)
	})
	h := sha256.New()
	writeStr(h, "opsets")
	for _, i := range imps {
		writeStr(h, i.dom)
		writeInt(h, i.ver)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func writeInt(h hash.Hash, v int64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	h.Write(b[:])
}

func writeBytes(h hash.Hash, b []byte) {
	writeInt(h, int64(len(b)))
	writePreemptible(h, b)
}

// writePreemptible is h.Write(b) in copyChunk steps: SHA-256 of one slice
// runs in one assembly call that the Go scheduler cannot preempt (about
// 250 ms for a 100 MB model file on a CPU without SHA instructions), and a
// goroutine that cannot be preempted holds up the garbage collector's stack
// scan and with it the whole process (see pieces).
func writePreemptible(h hash.Hash, b []byte) {
	for len(b) > 0 {
		n := min(len(b), copyChunk)
		h.Write(b[:n])
		b = b[n:]
	}
}

// Sum256 is sha256.Sum256(b), hashed copyChunk bytes at a time so that a
// model file's digest does not hold up the process (writePreemptible).
func Sum256(b []byte) [sha256.Size]byte {
	h := sha256.New()
	writePreemptible(h, b)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func writeStr(h hash.Hash, s string) {
	writeInt(h, int64(len(s)))
	h.Write([]byte(s))
}
