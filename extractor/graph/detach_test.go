package graph

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// bigCNN is a Conv, a Relu and a second Conv whose weights (64x4x8x8
// float, 64 KiB) are large enough to be detached, then a Reshape.
func bigCNN() []byte {
	g := tGraph{
		inits: [][]byte{
			encFloatTensor("w1", []int64{4, 2, 3, 3}, ones(72)),
			encFloatTensor("wbig", []int64{64, 4, 8, 8}, ones(64*4*8*8)), // 64 KiB
			encFloatTensor("bbig", []int64{64}, ones(64)),
			encInt64Tensor("shape", []int64{2}, []int64{0, -1}),
		},
		inputs:  [][]byte{encVI("x", -1, 2, 8, 8)},
		outputs: [][]byte{encVI("y", -1, 64)},
	}
	g.nodes = [][]byte{
		encNode("Conv", "c1", []string{"x", "w1"}, []string{"c1o"}, attrInts("pads", 1, 1, 1, 1)),
		encNode("Relu", "r1", []string{"c1o"}, []string{"r1o"}),
		encNode("Conv", "c2", []string{"r1o", "wbig", "bbig"}, []string{"c2o"}),
		encNode("Reshape", "flat", []string{"c2o", "shape"}, []string{"y"}),
	}
	return encModel(g)
}

// TestDetachPrunesTheSameBytes: a detached model holds no initializer
// over DetachMinBytes, and prunes, digests and infers shapes as the model
// it came from, reading the weights back from the source.
func TestDetachPrunesTheSameBytes(t *testing.T) {
	data := bigCNN()
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.NewReader(slices.Clone(data))
	d, err := m.Detach(src)
	if err != nil {
		t.Fatal(err)
	}
	if d.inits["wbig"].spill == nil || d.inits["w1"].spill != nil {
		t.Fatalf("detached: wbig %v, w1 %v; want wbig only", d.inits["wbig"].spill, d.inits["w1"].spill)
	}
	if n := len(d.data); n >= DetachMinBytes {
		t.Errorf("the detached model holds %d bytes", n)
	}
	for _, outs := range [][]string{{"y"}, {"c2o"}, {"r1o"}} {
		want, err := m.Prune(outs...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Prune(outs...)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Prune(%v): %d bytes detached, %d not: they differ", outs, len(got), len(want))
		}
		var w bytes.Buffer
		if err := d.PruneFromTo(&w, "", outs...); err != nil || !bytes.Equal(w.Bytes(), want) {
			t.Errorf("PruneFromTo(\"\", %v): %d bytes, %v; want Prune's %d", outs, w.Len(), err, len(want))
		}
		if n, err := d.PrunedSize("", outs...); err != nil || n != int64(len(want)) {
			t.Errorf("PrunedSize(%v): %d, %v; want Prune's %d", outs, n, err, len(want))
		}
	}
	want, err := m.PruneFrom("r1o", "y")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := d.PruneFrom("r1o", "y"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("PruneFrom: differs (err %v)", err)
	}
	var w bytes.Buffer
	if err := d.PruneFromTo(&w, "r1o", "y"); err != nil || !bytes.Equal(w.Bytes(), want) {
		t.Errorf("PruneFromTo: %d bytes, %v; want PruneFrom's %d", w.Len(), err, len(want))
	}
	tensors := m.NodeOutputs()
	wd, err := m.Digests(tensors...)
	if err != nil {
		t.Fatal(err)
	}
	gd, err := d.Digests(tensors...)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gd, wd) {
		t.Errorf("digests differ once detached")
	}
	ws, err1 := m.Shapes()
	gs, err2 := d.Shapes()
	if err1 != nil || err2 != nil || len(ws) != len(gs) {
		t.Fatalf("shapes: %v / %v, %d / %d", err1, err2, len(ws), len(gs))
	}
	for k, v := range ws {
		if !slices.Equal(gs[k], v) {
			t.Errorf("shape of %s: %v detached, %v not", k, gs[k], v)
		}
	}
	if again, err := d.Detach(src); err != nil || again != d {
		t.Errorf("Detach of a detached model: %p, %v; want itself", again, err)
	}
}

// TestDetachRefusesAChangedSource: a source that no longer holds the
// parsed initializer (another value, another name at its offset, a
// shorter file) fails Prune with ErrSourceChanged; what does not read the
// detached initializer prunes still.
func TestDetachRefusesAChangedSource(t *testing.T) {
	data := bigCNN()
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	sp := func() *spill {
		d, err := m.Detach(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return d.inits["wbig"].spill
	}()
	at := int(sp.off) + bytes.Index(data[sp.off:], []byte("wbig"))
	for name, change := range map[string]func([]byte) []byte{
		"a weight": func(b []byte) []byte { b[sp.off+sp.n-1] ^= 1; return b },
		"its name": func(b []byte) []byte { b[at+3] = 'x'; return b },
		"shorter":  func(b []byte) []byte { return b[:sp.off+sp.n/2] },
	} {
		t.Run(name, func(t *testing.T) {
			d, err := m.Detach(bytes.NewReader(change(slices.Clone(data))))
			if err != nil {
				t.Fatal(err)
			}
			if b, err := d.Prune("y"); !errors.Is(err, ErrSourceChanged) {
				t.Errorf("Prune of a changed source: %d bytes, %v; want ErrSourceChanged", len(b), err)
			}
			// PruneFromTo writes what comes before the changed
			// initializer and none of it.
			var w bytes.Buffer
			if err := d.PruneFromTo(&w, "", "y"); !errors.Is(err, ErrSourceChanged) {
				t.Errorf("PruneFromTo of a changed source: %d bytes, %v; want ErrSourceChanged", w.Len(), err)
			}
			if good, _ := m.Prune("y"); !bytes.HasPrefix(good, w.Bytes()) || w.Len() > len(good)-int(sp.n) {
				t.Errorf("PruneFromTo of a changed source wrote %d bytes: not a prefix of the model before the changed initializer (%d bytes, the initializer %d)", w.Len(), len(good), sp.n)
			}
			if _, err := d.Prune("r1o"); err != nil {
				t.Errorf("Prune not reading the changed initializer: %v", err)
			}
		})
	}
}
