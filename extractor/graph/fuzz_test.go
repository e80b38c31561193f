package graph

import (
	"errors"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse and, when they parse, to every
// analysis and to Prune: nothing may panic, bad input must be ErrBadModel,
// and a pruned model must parse again.
func FuzzParse(f *testing.F) {
	for _, seed := range [][]byte{smallCNN(), opsModel()} {
		f.Add(seed)
		f.Add(seed[:len(seed)/3])
		f.Add(seed[:len(seed)-1])
	}
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x02, 0x0a, 0x00}) // graph { node {} }
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrBadModel) {
				t.Fatalf("Parse error %v does not match ErrBadModel", err)
			}
			return
		}
		_ = m.NodeOutputs()
		_, _ = m.Layers()
		shapes, _ := m.Shapes()
		_ = m.CumulativeFLOPs(shapes)
		p, err := m.Prune(m.Output())
		if err != nil {
			t.Fatalf("Prune(%q) of a parsed model: %v", m.Output(), err)
		}
		if _, err := Parse(p); err != nil {
			t.Fatalf("pruned model does not parse: %v", err)
		}
		cuts := m.CutPoints()
		if len(cuts) > 0 {
			if _, err := m.PruneFrom(cuts[0], m.Output()); err != nil && !errors.Is(err, ErrNotCut) {
				t.Fatalf("PruneFrom(%q): %v", cuts[0], err)
			}
		}
	})
}
