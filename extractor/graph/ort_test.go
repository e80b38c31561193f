package graph

// ONNX Runtime helpers: the reference the tests check pruned models and
// inferred shapes against.

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/featurefs/featurefs/test/testenv"
)

var ortOnce struct {
	sync.Once
	err error
}

// initORT loads libonnxruntime once per test binary.
func initORT(t testing.TB) {
	t.Helper()
	lib := testenv.ORTLib(t)
	ortOnce.Do(func() {
		ort.SetSharedLibraryPath(lib)
		ortOnce.err = ort.InitializeEnvironment()
	})
	if ortOnce.err != nil {
		t.Fatalf("ONNX Runtime: %v", ortOnce.err)
	}
}

// ortOut is one output of a run.
type ortOut struct {
	shape []int64
	data  []float32
}

// runORT runs an encoded model on one float input and returns its outputs
// in graph order.
func runORT(t testing.TB, model []byte, input string, shape []int64, data []float32) map[string]ortOut {
	t.Helper()
	initORT(t)
	_, outs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		t.Fatalf("ORT rejects the model: %v", err)
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.Name
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	if err := opts.SetIntraOpNumThreads(2); err != nil {
		t.Fatal(err)
	}
	sess, err := ort.NewDynamicAdvancedSessionWithONNXData(model, []string{input}, names, opts)
	if err != nil {
		t.Fatalf("ORT session: %v", err)
	}
	defer sess.Destroy()
	in, err := ort.NewTensor(ort.NewShape(shape...), data)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Destroy()
	values := make([]ort.Value, len(names))
	if err := sess.Run([]ort.Value{in}, values); err != nil {
		t.Fatalf("ORT run: %v", err)
	}
	res := map[string]ortOut{}
	for i, v := range values {
		ft, ok := v.(*ort.Tensor[float32])
		if !ok {
			v.Destroy()
			t.Fatalf("output %q is %T, want a float32 tensor", names[i], v)
		}
		res[names[i]] = ortOut{shape: slices.Clone([]int64(ft.GetShape())), data: slices.Clone(ft.GetData())}
		v.Destroy()
	}
	return res
}

// randomInput returns seeded standard-normal data of the given shape.
func randomInput(seed uint64, shape ...int64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, numel(shape))
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// maxAbsDiff returns the largest elementwise difference and fails on a
// length mismatch.
func maxAbsDiff(t testing.TB, a, b []float32) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("lengths differ: %d vs %d", len(a), len(b))
	}
	var m float64
	for i := range a {
		d := float64(a[i] - b[i])
		if d < 0 {
			d = -d
		}
		if d > m {
			m = d
		}
	}
	return m
}

// ioInfo is a model input or output as ONNX Runtime declares it.
type ioInfo struct {
	name string
	dims []int64
}

// ortInfo returns the inputs and outputs ORT reads from an encoded model.
func ortInfo(model []byte) (ins, outs []ioInfo, err error) {
	i, o, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, nil, err
	}
	for _, x := range i {
		ins = append(ins, ioInfo{x.Name, slices.Clone([]int64(x.Dimensions))})
	}
	for _, x := range o {
		outs = append(outs, ioInfo{x.Name, slices.Clone([]int64(x.Dimensions))})
	}
	return ins, outs, nil
}
