package graph

import (
	"crypto/sha256"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// digestCNN is smallCNN with every name prefixed by p (tensors, nodes,
// initializers, the graph input and output), the branch conv's weight w2,
// the classifier's weight fcw, the first conv's pads, and the nodes in the
// order given by order (indices into the topological list).
func digestCNN(p string, w2, fcw []float32, pad int64, order []int) []byte {
	g := tGraph{
		inits: [][]byte{
			encFloatTensor(p+"w1", []int64{4, 2, 3, 3}, ones(72)),
			encFloatTensor(p+"w2", []int64{4, 4, 1, 1}, w2),
			encFloatTensor(p+"fcw", []int64{3, 4}, fcw),
			encFloatTensor(p+"fcb", []int64{3}, ones(3)),
			encInt64Tensor(p+"shape", []int64{2}, []int64{0, -1}),
		},
		inputs:  [][]byte{encVI(p+"x", -1, 2, 8, 8)},
		outputs: [][]byte{encVI(p+"y", -1, 3)},
	}
	nodes := [][]byte{
		encNode("Conv", p+"c1", []string{p + "x", p + "w1"}, []string{p + "c1o"}, attrInts("pads", pad, pad, pad, pad)),
		encNode("Relu", p+"r1", []string{p + "c1o"}, []string{p + "r1o"}),
		encNode("Conv", p+"c2", []string{p + "r1o", p + "w2"}, []string{p + "c2o"}),
		encNode("Add", p+"add", []string{p + "c2o", p + "r1o"}, []string{p + "addo"}),
		encNode("Relu", p+"r2", []string{p + "addo"}, []string{p + "r2o"}),
		encNode("MaxPool", p+"mp", []string{p + "r2o"}, []string{p + "mpo"}, attrInts("kernel_shape", 2, 2), attrInts("strides", 2, 2)),
		encNode("GlobalAveragePool", p+"gap", []string{p + "mpo"}, []string{p + "gapo"}),
		encNode("Reshape", p+"flat", []string{p + "gapo", p + "shape"}, []string{p + "flato"}),
		encNode("Gemm", p+"fc", []string{p + "flato", p + "fcw", p + "fcb"}, []string{p + "y"}, attrInt("transB", 1)),
	}
	for _, i := range order {
		g.nodes = append(g.nodes, nodes[i])
	}
	return encModel(g)
}

var (
	digestTopo     = []int{0, 1, 2, 3, 4, 5, 6, 7, 8}
	digestShuffled = []int{8, 3, 0, 6, 1, 4, 2, 7, 5}
	// digestTensors are smallCNN's tensors in topological order: r1o and
	// r2o, mpo, gapo, flato and y are its cut points.
	digestTensors = []string{"c1o", "r1o", "c2o", "addo", "r2o", "mpo", "gapo", "flato", "y"}
)

func digestsOf(t *testing.T, model []byte, prefix string) [][sha256.Size]byte {
	t.Helper()
	m, err := Parse(model)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(digestTensors))
	for i, n := range digestTensors {
		names[i] = prefix + n
	}
	d, err := m.Digests(names...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A re-export of the same computation keeps every digest, whatever its
// names and the order its nodes are written in; a change of weights or
// attributes changes the digests of the tensors that depend on it and
// only those.
func TestDigestsFollowTheComputation(t *testing.T) {
	base := digestsOf(t, digestCNN("", ones(16), ones(12), 1, digestTopo), "")
	if slices.Contains(base[1:], base[0]) {
		t.Fatal("two tensors share a digest")
	}
	same := map[string][]byte{
		"renamed":             digestCNN("v2/", ones(16), ones(12), 1, digestTopo),
		"nodes written apart": digestCNN("", ones(16), ones(12), 1, digestShuffled),
	}
	prefixes := map[string]string{"renamed": "v2/"}
	for what, model := range same {
		got := digestsOf(t, model, prefixes[what])
		for i := range got {
			if got[i] != base[i] {
				t.Errorf("%s: %s's digest changed", what, digestTensors[i])
			}
		}
	}
	w2 := ones(16)
	w2[3] = 2
	fcw := ones(12)
	fcw[0] = 0.5
	changed := []struct {
		what  string
		model []byte
		keep  int // the tensors before this index in digestTensors keep their digests
	}{
		{"classifier weights", digestCNN("", ones(16), fcw, 1, digestTopo), 8},
		{"branch conv weights", digestCNN("", w2, ones(12), 1, digestTopo), 2},
		{"first conv's pads", digestCNN("", ones(16), ones(12), 0, digestTopo), 0},
	}
	for _, c := range changed {
		got := digestsOf(t, c.model, "")
		for i, n := range digestTensors {
			if kept := got[i] == base[i]; kept != (i < c.keep) {
				t.Errorf("%s: %s keeps its digest: %v", c.what, n, kept)
			}
		}
	}
}

// A tensor the graph does not have is an error; so is one computed from
// external data, whose bytes the digest cannot cover.
func TestDigestsRefuse(t *testing.T) {
	m, err := Parse(smallCNN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Digests("nope"); !errors.Is(err, ErrUnknownTensor) {
		t.Errorf("unknown tensor: %v", err)
	}
	ext := appendVarint(encFloatTensor("w", []int64{2}, nil), fTensorDataLoc, 1)
	g := tGraph{
		inits:   [][]byte{ext},
		inputs:  [][]byte{encVI("x", -1, 2)},
		outputs: [][]byte{encVI("z", -1, 2)},
	}
	g.nodes = [][]byte{
		encNode("Relu", "r", []string{"x"}, []string{"r"}),
		encNode("Mul", "m", []string{"r", "w"}, []string{"z"}),
	}
	em, err := Parse(encModel(g))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := em.Digests("r"); err != nil {
		t.Errorf("r does not read the external tensor: %v", err)
	}
	if _, err := em.Digests("z"); !errors.Is(err, ErrExternalData) {
		t.Errorf("z reads external data: %v", err)
	}
}

// BenchmarkDigestsResNet50 compares the digests of ResNet-50's 20 layers
// (one pass over the graph) with the SHA-256 of the whole ONNX file, which
// identified every layer's features before: both read every initializer
// byte once.
func BenchmarkDigestsResNet50(b *testing.B) {
	data, err := os.ReadFile(testenv.Model(b, "resnet50"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	ls, err := m.Layers()
	if err != nil {
		b.Fatal(err)
	}
	var tensors []string
	for _, l := range ls {
		tensors = append(tensors, l.Tensor)
	}
	b.Run("file-sha256", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sha256.Sum256(data)
		}
	})
	b.Run("layer-digests", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := m.Digests(tensors...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
