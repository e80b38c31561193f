package augment

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Feature-space views (FroFA, "Frozen Feature Augmentation", CVPR 2024):
// point-wise brightness, contrast and posterize applied to a cached
// feature tensor, as image augmentations are to pixels, without running
// the model. View k of a feature x (float32 values, any shape) with the
// ops O (in the order brightness, contrast, posterize, each only if asked):
//
//	lo, hi = min(x), max(x)           (x unchanged when hi == lo)
//	u = (x - lo) / (hi - lo)          in [0, 1], float32
//	brightness: u = u + b             b = uniform(-FeatureBrightness, +FeatureBrightness)
//	contrast:   u = (u - m) * c + m   m = the mean of u (float64 sum), c = uniform(1-FeatureContrast, 1+FeatureContrast)
//	posterize:  u = floor(u * 2^bits) / 2^bits, bits = randint(FeaturePosterizeMin, FeaturePosterizeMax+1)
//	each step clips u to [0, 1]; then x' = u * (hi - lo) + lo
//
// The numbers are drawn, in that order and only for the ops asked, from
// the stream of (Identity(key, etag) + "\x00feature", k, seed) (package
// doc's generator, its uniform and randint). Every step is float32 except
// the mean. They suit features that are non-negative with a meaning of
// magnitude, such as the outputs of a ReLU (every ResNet block boundary);
// FroFA found geometric ones harmful and point-wise ones helpful there.

// The feature ops' ranges.
const (
	FeatureBrightness   = 0.2
	FeatureContrast     = 0.2
	FeaturePosterizeMin = 3
	FeaturePosterizeMax = 7
)

// FeatureOps are the ops a feature-space view may apply, in the order it
// applies them.
var FeatureOps = []string{"brightness", "contrast", "posterize"}

// ParseFeatureOps parses a comma-separated list of FeatureOps ("all": every
// one) into their canonical order.
func ParseFeatureOps(s string) ([]string, error) {
	if s == "all" {
		return slices.Clone(FeatureOps), nil
	}
	asked := map[string]bool{}
	for _, op := range strings.Split(s, ",") {
		op = strings.TrimSpace(op)
		if !slices.Contains(FeatureOps, op) {
			return nil, fmt.Errorf("feature op %q: want %s or all", op, strings.Join(FeatureOps, ", "))
		}
		asked[op] = true
	}
	var out []string
	for _, op := range FeatureOps {
		if asked[op] {
			out = append(out, op)
		}
	}
	return out, nil
}

// FeatureParams are one feature-space view's numbers, as published beside
// it: the ops and what was drawn for each (zero for an op not applied).
type FeatureParams struct {
	Ops        []string `json:"ops"`
	Brightness float32  `json:"brightness"`
	Contrast   float32  `json:"contrast"`
	Bits       int      `json:"bits"`
	Seed       uint64   `json:"seed"`
	View       int      `json:"view"`
}

// DrawFeature returns view k's numbers for the object identity with ops
// (canonical order, ParseFeatureOps) and seed.
func DrawFeature(identity string, view int, seed uint64, ops []string) FeatureParams {
	s := NewStream(identity+"\x00feature", view, seed)
	p := FeatureParams{Ops: ops, Seed: seed, View: view}
	for _, op := range ops {
		switch op {
		case "brightness":
			p.Brightness = s.Uniform(-FeatureBrightness, FeatureBrightness)
		case "contrast":
			p.Contrast = s.Uniform(1-FeatureContrast, 1+FeatureContrast)
		case "posterize":
			p.Bits = s.Randint(FeaturePosterizeMin, FeaturePosterizeMax+1)
		}
	}
	return p
}

// ApplyFeature applies p to x in place.
func ApplyFeature(x []float32, p FeatureParams) {
	if len(x) == 0 {
		return
	}
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	if !(hi > lo) || math.IsInf(float64(hi-lo), 0) {
		return // constant, NaN or an unbounded range: nothing to scale
	}
	span := hi - lo
	clip := func(v float32) float32 { return min(max(v, 0), 1) }
	for i, v := range x {
		x[i] = (v - lo) / span
	}
	for _, op := range p.Ops {
		switch op {
		case "brightness":
			for i, v := range x {
				x[i] = clip(v + p.Brightness)
			}
		case "contrast":
			var sum float64
			for _, v := range x {
				sum += float64(v)
			}
			m := float32(sum / float64(len(x)))
			for i, v := range x {
				x[i] = clip((v-m)*p.Contrast + m)
			}
		case "posterize":
			levels := float32(int(1) << p.Bits)
			for i, v := range x {
				x[i] = clip(float32(math.Floor(float64(v*levels))) / levels)
			}
		}
	}
	for i, v := range x {
		x[i] = v*span + lo
	}
}
