package graph

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrBadModel is matched (errors.Is) by every error caused by bytes that are
// not a well-formed ONNX ModelProto.
var ErrBadModel = errors.New("graph: bad ONNX model")

// ErrUnknownTensor is matched by errors naming a tensor the graph does not
// have.
var ErrUnknownTensor = errors.New("graph: unknown tensor")

// ErrNotCut is matched by PruneFrom's error when the requested outputs
// depend on a graph input other than through the given tensor, so the
// sub-model could not be fed from that tensor alone.
var ErrNotCut = errors.New("graph: tensor does not separate the outputs from the graph inputs")

// Model is a parsed ONNX model. It keeps the bytes it was parsed from (not a
// copy) and must not outlive changes to them, unless Detach made it one that
// reads its large initializers back from the file. A Model is safe for
// concurrent use.
type Model struct {
	data    []byte      // what Parse parsed (Detach finds the fields' offsets in it)
	src     io.ReaderAt // where detached initializers are read from (Detach); nil when none is
	top     []field     // ModelProto fields
	graphAt int         // index of the graph field in top
	gfields []field     // GraphProto fields

	irVersion int64
	opset     int64 // default-domain opset version, 0 when not imported
	graphName string

	nodes     []*node            // topological order
	inits     map[string]*tensor // initializers by name
	inputs    []*valueInfo       // graph inputs, file order
	outputs   []*valueInfo       // graph outputs, file order
	valueInfo map[string]*valueInfo

	producer  map[string]int   // tensor -> index in nodes
	consumers map[string][]int // tensor -> indices in nodes, ascending
	input     string           // the first graph input that is not an initializer

	once  sync.Once
	inf   *inference // shape inference at batch 1 and 2
	infOK error

	typesOnce sync.Once
	types     map[string]int32 // element types by the operators' rules (elemTypes)
}

// node is one NodeProto.
type node struct {
	name, opType, domain string
	inputs, outputs      []string
	attrs                map[string]*attr
	implicit             []string // outer-scope tensors read by subgraphs
	raw                  []byte   // the whole field in GraphProto
	fileIdx              int      // position among the graph's nodes in the file
}

// attr is one AttributeProto.
type attr struct {
	name   string
	typ    int64
	f      float64
	i      int64
	s      []byte
	ints   []int64
	floats []float64
	t      *tensor
	graphs [][]byte
	raw    []byte // the AttributeProto message (digest.go)
}

// tensor is a TensorProto (initializer or Constant value).
type tensor struct {
	name     string
	dims     []int64
	dtype    int32
	external bool
	msg      []byte // the TensorProto message
	raw      []byte // the whole field in GraphProto, for initializers
	spill    *spill // where its field is in the model's source, for a detached initializer (Detach)
}

// valueInfo is a ValueInfoProto.
type valueInfo struct {
	name     string
	elem     int32
	hasShape bool
	dims     []dim
	raw      []byte // the whole field in GraphProto
}

// dim is one TensorShapeProto.Dimension: value >= 0, or param, or unknown.
type dim struct {
	value int64 // -1 when not a fixed value
	param string
}

// Parse decodes an ONNX ModelProto. Fields it does not interpret are kept as
// bytes and written back unchanged by Prune and PruneFrom. Malformed input is
// an error matching ErrBadModel; Parse never panics.
func Parse(data []byte) (*Model, error) {
	top, err := fields(data)
	if err != nil {
		return nil, err
	}
	m := &Model{data: data, graphAt: -1}
	for i, f := range top {
		switch f.num {
		case fModelIRVersion:
			if m.irVersion, err = f.int(); err != nil {
				return nil, err
			}
		case fModelGraph:
			if m.graphAt >= 0 {
				return nil, fmt.Errorf("%w: two graph fields", ErrBadModel)
			}
			m.graphAt = i
		case fModelOpset:
			b, err := f.msg()
			if err != nil {
				return nil, err
			}
			dom, ver, err := parseOpset(b)
			if err != nil {
				return nil, err
			}
			if dom == "" || dom == "ai.onnx" {
				m.opset = ver
			}
		}
	}
	if m.graphAt < 0 {
		return nil, fmt.Errorf("%w: no graph", ErrBadModel)
	}
	m.top = top
	gb, err := top[m.graphAt].msg()
	if err != nil {
		return nil, err
	}
	if err := m.parseGraph(gb); err != nil {
		return nil, err
	}
	return m, nil
}

func parseOpset(b []byte) (string, int64, error) {
	fs, err := fields(b)
	if err != nil {
		return "", 0, err
	}
	var dom string
	var ver int64
	for _, f := range fs {
		switch f.num {
		case fOpsetDomain:
			if dom, err = f.str(); err != nil {
				return "", 0, err
			}
		case fOpsetVersion:
			if ver, err = f.int(); err != nil {
				return "", 0, err
			}
		}
	}
	return dom, ver, nil
}

func (m *Model) parseGraph(b []byte) error {
	gf, err := fields(b)
	if err != nil {
		return err
	}
	m.gfields = gf
	m.inits = map[string]*tensor{}
	m.valueInfo = map[string]*valueInfo{}
	var fileNodes []*node
	for _, f := range gf {
		switch f.num {
		case fGraphName:
			if m.graphName, err = f.str(); err != nil {
				return err
			}
		case fGraphNode:
			mb, err := f.msg()
			if err != nil {
				return err
			}
			n, err := parseNode(mb)
			if err != nil {
				return err
			}
			n.raw = f.raw
			n.fileIdx = len(fileNodes)
			fileNodes = append(fileNodes, n)
		case fGraphInitializer:
			mb, err := f.msg()
			if err != nil {
				return err
			}
			t, err := parseTensor(mb)
			if err != nil {
				return err
			}
			if t.name == "" {
				return fmt.Errorf("%w: initializer without a name", ErrBadModel)
			}
			t.raw = f.raw
			m.inits[t.name] = t
		case fGraphInput, fGraphOutput, fGraphValueInfo:
			mb, err := f.msg()
			if err != nil {
				return err
			}
			v, err := parseValueInfo(mb)
			if err != nil {
				return err
			}
			v.raw = f.raw
			switch f.num {
			case fGraphInput:
				m.inputs = append(m.inputs, v)
			case fGraphOutput:
				m.outputs = append(m.outputs, v)
			default:
				m.valueInfo[v.name] = v
			}
		}
	}
	for _, in := range m.inputs {
		if _, ok := m.inits[in.name]; !ok && m.input == "" {
			m.input = in.name
		}
	}
	if m.input == "" {
		return fmt.Errorf("%w: the graph has no input that is not an initializer", ErrBadModel)
	}
	if len(m.outputs) == 0 {
		return fmt.Errorf("%w: the graph has no output", ErrBadModel)
	}
	return m.sortNodes(fileNodes)
}

// sortNodes orders the nodes topologically (stable: file order where the
// file is already sorted, as ONNX requires) and indexes producers and
// consumers. Undefined inputs and duplicate producers are errors.
func (m *Model) sortNodes(fileNodes []*node) error {
	defined := map[string]bool{}
	for name := range m.inits {
		defined[name] = true
	}
	for _, in := range m.inputs {
		defined[in.name] = true
	}
	prodFile := map[string]int{}
	for i, n := range fileNodes {
		for _, o := range n.outputs {
			if o == "" {
				continue
			}
			if defined[o] {
				return fmt.Errorf("%w: tensor %q is defined twice (node %q)", ErrBadModel, o, n.name)
			}
			if _, dup := prodFile[o]; dup {
				return fmt.Errorf("%w: tensor %q is produced by two nodes", ErrBadModel, o)
			}
			prodFile[o] = i
		}
	}
	// Kahn's algorithm, always taking the lowest file index that is ready.
	deps := make([]int, len(fileNodes))
	users := make([][]int, len(fileNodes))
	for i, n := range fileNodes {
		seen := map[int]bool{}
		for _, in := range n.reads() {
			if in == "" || defined[in] {
				continue
			}
			p, ok := prodFile[in]
			if !ok {
				return fmt.Errorf("%w: node %q (%s) reads %q, which nothing defines", ErrBadModel, n.name, n.opType, in)
			}
			if p == i {
				return fmt.Errorf("%w: node %q reads its own output %q", ErrBadModel, n.name, in)
			}
			if !seen[p] {
				seen[p] = true
				deps[i]++
				users[p] = append(users[p], i)
			}
		}
	}
	ready := &intHeap{}
	for i := range fileNodes {
		if deps[i] == 0 {
			ready.push(i)
		}
	}
	for ready.len() > 0 {
		i := ready.pop()
		m.nodes = append(m.nodes, fileNodes[i])
		for _, u := range users[i] {
			deps[u]--
			if deps[u] == 0 {
				ready.push(u)
			}
		}
	}
	if len(m.nodes) != len(fileNodes) {
		return fmt.Errorf("%w: the graph has a cycle", ErrBadModel)
	}
	m.producer = map[string]int{}
	m.consumers = map[string][]int{}
	for i, n := range m.nodes {
		for _, o := range n.outputs {
			if o != "" {
				m.producer[o] = i
			}
		}
		for _, in := range n.reads() {
			if in == "" {
				continue
			}
			c := m.consumers[in]
			if len(c) == 0 || c[len(c)-1] != i {
				m.consumers[in] = append(c, i)
			}
		}
	}
	for _, o := range m.outputs {
		if !m.defined(o.name) {
			return fmt.Errorf("%w: graph output %q is not computed", ErrBadModel, o.name)
		}
	}
	return nil
}

// reads returns every tensor the node reads: its inputs and the outer-scope
// tensors its subgraphs use.
func (n *node) reads() []string {
	if len(n.implicit) == 0 {
		return n.inputs
	}
	out := make([]string, 0, len(n.inputs)+len(n.implicit))
	out = append(out, n.inputs...)
	return append(out, n.implicit...)
}

// defined reports whether name is a graph input, an initializer or a node
// output.
func (m *Model) defined(name string) bool {
	if _, ok := m.producer[name]; ok {
		return true
	}
	if _, ok := m.inits[name]; ok {
		return true
	}
	for _, in := range m.inputs {
		if in.name == name {
			return true
		}
	}
	return false
}

// addIO appends a NodeProto input or output field to the node's list.
func (n *node) addIO(f field) error {
	s, err := f.str()
	if err != nil {
		return err
	}
	if f.num == fNodeInput {
		n.inputs = append(n.inputs, s)
	} else {
		n.outputs = append(n.outputs, s)
	}
	return nil
}

func parseNode(b []byte) (*node, error) {
	fs, err := fields(b)
	if err != nil {
		return nil, err
	}
	n := &node{}
	for _, f := range fs {
		switch f.num {
		case fNodeInput, fNodeOutput:
			if err := n.addIO(f); err != nil {
				return nil, err
			}
		case fNodeName:
			if n.name, err = f.str(); err != nil {
				return nil, err
			}
		case fNodeOpType:
			if n.opType, err = f.str(); err != nil {
				return nil, err
			}
		case fNodeDomain:
			if n.domain, err = f.str(); err != nil {
				return nil, err
			}
		case fNodeAttribute:
			mb, err := f.msg()
			if err != nil {
				return nil, err
			}
			a, err := parseAttr(mb)
			if err != nil {
				return nil, fmt.Errorf("node %q: %w", n.name, err)
			}
			if n.attrs == nil {
				n.attrs = map[string]*attr{}
			}
			n.attrs[a.name] = a
			for _, g := range a.graphs {
				refs, err := outerRefs(g, 0)
				if err != nil {
					return nil, fmt.Errorf("node %q attribute %q: %w", n.name, a.name, err)
				}
				n.implicit = append(n.implicit, refs...)
			}
		}
	}
	if n.opType == "" {
		return nil, fmt.Errorf("%w: node %q has no op_type", ErrBadModel, n.name)
	}
	return n, nil
}

func parseAttr(b []byte) (*attr, error) {
	fs, err := fields(b)
	if err != nil {
		return nil, err
	}
	a := &attr{raw: b}
	for _, f := range fs {
		switch f.num {
		case fAttrName:
			if a.name, err = f.str(); err != nil {
				return nil, err
			}
		case fAttrType:
			if a.typ, err = f.int(); err != nil {
				return nil, err
			}
		case fAttrF:
			fl, err := f.appendFloats(nil)
			if err != nil || len(fl) != 1 {
				return nil, fmt.Errorf("%w: attribute f", ErrBadModel)
			}
			a.f = fl[0]
		case fAttrI:
			if a.i, err = f.int(); err != nil {
				return nil, err
			}
		case fAttrS:
			if a.s, err = f.msg(); err != nil {
				return nil, err
			}
		case fAttrInts:
			if a.ints, err = f.appendInts(a.ints); err != nil {
				return nil, err
			}
		case fAttrFloats:
			if a.floats, err = f.appendFloats(a.floats); err != nil {
				return nil, err
			}
		case fAttrT:
			mb, err := f.msg()
			if err != nil {
				return nil, err
			}
			if a.t, err = parseTensor(mb); err != nil {
				return nil, err
			}
		case fAttrG, fAttrGraphs:
			mb, err := f.msg()
			if err != nil {
				return nil, err
			}
			a.graphs = append(a.graphs, mb)
		}
	}
	return a, nil
}

// maxSubgraphDepth bounds the recursion into nested subgraphs.
const maxSubgraphDepth = 16

// outerRefs returns the tensors a subgraph (GraphProto bytes) reads from
// enclosing scopes: names its nodes read that neither it nor its nested
// subgraphs define.
func outerRefs(b []byte, depth int) ([]string, error) {
	if depth > maxSubgraphDepth {
		return nil, fmt.Errorf("%w: subgraphs nested too deep", ErrBadModel)
	}
	gf, err := fields(b)
	if err != nil {
		return nil, err
	}
	local := map[string]bool{}
	var reads []string
	for _, f := range gf {
		mb, err := f.msg()
		if err != nil && (f.num == fGraphNode || f.num == fGraphInitializer || f.num == fGraphInput) {
			return nil, err
		}
		switch f.num {
		case fGraphNode:
			n, err := parseNodeShallow(mb, depth)
			if err != nil {
				return nil, err
			}
			for _, o := range n.outputs {
				local[o] = true
			}
			reads = append(reads, n.inputs...)
			reads = append(reads, n.implicit...)
		case fGraphInitializer:
			t, err := parseTensor(mb)
			if err != nil {
				return nil, err
			}
			local[t.name] = true
		case fGraphInput:
			v, err := parseValueInfo(mb)
			if err != nil {
				return nil, err
			}
			local[v.name] = true
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, r := range reads {
		if r != "" && !local[r] && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// parseNodeShallow reads a subgraph node's inputs, outputs and, recursively,
// its own subgraphs' outer references.
func parseNodeShallow(b []byte, depth int) (*node, error) {
	fs, err := fields(b)
	if err != nil {
		return nil, err
	}
	n := &node{}
	for _, f := range fs {
		switch f.num {
		case fNodeInput, fNodeOutput:
			if err := n.addIO(f); err != nil {
				return nil, err
			}
		case fNodeAttribute:
			mb, err := f.msg()
			if err != nil {
				return nil, err
			}
			afs, err := fields(mb)
			if err != nil {
				return nil, err
			}
			for _, af := range afs {
				if af.num != fAttrG && af.num != fAttrGraphs {
					continue
				}
				gb, err := af.msg()
				if err != nil {
					return nil, err
				}
				refs, err := outerRefs(gb, depth+1)
				if err != nil {
					return nil, err
				}
				n.implicit = append(n.implicit, refs...)
			}
		}
	}
	return n, nil
}

func parseTensor(b []byte) (*tensor, error) {
	fs, err := fields(b)
	if err != nil {
		return nil, err
	}
	t := &tensor{msg: b}
	for _, f := range fs {
		switch f.num {
		case fTensorDims:
			if t.dims, err = f.appendInts(t.dims); err != nil {
				return nil, err
			}
		case fTensorDataType:
			v, err := f.int()
			if err != nil {
				return nil, err
			}
			t.dtype = int32(v)
		case fTensorName:
			if t.name, err = f.str(); err != nil {
				return nil, err
			}
		case fTensorDataLoc:
			v, err := f.int()
			if err != nil {
				return nil, err
			}
			t.external = v == 1
		}
	}
	for _, d := range t.dims {
		if d < 0 {
			return nil, fmt.Errorf("%w: tensor %q has a negative dimension", ErrBadModel, t.name)
		}
	}
	return t, nil
}

func parseValueInfo(b []byte) (*valueInfo, error) {
	fs, err := fields(b)
	if err != nil {
		return nil, err
	}
	v := &valueInfo{}
	for _, f := range fs {
		switch f.num {
		case fValueName:
			if v.name, err = f.str(); err != nil {
				return nil, err
			}
		case fValueType:
			tb, err := f.msg()
			if err != nil {
				return nil, err
			}
			if err := v.parseType(tb); err != nil {
				return nil, err
			}
		}
	}
	if v.name == "" {
		return nil, fmt.Errorf("%w: value info without a name", ErrBadModel)
	}
	return v, nil
}

func (v *valueInfo) parseType(b []byte) error {
	fs, err := fields(b)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if f.num != fTypeTensor {
			continue // sequence, map, optional, sparse: not interpreted
		}
		tb, err := f.msg()
		if err != nil {
			return err
		}
		tfs, err := fields(tb)
		if err != nil {
			return err
		}
		for _, tf := range tfs {
			switch tf.num {
			case fTensorTypeElem:
				e, err := tf.int()
				if err != nil {
					return err
				}
				v.elem = int32(e)
			case fTensorTypeShape:
				sb, err := tf.msg()
				if err != nil {
					return err
				}
				sfs, err := fields(sb)
				if err != nil {
					return err
				}
				v.hasShape = true
				for _, sf := range sfs {
					if sf.num != fShapeDim {
						continue
					}
					db, err := sf.msg()
					if err != nil {
						return err
					}
					dfs, err := fields(db)
					if err != nil {
						return err
					}
					d := dim{value: -1}
					for _, df := range dfs {
						switch df.num {
						case fDimValue:
							if d.value, err = df.int(); err != nil {
								return err
							}
							if d.value < 0 {
								d.value = -1
							}
						case fDimParam:
							if d.param, err = df.str(); err != nil {
								return err
							}
						}
					}
					v.dims = append(v.dims, d)
				}
			}
		}
	}
	return nil
}

// Input returns the name of the model's (first) graph input that is not an
// initializer: the image tensor.
func (m *Model) Input() string { return m.input }

// Input is what the graph declares about one of its inputs.
type Input struct {
	// Name is the input's tensor name.
	Name string
	// ElemType is the ONNX element type (TensorProto.DataType: 1 float,
	// 2 uint8, 10 float16, ...); 0 when the graph declares none or the
	// input is not a tensor.
	ElemType int32
	// HasShape is false when the graph declares no shape (rank unknown).
	HasShape bool
	// Dims are the declared dimensions, -1 where the dimension is symbolic
	// or unknown.
	Dims []int64
	// Params are the symbolic names of the dimensions ("batch"), "" where
	// a dimension is fixed or unnamed.
	Params []string
}

// Inputs returns the graph inputs that are not initializers, in file order:
// what a caller must feed. Initializers that an exporter also lists as
// graph inputs (keep_initializers_as_inputs) are left out, since they have
// a value.
func (m *Model) Inputs() []Input {
	var out []Input
	for _, in := range m.inputs {
		if _, ok := m.inits[in.name]; ok {
			continue
		}
		x := Input{Name: in.name, ElemType: in.elem, HasShape: in.hasShape}
		for _, d := range in.dims {
			x.Dims = append(x.Dims, d.value)
			x.Params = append(x.Params, d.param)
		}
		out = append(out, x)
	}
	return out
}

// ElemTypeName returns the ONNX name of an element type ("float",
// "uint8"), or "type N" for one it does not know.
func ElemTypeName(t int32) string {
	switch t {
	case dtUndefined:
		return "undefined"
	case dtFloat:
		return "float"
	case dtUint8:
		return "uint8"
	case dtInt8:
		return "int8"
	case 4:
		return "uint16"
	case 5:
		return "int16"
	case dtInt32:
		return "int32"
	case dtInt64:
		return "int64"
	case 8:
		return "string"
	case dtBool:
		return "bool"
	case dtFloat16:
		return "float16"
	case dtDouble:
		return "double"
	case 16:
		return "bfloat16"
	}
	return fmt.Sprintf("type %d", t)
}

// ElemFloat is the ONNX element type of float32 tensors.
const ElemFloat int32 = dtFloat

// Output returns the name of the model's first graph output.
func (m *Model) Output() string { return m.outputs[0].name }

// Outputs returns the names of all graph outputs in file order.
func (m *Model) Outputs() []string {
	out := make([]string, len(m.outputs))
	for i, o := range m.outputs {
		out[i] = o.name
	}
	return out
}

// NodeOutputs returns every tensor a node produces, in topological order.
func (m *Model) NodeOutputs() []string {
	var out []string
	for _, n := range m.nodes {
		for _, o := range n.outputs {
			if o != "" {
				out = append(out, o)
			}
		}
	}
	return out
}

// OpsetVersion returns the version of the default ONNX operator set the
// model imports (0 when it imports none).
func (m *Model) OpsetVersion() int64 { return m.opset }

// Producer returns the op type and node name of the node producing tensor,
// and false when no node produces it.
func (m *Model) Producer(tensor string) (opType, nodeName string, ok bool) {
	i, ok := m.producer[tensor]
	if !ok {
		return "", "", false
	}
	return m.nodes[i].opType, m.nodes[i].name, true
}

// intHeap is a min-heap of ints.
type intHeap struct{ a []int }

func (h *intHeap) len() int { return len(h.a) }

func (h *intHeap) push(x int) {
	h.a = append(h.a, x)
	i := len(h.a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h.a[p] <= h.a[i] {
			break
		}
		h.a[p], h.a[i] = h.a[i], h.a[p]
		i = p
	}
}

func (h *intHeap) pop() int {
	top := h.a[0]
	last := len(h.a) - 1
	h.a[0] = h.a[last]
	h.a = h.a[:last]
	i := 0
	for {
		l, r, s := 2*i+1, 2*i+2, i
		if l < len(h.a) && h.a[l] < h.a[s] {
			s = l
		}
		if r < len(h.a) && h.a[r] < h.a[s] {
			s = r
		}
		if s == i {
			return top
		}
		h.a[i], h.a[s] = h.a[s], h.a[i]
		i = s
	}
}
