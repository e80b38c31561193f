package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// SplitRaw is the split "layer" that ships the encoded image: the mount
// decodes and computes everything (the baseline without near-data compute).
const SplitRaw = -1

// SplitName is "raw" for SplitRaw and "layerK" otherwise.
func SplitName(split int) string {
	if split == SplitRaw {
		return "raw"
	}
	return LayerName(split)
}

// SplitPolicy is the --split setting: auto, none (the server computes up
// to the freeze layer), raw (ship images) or a fixed layer.
type SplitPolicy struct {
	// Mode is "auto", "none" or "fixed".
	Mode string
	// Layer is the fixed split layer (SplitRaw for raw) when Mode is fixed.
	Layer int
}

// ParseSplitPolicy parses auto, none, raw, K or layerK.
func ParseSplitPolicy(s string) (SplitPolicy, error) {
	switch s {
	case "auto", "none":
		return SplitPolicy{Mode: s}, nil
	case "raw":
		return SplitPolicy{Mode: "fixed", Layer: SplitRaw}, nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(s, layerPrefix))
	if err != nil || n < 0 {
		return SplitPolicy{}, fmt.Errorf("split %q: want auto, none, raw or a layer number", s)
	}
	return SplitPolicy{Mode: "fixed", Layer: n}, nil
}

// String returns the policy as ParseSplitPolicy reads it.
func (p SplitPolicy) String() string {
	if p.Mode == "fixed" {
		return SplitName(p.Layer)
	}
	if p.Mode == "" {
		return "none"
	}
	return p.Mode
}
