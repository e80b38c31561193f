package graph

import (
	"fmt"
	"io"
	"runtime"

	"google.golang.org/protobuf/encoding/protowire"
)

// Prune returns a serialized ModelProto that computes only the given
// tensors: the original model with the nodes and initializers they do not
// need removed, graph outputs set to exactly those tensors (in that order)
// and graph inputs reduced to the needed ones. Every field the package does
// not interpret (opset imports, metadata, functions, doc strings...) is
// copied verbatim. Output types carry the element type the operators' type
// rules give (none where they give none) and, where known, the shape with a
// dynamic "batch" dimension.
func (m *Model) Prune(outputs ...string) ([]byte, error) {
	p, err := m.prune("", outputs)
	if err != nil {
		return nil, err
	}
	return p.bytes(m.src)
}

// PruneFrom is Prune for split execution: the sub-model's only input is the
// intermediate tensor input (typically a layer tensor), and it computes
// outputs from it. When the outputs depend on a graph input other than
// through input, the error matches ErrNotCut. An input "" is the graph's
// input: PruneFrom("", outputs...) is Prune(outputs...).
func (m *Model) PruneFrom(input string, outputs ...string) ([]byte, error) {
	p, err := m.pruneFrom(input, outputs)
	if err != nil {
		return nil, err
	}
	return p.bytes(m.src)
}

// PruneFromTo writes to w the model PruneFrom returns without holding it
// in memory: what the graph keeps, and each detached initializer read from
// the source and checked (spill.read) before any of its bytes are written,
// one at a time. On an error, w has a prefix of the model (never bytes
// other than the parsed ones) and the error says why: the reader of w must
// not take what it got for a model. The cost in memory is the largest
// initializer, not the model (ONNX Runtime reads the model from a pipe:
// extractor's session opening).
func (m *Model) PruneFromTo(w io.Writer, input string, outputs ...string) error {
	p, err := m.pruneFrom(input, outputs)
	if err != nil {
		return err
	}
	return p.writeTo(w, m.src)
}

func (m *Model) pruneFrom(input string, outputs []string) (*pieces, error) {
	if input == "" {
		return m.prune("", outputs)
	}
	if !m.defined(input) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTensor, input)
	}
	if _, ok := m.inits[input]; ok {
		return nil, fmt.Errorf("graph: PruneFrom: %q is an initializer, not an activation", input)
	}
	if m.isGraphInput(input) {
		return m.prune("", outputs)
	}
	return m.prune(input, outputs)
}

func (m *Model) isGraphInput(name string) bool {
	for _, in := range m.inputs {
		if in.name == name {
			return true
		}
	}
	return false
}

// prune returns the pruned model as pieces (pieces.bytes joins them,
// pieces.writeTo writes them).
func (m *Model) prune(from string, outputs []string) (*pieces, error) {
	outs, err := m.distinctOutputs(outputs)
	if err != nil {
		return nil, err
	}
	needed, keepNode, err := m.needed(from, outs)
	if err != nil {
		return nil, err
	}
	g, err := m.prunedGraph(from, outs, needed, keepNode)
	if err != nil {
		return nil, err
	}
	var out pieces
	for i, f := range m.top {
		if i == m.graphAt {
			out.add(protowire.AppendVarint(protowire.AppendTag(nil, fModelGraph, protowire.BytesType), uint64(g.n)))
			out.addAll(g)
			continue
		}
		out.add(f.raw)
	}
	return &out, nil
}

// distinctOutputs checks that every output is a tensor of the model and
// returns them without repeats, in their first order.
func (m *Model) distinctOutputs(outputs []string) ([]string, error) {
	if len(outputs) == 0 {
		return nil, fmt.Errorf("graph: Prune needs at least one output")
	}
	var outs []string
	seen := map[string]bool{}
	for _, o := range outputs {
		if !m.defined(o) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownTensor, o)
		}
		if !seen[o] {
			seen[o] = true
			outs = append(outs, o)
		}
	}
	return outs, nil
}

// needed walks back from outs, stopping at from (none: the graph inputs),
// and returns the tensors the outputs need and the nodes that compute them
// (by fileIdx). With from set, the outputs must not need a graph input
// other than through from (ErrNotCut). Without it the model's input is
// always needed: the extractor feeds it, and a model without an input does
// not parse.
func (m *Model) needed(from string, outs []string) (needed map[string]bool, keepNode map[int]bool, err error) {
	needed = map[string]bool{}
	keepNode = map[int]bool{}
	stack := append([]string(nil), outs...)
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if needed[t] {
			continue
		}
		needed[t] = true
		if t == from {
			continue
		}
		p, ok := m.producer[t]
		if !ok {
			continue // graph input or initializer
		}
		n := m.nodes[p]
		if keepNode[n.fileIdx] {
			continue
		}
		keepNode[n.fileIdx] = true
		for _, r := range n.reads() {
			if r != "" && !needed[r] {
				stack = append(stack, r)
			}
		}
	}
	if from == "" {
		needed[m.input] = true
		return needed, keepNode, nil
	}
	for _, in := range m.inputs {
		if _, isInit := m.inits[in.name]; !isInit && needed[in.name] {
			return nil, nil, fmt.Errorf("%w: %v need graph input %q besides %q", ErrNotCut, outs, in.name, from)
		}
	}
	return needed, keepNode, nil
}

// prunedGraph re-encodes the GraphProto with only the needed nodes,
// initializers, inputs and value infos, every other field verbatim, the
// input from (when set) and the outputs outs.
func (m *Model) prunedGraph(from string, outs []string, needed map[string]bool, keepNode map[int]bool) (*pieces, error) {
	newIO := map[string]bool{from: from != ""}
	for _, o := range outs {
		newIO[o] = true
	}
	g := &pieces{}
	nodeIdx := 0
	for _, f := range m.gfields {
		switch f.num {
		case fGraphNode:
			if keepNode[nodeIdx] {
				g.add(f.raw)
			}
			nodeIdx++
		case fGraphInitializer:
			b, _ := f.msg() // parsed successfully before
			t, err := parseTensor(b)
			if err != nil {
				return nil, err
			}
			if !needed[t.name] {
				break
			}
			if sp := m.inits[t.name].spill; sp != nil {
				g.addSpill(sp)
			} else {
				g.add(f.raw)
			}
		case fGraphInput:
			b, _ := f.msg()
			v, err := parseValueInfo(b)
			if err != nil {
				return nil, err
			}
			_, isInit := m.inits[v.name]
			if needed[v.name] && (from == "" || isInit) {
				g.add(f.raw)
			}
		case fGraphOutput:
			// replaced below
		case fGraphValueInfo:
			b, _ := f.msg()
			v, err := parseValueInfo(b)
			if err != nil {
				return nil, err
			}
			if needed[v.name] && !newIO[v.name] {
				g.add(f.raw)
			}
		default:
			g.add(f.raw)
		}
	}
	if from != "" {
		vi, err := m.valueInfoFor(from)
		if err != nil {
			return nil, err
		}
		g.add(appendMessage(nil, fGraphInput, vi))
	}
	for _, o := range outs {
		vi, err := m.valueInfoFor(o)
		if err != nil {
			return nil, err
		}
		g.add(appendMessage(nil, fGraphOutput, vi))
	}
	return g, nil
}

// valueInfoFor returns an encoded ValueInfoProto for tensor name: the
// original graph output's, input's or value_info's when the model has one
// with an element type and a shape, otherwise
// built from the element type rules (elemTypes) and shape inference (the
// shape with the batch axis as the symbolic dimension "batch"); a tensor of
// unknown element type gets a ValueInfoProto with its name only.
func (m *Model) valueInfoFor(name string) ([]byte, error) {
	var known []*valueInfo
	for _, o := range m.outputs {
		if o.name == name {
			known = append(known, o)
		}
	}
	for _, o := range m.inputs {
		if o.name == name {
			known = append(known, o)
		}
	}
	if v, ok := m.valueInfo[name]; ok {
		known = append(known, v)
	}
	for _, v := range known {
		if v.elem != 0 && v.hasShape {
			return (field{raw: v.raw}).payload()
		}
	}
	// The element type from the operators' type rules, which need no
	// shapes: a type guessed here would make ONNX Runtime refuse the graph
	// (a Shape output declared float). Unknown, it is left out.
	elem := m.elemTypes()[name]
	var dims []dim
	hasShape := false
	if inf, err := m.infer(); err == nil {
		v1, v2 := inf.b1[name], inf.b2[name]
		if elem == dtUndefined && v1 != nil {
			elem = v1.dtype
		}
		if v1 != nil && v2 != nil && len(v1.shape) == len(v2.shape) {
			hasShape = true
			batchAxes := 0
			for i := range v1.shape {
				switch {
				case v1.shape[i] == v2.shape[i]:
					dims = append(dims, dim{value: v1.shape[i]})
				case v1.shape[i] == 1 && v2.shape[i] == 2:
					dims = append(dims, dim{value: -1, param: "batch"})
					batchAxes++
				default:
					dims = append(dims, dim{value: -1})
				}
			}
			if batchAxes > 1 {
				for i := range dims {
					if dims[i].param != "" {
						dims[i] = dim{value: -1}
					}
				}
			}
		}
	}
	return encodeValueInfo(name, elem, hasShape, dims), nil
}

// payload returns the message inside a raw length-delimited field.
func (f field) payload() ([]byte, error) {
	_, _, n := protowire.ConsumeTag(f.raw)
	if n < 0 {
		return nil, fmt.Errorf("%w: bad tag", ErrBadModel)
	}
	b, m := protowire.ConsumeBytes(f.raw[n:])
	if m < 0 {
		return nil, fmt.Errorf("%w: bad length", ErrBadModel)
	}
	return b, nil
}

// encodeValueInfo builds a ValueInfoProto for a tensor type; with elem
// undefined, one with the name alone (ONNX Runtime infers the type).
func encodeValueInfo(name string, elem int32, hasShape bool, dims []dim) []byte {
	if elem == dtUndefined {
		return appendString(nil, fValueName, name)
	}
	var tt []byte
	tt = appendVarint(tt, fTensorTypeElem, uint64(elem))
	if hasShape {
		var shape []byte
		for _, d := range dims {
			var db []byte
			switch {
			case d.value >= 0:
				db = appendVarint(db, fDimValue, uint64(d.value))
			case d.param != "":
				db = appendString(db, fDimParam, d.param)
			}
			shape = appendMessage(shape, fShapeDim, db)
		}
		tt = appendMessage(tt, fTensorTypeShape, shape)
	}
	var typ []byte
	typ = appendMessage(typ, fTypeTensor, tt)
	var vi []byte
	vi = appendString(vi, fValueName, name)
	return appendMessage(vi, fValueType, typ)
}

// pieces is a serialized message kept as the slices it is made of (mostly
// the source file's own fields, or where to read them in it for a detached
// model) until bytes copies them once into a buffer of the exact size. A
// model's pruned copy is about as big as the file (100 MB for ResNet-50):
// appending it field by field regrew and recopied the buffer, each time in
// one memmove that the Go scheduler cannot preempt, which held up the
// garbage collector's stack scan and with it every goroutine of a 2-CPU
// mount for 400 ms (docs/MODELS.md, "Reload").
type pieces struct {
	parts []piece
	n     int
}

// piece is bytes in memory, or a detached initializer read from the
// model's source.
type piece struct {
	b  []byte
	sp *spill
}

func (p *pieces) add(b []byte) {
	if len(b) > 0 {
		p.parts = append(p.parts, piece{b: b})
		p.n += len(b)
	}
}

func (p *pieces) addSpill(sp *spill) {
	p.parts = append(p.parts, piece{sp: sp})
	p.n += int(sp.n)
}

func (p *pieces) addAll(q *pieces) {
	p.parts = append(p.parts, q.parts...)
	p.n += q.n
}

// copyChunk bounds one copy: a memmove runs without a preemption point, so
// a goroutine that copies a large buffer in one call holds its CPU (and any
// garbage collection waiting to scan its stack) until it is done.
const copyChunk = 256 << 10

// bytes returns the pieces joined, copied at most copyChunk bytes at a
// time, the detached initializers read from src straight into place and
// checked (spill.read).
func (p *pieces) bytes(src io.ReaderAt) ([]byte, error) {
	out := make([]byte, p.n)
	at := 0
	for _, pc := range p.parts {
		if pc.sp == nil {
			at += copyPreemptible(out[at:], pc.b)
			continue
		}
		if src == nil {
			return nil, fmt.Errorf("graph: initializer %q is detached and the model has no source", pc.sp.name)
		}
		if err := pc.sp.read(src, out[at:at+int(pc.sp.n)]); err != nil {
			return nil, err
		}
		at += int(pc.sp.n)
	}
	return out, nil
}

// writeTo writes the pieces to w, each detached initializer read from src
// into one buffer of the largest one's size and checked (spill.read)
// before it is written.
func (p *pieces) writeTo(w io.Writer, src io.ReaderAt) error {
	var buf []byte
	for _, pc := range p.parts {
		if pc.sp != nil && int(pc.sp.n) > len(buf) {
			buf = make([]byte, pc.sp.n)
		}
	}
	for _, pc := range p.parts {
		b := pc.b
		if pc.sp != nil {
			if src == nil {
				return fmt.Errorf("graph: initializer %q is detached and the model has no source", pc.sp.name)
			}
			b = buf[:pc.sp.n]
			if err := pc.sp.read(src, b); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// copyPreemptible is copy(dst, src) in copyChunk steps, yielding between
// them. The yield is what makes it preemptible: a copy into fresh memory
// spends nearly all its time in memmove and the page faults of first
// touch, where the runtime's preemption signal finds no safe point, so
// without it the loop ran 376 ms unpreempted (runtime trace, 2 CPUs) while
// the GC waited to scan its stack.
func copyPreemptible(dst, src []byte) int {
	n := 0
	for n < len(src) && n < len(dst) {
		end := min(n+copyChunk, len(src), len(dst))
		copy(dst[n:end], src[n:end])
		n = end
		runtime.Gosched()
	}
	return n
}

// PrunedSize returns the size in bytes of the model PruneFrom(from,
// outputs...) gives, without reading any weights: what opening a session
// of it parses.
func (m *Model) PrunedSize(from string, outputs ...string) (int64, error) {
	p, err := m.pruneFrom(from, outputs)
	if err != nil {
		return 0, err
	}
	return int64(p.n), nil
}
