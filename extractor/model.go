package extractor

// Model loading: the file's digest, its layers (graph/), and the per-sample
// shape of every layer, known before any image is run.

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/graph"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/featurefs/featurefs/extractor/spec"
)

// model is one loaded model: what every side knows of it (Model, which
// Service.Model returns) and what running it needs. Read-only after New.
type model struct {
	Model

	g        *graph.Model
	file     *os.File // what g reads its weights from (detach); nil when it holds them
	weight   int64    // bytes of the ONNX file
	actBytes []int64  // per layer: per-sample bytes of all tensors up to it (upper bound of activation memory)

	// bufs holds one sample's input buffers, shared by the model's image
	// lanes and by the versions that replace it (Reload keeps the input
	// shape): a lane never keeps a replaced version alive through it.
	bufs *floatPool
	// gen orders loads: a lane runs on the newest version it has seen of
	// its layer's digest (laneLocked).
	gen uint64

	pubOnce sync.Once
	pub     *Model // public's copy

	spec ModelSpec // what it was loaded from (Reload loads it again)
}

// LayersTable loads the model at path under name as `featurefs layers`
// does (a CPU service of one worker; cfg gives the ONNX Runtime library and
// the logger) and returns its Table. docs/LAYERS.md is generated from it.
func LayersTable(name, path string, cfg Config) (string, error) {
	cfg.Device = "cpu"
	cfg.Workers = 1
	svc, err := New(cfg, []ModelSpec{{Name: name, Path: path}})
	if err != nil {
		return "", err
	}
	defer svc.Close()
	m, ok := svc.Model(name)
	if !ok {
		return "", fmt.Errorf("model %s: not loaded", name)
	}
	return m.Table(), nil
}

// openSession opens a session of m pruned to compute layer to: from the
// graph input (from ""), or from the tensor from (split execution, its
// per-sample shape fromShape). On the CPU ONNX Runtime reads the pruned
// model from a pipe as it is written (newORTSessionPiped), so the process
// never holds it whole; on a GPU (where TensorRT keys its engine cache by
// the model's path) and for a model with external data (read relative to
// the model's path), from the bytes, as before.
func (m *model) openSession(from string, to Layer, fromShape []int64, sc sessionConfig) (*ortSession, error) {
	what, input, inShape := fmt.Sprintf("prune at %s (%s)", to.Name, to.Tensor), m.Input, m.InputShape
	if from != "" {
		what, input, inShape = fmt.Sprintf("prune %s..%s", from, to.Name), from, fromShape
	}
	if !sc.gpu && pipeModels() && !m.g.ExternalData() {
		sess, err := newORTSessionPiped(func(w io.Writer) error {
			err := m.g.PruneFromTo(w, from, to.Tensor)
			if err != nil && !errors.Is(err, syscall.EPIPE) {
				return m.pruneError(what, err)
			}
			return err
		}, input, to.Tensor, inShape, to.Shape, m.FixedBatch, sc)
		return sess, err
	}
	b, err := m.g.PruneFrom(from, to.Tensor)
	if err != nil {
		return nil, m.pruneError(what, err)
	}
	return newORTSession(b, input, to.Tensor, inShape, to.Shape, m.FixedBatch, sc)
}

// pruneError wraps an error of pruning m (what names the pruned model): a
// changed file's as a replaced version's, which a reload of the file
// serves.
func (m *model) pruneError(what string, err error) error {
	if errors.Is(err, graph.ErrSourceChanged) {
		return fmt.Errorf("model %s (%.12s): %s: %w since it was loaded: %w", m.Name, m.Digest, what, ErrModelReplaced, err)
	}
	return fmt.Errorf("model %s: %s: %w", m.Name, what, err)
}

// detach lets go of the bytes m was parsed from (the whole file, nearly
// all weights: 98 MiB for ResNet-50, in the Go heap for as long as the
// version is loaded): its graph reads the weights of each pruned model
// back from f, the file they were read from, checked against the hashes
// its digests cover (graph.Model.Detach). f is the open file, not the
// path, so a version whose file was replaced by a rename still opens
// sessions; one rewritten in place fails them (pruned). m keeps f open
// for its life; the os.File's cleanup closes it once m is garbage.
func (m *model) detach(f *os.File) error {
	g, err := m.g.Detach(f)
	if err != nil {
		return fmt.Errorf("model %s: %w", m.Name, err)
	}
	m.g, m.file = g, f
	return nil
}

// loadModel reads ms.Path and finds its layers, their per-sample shapes and
// cumulative FLOPs: from the graph's own shape inference, and from ONNX
// Runtime's output info on one pruned model exposing the tensors inference
// leaves unknown (goShapes), if any. This is the one path that gives the
// figures of `featurefs layers`, the layers file of a mount and
// docs/LAYERS.md (TestLayerDocs). ONNX Runtime must be initialized.
// public returns the model's description handed out of the service
// (Service.Model, Models, Reload...): a copy of m.Model made once, after
// m is published, in an allocation of its own. A pointer into m itself
// (&m.Model) would keep the whole version alive, its file and parsed
// graph (100 MB for ResNet-50), as long as any holder of the description
// does: a mount's kernel nodes and views of a replaced version did, and
// every reload added a version to the heap.
func (m *model) public() *Model {
	m.pubOnce.Do(func() {
		cp := m.Model
		m.pub = &cp
	})
	return m.pub
}

// loads numbers the models loaded (model.gen).
var loads atomic.Uint64

// MaxModelFileBytes is the largest model file read: an ONNX model is one
// protobuf message, which cannot exceed 2 GiB - 1 bytes; weights beyond
// that are external data, in files of their own that this does not count
// (ONNX Runtime reads them).
const MaxModelFileBytes = 1<<31 - 1

// ErrModelTooLarge is matched by the error for a model file larger than
// MaxModelFileBytes.
var ErrModelTooLarge = errors.New("larger than the 2 GiB an ONNX model file can be (protobuf's limit; external data files are not counted)")

// readModelFile reads the model file at path with memory bounded by its
// size: a regular file only, refused by its size (fstat, before any read)
// over MaxModelFileBytes, and read into one buffer of that size (a file
// that grows meanwhile is read to the size it had; its digest and parse
// see one snapshot). A sparse 3 GB file replacing a model used to be read
// whole, twice on a reload: 6.38 GB resident for a minute.
func readModelFile(path string) ([]byte, error) {
	data, err := spec.ReadRegular(path, MaxModelFileBytes)
	if errors.Is(err, spec.ErrFileTooLarge) {
		return nil, fmt.Errorf("%w: %w", err, ErrModelTooLarge)
	}
	return data, err
}

// openModelFile is readModelFile that also returns the file, open (for
// model.detach).
func openModelFile(path string) (*os.File, []byte, error) {
	f, data, err := spec.OpenRegular(path, MaxModelFileBytes)
	if errors.Is(err, spec.ErrFileTooLarge) {
		return nil, nil, fmt.Errorf("%w: %w", err, ErrModelTooLarge)
	}
	return f, data, err
}

func loadModel(ms ModelSpec) (*model, error) {
	f, data, err := openModelFile(ms.Path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", ms.Name, err)
	}
	return loadModelFile(ms, f, data)
}

// loadModelFile is loadModelData of the bytes read from f, detached from
// them (model.detach); f is closed unless the model keeps it.
func loadModelFile(ms ModelSpec, f *os.File, data []byte) (*model, error) {
	m, err := loadModelData(ms, data)
	if err == nil {
		err = m.detach(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

// loadModelData is loadModel of the file's bytes, read by readModelFile.
func loadModelData(ms ModelSpec, data []byte) (*model, error) {
	if ms.Name == "" {
		return nil, fmt.Errorf("model %s: empty name", ms.Path)
	}
	sum := graph.Sum256(data)
	m := &model{Model: Model{
		Name:       ms.Name,
		Path:       ms.Path,
		Digest:     hex.EncodeToString(sum[:]),
		Aliases:    map[string]string{},
		Preprocess: DefaultPreprocess(),
	}, weight: int64(len(data)), bufs: &floatPool{}, gen: loads.Add(1)}
	if ms.Preprocess != nil {
		m.Preprocess = *ms.Preprocess
	}
	if err := m.Preprocess.Validate(); err != nil {
		return nil, fmt.Errorf("model %s: preprocess: %w", ms.Name, err)
	}
	for k, v := range ms.Aliases {
		m.Aliases[k] = v
	}
	g, err := graph.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("model %s (%s): %w", ms.Name, ms.Path, err)
	}
	m.g = g
	if m.Input, m.FixedBatch, err = checkInput(g, m.Preprocess); err != nil {
		return nil, fmt.Errorf("model %s (%s): %w", ms.Name, ms.Path, err)
	}
	gl, err := g.Layers()
	if err != nil {
		return nil, fmt.Errorf("model %s: layers: %w", ms.Name, err)
	}
	if len(gl) == 0 {
		return nil, fmt.Errorf("model %s: no layers found", ms.Name)
	}

	nodeOuts := g.NodeOutputs()
	shapes, missing := goShapes(g, m.Input, gl, nodeOuts, m.FixedBatch)
	if len(missing) > 0 {
		ortS, err := ortShapes(g, m.Input, missing)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", ms.Name, err)
		}
		for t, s := range ortS {
			shapes[t] = s
		}
	}
	m.InputShape = shapes[m.Input]
	if len(m.InputShape) != 3 || m.InputShape[0] != 3 || m.InputShape[1] != int64(m.Preprocess.Crop) || m.InputShape[2] != int64(m.Preprocess.Crop) {
		return nil, fmt.Errorf("model %s: input %s is %s per sample but preprocessing makes 3x%dx%d", ms.Name, m.Input, api.ShapeString(m.InputShape), m.Preprocess.Crop, m.Preprocess.Crop)
	}
	flops := g.CumulativeFLOPs(shapes)

	// Per-sample activation bytes up to each layer: the sum of every node
	// output before it in topological order (an upper bound).
	elems := g.SampleElems()
	pos := map[string]int{}
	for i, t := range nodeOuts {
		pos[t] = i
	}
	prefix := make([]int64, len(nodeOuts)+1)
	for i, t := range nodeOuts {
		n, ok := elems[t]
		if !ok {
			n = shapeElems(shapes[t])
		}
		prefix[i+1] = prefix[i] + n*4
	}

	tensors := make([]string, len(gl))
	for i, l := range gl {
		tensors[i] = l.Tensor
	}
	digests, err := layerDigests(g, m.Digest, tensors, m.Preprocess)
	if err != nil {
		return nil, fmt.Errorf("model %s: layer digests: %w", ms.Name, err)
	}
	for i, l := range gl {
		s, ok := shapes[l.Tensor]
		if !ok {
			return nil, fmt.Errorf("model %s: layer %d (%s): no static per-sample shape from ONNX Runtime", ms.Name, i, l.Tensor)
		}
		if l.Index != i {
			return nil, fmt.Errorf("model %s: layer %d has index %d", ms.Name, i, l.Index)
		}
		m.Layers = append(m.Layers, Layer{
			Index:     i,
			Name:      spec.LayerName(i),
			Tensor:    l.Tensor,
			Shape:     s,
			Bytes:     shapeElems(s) * 4,
			CumGFLOPs: flops[l.Tensor] / 1e9,
			Digest:    digests[i],
		})
		act := int64(0)
		if p, ok := pos[l.Tensor]; ok {
			act = prefix[p+1]
		}
		m.actBytes = append(m.actBytes, act+shapeElems(m.InputShape)*4)
	}
	for a, t := range m.Aliases {
		if _, ok := m.Lookup(a); !ok {
			return nil, fmt.Errorf("model %s: alias %q names %q, which is no layer", ms.Name, a, t)
		}
	}
	return m, nil
}

// goShapes returns the per-sample shapes the graph's own shape inference
// gives, and the tensors it leaves to ONNX Runtime: the input and layer
// tensors without a per-sample shape, and the node outputs whose elements
// per sample it does not know (FLOPs and activation bytes need only
// those, whatever axis holds the batch). Where the graph fixes the batch,
// inference cannot tell the batch axis: every layer is left to ONNX
// Runtime. For the models the tests export nothing is left, so loading
// builds no ONNX Runtime session (the session exposing every tensor, and
// the pruned copy of the model it needs, were most of a ResNet-50 mount's
// start-up).
func goShapes(g *graph.Model, input string, gl []graph.Layer, nodeOuts []string, fixedBatch int) (map[string][]int64, []string) {
	shapes := map[string][]int64{}
	if fixedBatch == 0 {
		if s, err := g.Shapes(); err == nil {
			shapes = s
		}
	}
	elems := g.SampleElems()
	var missing []string
	seen := map[string]bool{}
	need := func(t string) {
		if !seen[t] {
			seen[t] = true
			missing = append(missing, t)
		}
	}
	if _, ok := shapes[input]; !ok {
		need(input)
	}
	for _, l := range gl {
		if _, ok := shapes[l.Tensor]; !ok {
			need(l.Tensor)
		}
	}
	for _, t := range nodeOuts {
		if _, ok := elems[t]; !ok {
			need(t)
		}
	}
	return shapes, missing
}

// ortShapes returns the per-sample shapes ONNX Runtime reports for the
// graph input and the given tensors (their first axis taken as the batch),
// from a session of the model pruned to expose them: the fallback where the
// graph's shape inference does not cover an operator or the graph fixes
// the batch.
func ortShapes(g *graph.Model, input string, tensors []string) (map[string][]int64, error) {
	var outs []string
	for _, t := range tensors {
		if t != input {
			outs = append(outs, t)
		}
	}
	if len(outs) == 0 {
		outs = g.Outputs()[:1]
	}
	all, err := g.Prune(outs...)
	if err != nil {
		return nil, fmt.Errorf("prune for shapes: %w", err)
	}
	ins, outInfo, err := ort.GetInputOutputInfoWithONNXData(all)
	if err != nil {
		return nil, fmt.Errorf("onnx runtime shape info: %w", err)
	}
	shapes := map[string][]int64{}
	for _, in := range ins {
		if in.Name == input {
			s, ok := perSample(in.Dimensions)
			if !ok {
				return nil, fmt.Errorf("input %s has shape %v; want [batch,C,H,W] with static C,H,W", in.Name, in.Dimensions)
			}
			shapes[in.Name] = s
		}
	}
	if shapes[input] == nil {
		return nil, fmt.Errorf("input %q not found by ONNX Runtime", input)
	}
	for _, o := range outInfo {
		if o.OrtValueType != ort.ONNXTypeTensor {
			continue
		}
		if s, ok := perSample(o.Dimensions); ok {
			shapes[o.Name] = s
		}
	}
	return shapes, nil
}

// checkInput returns the one input the preprocessing feeds and the batch
// size the graph fixes (0 when symbolic), or an error saying in one line why
// the graph's inputs cannot be fed: featurefs feeds exactly one float input
// [batch,3,crop,crop] (NCHW RGB), batch either symbolic or a fixed number.
// Initializers the exporter also lists as graph inputs do not count.
func checkInput(g *graph.Model, p Preprocess) (string, int, error) {
	want := fmt.Sprintf("a float input [batch,3,%d,%d]", p.Crop, p.Crop)
	ins := g.Inputs()
	if len(ins) != 1 {
		descs := make([]string, len(ins))
		for i, in := range ins {
			descs[i] = in.Name + " " + inputShape(in)
		}
		return "", 0, fmt.Errorf("the graph has %d inputs (%s); featurefs feeds exactly one, %s", len(ins), strings.Join(descs, ", "), want)
	}
	in := ins[0]
	switch {
	case in.ElemType != graph.ElemFloat:
		return "", 0, fmt.Errorf("input %s is %s %s; featurefs feeds %s (export the model with a float32 input)", in.Name, graph.ElemTypeName(in.ElemType), inputShape(in), want)
	case !in.HasShape:
		return "", 0, fmt.Errorf("input %s declares no shape; featurefs feeds %s", in.Name, want)
	case len(in.Dims) != 4:
		return "", 0, fmt.Errorf("input %s has shape %s (rank %d); featurefs feeds %s (NCHW images)", in.Name, inputShape(in), len(in.Dims), want)
	case in.Dims[1] != 3:
		return "", 0, fmt.Errorf("input %s has shape %s, with %s channels; the preprocessing makes 3 (RGB): featurefs feeds %s", in.Name, inputShape(in), dimString(in, 1), want)
	case in.Dims[2] < 0 || in.Dims[3] < 0:
		return "", 0, fmt.Errorf("input %s has shape %s, with a symbolic height or width; featurefs needs them fixed at the crop size %d: export the model with a fixed input size", in.Name, inputShape(in), p.Crop)
	case in.Dims[2] != int64(p.Crop) || in.Dims[3] != int64(p.Crop):
		return "", 0, fmt.Errorf("input %s has shape %s but the preprocessing crops %dx%d: set the model's preprocess crop (and resize) in --config, or export the model at %d", in.Name, inputShape(in), p.Crop, p.Crop, p.Crop)
	case in.Dims[0] == 0:
		return "", 0, fmt.Errorf("input %s has shape %s, with a batch dimension of 0; featurefs feeds %s", in.Name, inputShape(in), want)
	}
	return in.Name, int(max(in.Dims[0], 0)), nil
}

// inputShape formats a graph input's declared shape: "[batch,3,224,224]",
// "?" for an unknown dimension.
func inputShape(in graph.Input) string {
	if !in.HasShape {
		return "[?]"
	}
	parts := make([]string, len(in.Dims))
	for i := range in.Dims {
		parts[i] = dimString(in, i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func dimString(in graph.Input, i int) string {
	switch {
	case in.Dims[i] >= 0:
		return strconv.FormatInt(in.Dims[i], 10)
	case in.Params[i] != "":
		return in.Params[i]
	}
	return "?"
}

// perSample drops the batch axis of dims and reports whether the rest is
// static.
func perSample(dims ort.Shape) ([]int64, bool) {
	if len(dims) < 1 {
		return nil, false
	}
	s := make([]int64, len(dims)-1)
	for i, d := range dims[1:] {
		if d <= 0 {
			return nil, false
		}
		s[i] = d
	}
	return s, true
}

func shapeElems(s []int64) int64 {
	if s == nil {
		return 0
	}
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}
