package augment

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestFeatureViewMatchesItsDefinition: DrawFeature and ApplyFeature equal
// a numpy reimplementation of feature.go's comment (scripts/ref_augment.py
// feature) on 60 random tensors: every op alone and all together, ReLU-like
// (non-negative, many zeros) and signed values, a constant tensor. The
// drawn numbers are equal; the values agree to 1e-6 of the tensor's range
// except where posterize's floor meets a level boundary (the mean's sum
// order differs: numpy's pairwise, Go's sequential), at most 0.1% of them.
func TestFeatureViewMatchesItsDefinition(t *testing.T) {
	py := testenv.RequireTorch(t)
	type fcase struct {
		Identity string    `json:"identity"`
		View     int       `json:"view"`
		Seed     uint64    `json:"seed"`
		Ops      []string  `json:"ops"`
		X        []float32 `json:"x"`
	}
	r := rand.New(rand.NewPCG(1, 2))
	opsets := [][]string{{"brightness"}, {"contrast"}, {"posterize"}, {"brightness", "contrast", "posterize"}}
	var cases []fcase
	for i := range 60 {
		x := make([]float32, 500+r.IntN(1500))
		for j := range x {
			v := float32(r.NormFloat64() * 3)
			if i%2 == 0 {
				v = max(v, 0) // after a ReLU
			}
			x[j] = v
		}
		if i == 59 {
			for j := range x {
				x[j] = 1.5
			}
		}
		cases = append(cases, fcase{Identity: hex.EncodeToString([]byte(fmt.Sprintf("k%d.jpg\x00etag%d", i, i))), View: i % 5, Seed: uint64(i / 7), Ops: opsets[i%len(opsets)], X: x})
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range cases {
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, filepath.Join(testenv.RepoRoot(t), "scripts", "ref_augment.py"), "feature")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ref_augment.py feature: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d results for %d cases", len(lines), len(cases))
	}
	for i, c := range cases {
		var want struct {
			Brightness float32   `json:"brightness"`
			Contrast   float32   `json:"contrast"`
			Bits       int       `json:"bits"`
			Y          []float32 `json:"y"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &want); err != nil {
			t.Fatal(err)
		}
		id, _ := hex.DecodeString(c.Identity)
		p := DrawFeature(string(id), c.View, c.Seed, c.Ops)
		if p.Brightness != want.Brightness || p.Contrast != want.Contrast || p.Bits != want.Bits {
			t.Errorf("case %d: drew %+v, numpy %+v", i, p, want)
		}
		y := slices.Clone(c.X)
		ApplyFeature(y, p)
		lo, hi := slices.Min(c.X), slices.Max(c.X)
		tol := 1e-6 * float64(max(hi-lo, 1))
		off := 0
		for j := range y {
			if math.Abs(float64(y[j]-want.Y[j])) > tol {
				off++
			}
		}
		if off > len(y)/1000 {
			t.Errorf("case %d (%v): %d of %d values differ from numpy's by more than %g", i, c.Ops, off, len(y), tol)
		}
		if i == 59 && !slices.Equal(y, c.X) {
			t.Errorf("a constant tensor changed")
		}
	}
}

// TestParseFeatureOps: canonical order, "all", and a clear error.
func TestParseFeatureOps(t *testing.T) {
	if got, err := ParseFeatureOps("posterize,brightness"); err != nil || !slices.Equal(got, []string{"brightness", "posterize"}) {
		t.Errorf("posterize,brightness: %v, %v", got, err)
	}
	if got, err := ParseFeatureOps("all"); err != nil || !slices.Equal(got, FeatureOps) {
		t.Errorf("all: %v, %v", got, err)
	}
	if _, err := ParseFeatureOps("rotate"); err == nil || !strings.Contains(err.Error(), "rotate") {
		t.Errorf("rotate: %v", err)
	}
}

// FuzzApplyFeature: any values and numbers, no panic; finite inputs give
// outputs within the inputs' range.
func FuzzApplyFeature(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint64(1), 3)
	f.Fuzz(func(t *testing.T, raw []byte, seed uint64, view int) {
		x := make([]float32, len(raw)/4)
		for i := range x {
			x[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
		}
		p := DrawFeature("id", view, seed, FeatureOps)
		y := slices.Clone(x)
		ApplyFeature(y, p)
		finite := true
		for _, v := range x {
			finite = finite && !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0)
		}
		if finite && len(x) > 0 {
			lo, hi := slices.Min(x), slices.Max(x)
			for _, v := range y {
				if v < lo-(hi-lo)*1e-5 || v > hi+(hi-lo)*1e-5 {
					t.Fatalf("value %g outside [%g, %g]", v, lo, hi)
				}
			}
		}
	})
}
