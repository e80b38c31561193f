package extractor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestPipedSessionEqualsBytes: a session ONNX Runtime reads from a pipe
// (newORTSessionPiped, what a CPU session opens with: model.openSession)
// computes what one opened from the model's bytes does, bit for bit; and a
// writer that fails, after half the model or after a prefix that parses on
// its own (the model without its graph), gives its error, never a session.
func TestPipedSessionEqualsBytes(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	m, err := loadModel(ModelSpec{Name: "resnet18", Path: testenv.Model(t, "resnet18")})
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layers[len(m.Layers)/2]
	b, err := m.g.Prune(l.Tensor)
	if err != nil {
		t.Fatal(err)
	}
	sc := sessionConfig{threads: 1}
	plain, err := newORTSession(b, m.Input, l.Tensor, m.InputShape, l.Shape, 0, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.close()
	piped, err := m.openSession("", l, nil, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer piped.close()
	ie, oe := m.InputElements(), int(l.Elements())
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([]float32, 2*ie)
	for i := range in {
		in[i] = rng.Float32()*2 - 1
	}
	want, got := make([]float32, 2*oe), make([]float32, 2*oe)
	if err := plain.run(2, in, want); err != nil {
		t.Fatal(err)
	}
	if err := piped.run(2, in, got); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s output %d: piped %g, from bytes %g", l.Name, i, got[i], want[i])
		}
	}

	boom := errors.New("the source changed")
	graphAt := bytes.Index(b, []byte(l.Tensor)) // inside the graph field: what precedes it parses
	for name, cut := range map[string]int{"half": len(b) / 2, "a prefix that parses": 0, "before the graph's end": graphAt} {
		s, err := newORTSessionPiped(func(w io.Writer) error {
			if _, err := w.Write(b[:cut]); err != nil {
				return err
			}
			return boom
		}, m.Input, l.Tensor, m.InputShape, l.Shape, 0, sc)
		if s != nil {
			s.close()
		}
		if !errors.Is(err, boom) || s != nil {
			t.Errorf("a writer failing after %s (%d of %d bytes): session %v, error %v; want the writer's", name, cut, len(b), s != nil, err)
		}
	}
}

// TestMemoryLimitClosesIdleSessions: a service with a memory target its
// sessions cannot all fit in (Config.MemoryLimit, here 1 MiB: every
// opening presses) closes the idle session of one layer before it opens
// another's, and says so in its stats; without a target both stay open.
func TestMemoryLimitClosesIdleSessions(t *testing.T) {
	img := testJPEG(t, 64, 48)
	for _, limit := range []int64{0, 1 << 20} {
		svc := newCPUService(t, func(c *Config) { c.MemoryLimit = limit }, ModelSpec{Name: "resnet18", Path: testenv.Model(t, "resnet18")})
		for _, layer := range []int{3, 6} {
			if _, err := svc.Extract(context.Background(), Request{Model: "resnet18", Layer: layer, Key: "a.jpg", Fetch: fetchOf(img)}); err != nil {
				t.Fatal(err)
			}
		}
		st := svc.Stats()
		wantLive, wantClosed := 2, int64(0)
		if limit > 0 {
			wantLive, wantClosed = 1, 1
		}
		if st.Sessions != wantLive || st.Memory.SessionsClosedForMemory != wantClosed {
			t.Errorf("--memory-limit %d bytes, two layers read: %d sessions open, %d closed for memory; want %d, %d",
				limit, st.Sessions, st.Memory.SessionsClosedForMemory, wantLive, wantClosed)
		}
	}
}
