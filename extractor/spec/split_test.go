package spec

import "testing"

func TestParseSplitPolicy(t *testing.T) {
	for _, s := range []string{"auto", "none", "raw", "layer3", "0"} {
		p, err := ParseSplitPolicy(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		q, err := ParseSplitPolicy(p.String())
		if err != nil || q != p {
			t.Errorf("%s: %+v does not round-trip (%+v, %v)", s, p, q, err)
		}
	}
	for _, s := range []string{"", "fast", "-2", "layer", "layerx"} {
		if _, err := ParseSplitPolicy(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
