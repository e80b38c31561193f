package extractor

// GPU sessions run every partial batch padded up to a power of two (each
// new input shape costs cuDNN an algorithm search); the padding must not
// change any real output. Checked on the CPU with the real ONNX Runtime.

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

func TestPow2PaddingKeepsOutputs(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	m, err := loadModel(ModelSpec{Name: "tiny", Path: testenv.OddModel(t, "tiny")})
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layers[len(m.Layers)-1]
	b, err := m.g.Prune(l.Tensor)
	if err != nil {
		t.Fatal(err)
	}
	open := func(gpu bool) *ortSession {
		s, err := newORTSession(b, m.Input, l.Tensor, m.InputShape, l.Shape, 0, sessionConfig{threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.close() })
		s.pow2 = gpu // a CPU session with the GPU's padding
		return s
	}
	plain, padded := open(false), open(true)
	if s, err := newORTSession(b, m.Input, l.Tensor, m.InputShape, l.Shape, 0, sessionConfig{threads: 1}); err != nil || s.pow2 {
		t.Fatalf("a CPU session pads its batches (%v)", err)
	} else {
		s.close()
	}
	ie, oe := m.InputElements(), int(l.Elements())
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 5, 8} {
		p := 1
		for p < n {
			p *= 2
		}
		in := make([]float32, p*ie) // a scheduler buffer: room for the padding
		for i := range n * ie {
			in[i] = rng.Float32()*2 - 1
		}
		for i := n * ie; i < len(in); i++ {
			in[i] = 7 // stale data from an earlier batch
		}
		want := make([]float32, n*oe)
		if err := plain.run(n, append([]float32(nil), in[:n*ie]...), want); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, p*oe)
		if err := padded.run(n, in[:n*ie], got[:n*oe]); err != nil {
			t.Fatal(err)
		}
		// Exact-size buffers: padded in new ones.
		got2 := make([]float32, n*oe)
		if err := padded.run(n, append([]float32(nil), in[:n*ie]...), got2); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-5 || math.Abs(float64(got2[i]-want[i])) > 1e-5 {
				t.Fatalf("batch %d padded to %d: output %d = %g / %g, want %g", n, p, i, got[i], got2[i], want[i])
			}
		}
		for i := n * ie; i < p*ie; i++ {
			if in[i] != 0 {
				t.Fatalf("batch %d: padding input %d = %g, want 0 (stale data run through the model)", n, i, in[i])
			}
		}
	}
}
