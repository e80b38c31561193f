package augment

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

type tvCase struct {
	Identity string     `json:"identity"` // hex
	View     int        `json:"view"`
	Seed     uint64     `json:"seed"`
	W        int        `json:"w"`
	H        int        `json:"h"`
	Scale    [2]float64 `json:"scale"`
	Ratio    [2]float64 `json:"ratio"`
}

type tvResult struct {
	Top, Left, Height, Width int
	Flip                     bool
	Draws                    uint64
	ExpCalls                 int `json:"exp_calls"`
	ExpULPDiffs              int `json:"exp_ulp_diffs"`
}

// tvCases are the cases compared with torchvision: fixed extreme sizes
// (1x1, 2000x10, 10x2000, ...) under every range, and random sizes.
func tvCases() []tvCase {
	idents := []string{"", "train/cat/0001.jpg\x00\"9b2cf535f27731c974343645a3985328\"",
		"a/b.png\x00etag-2", "ünïcode/ç.jpg\x00x", "\x00\xff\x00"}
	ranges := [][2][2]float64{
		{DefaultScale, DefaultRatio},
		{{0.5, 1.0}, {0.5, 2.0}},
		{{0.9, 1.5}, {1, 1}},       // areas above the image's: many retries
		{{0.08, 1.0}, {0.2, 5.0}},  // wide aspect range
		{{0.25, 0.25}, {0.9, 1.1}}, // a single scale
	}
	sizes := [][2]int{{1, 1}, {2, 1}, {1, 2}, {3, 3}, {2000, 10}, {10, 2000}, {5000, 5}, {5, 5000},
		{37, 53}, {224, 224}, {640, 480}, {480, 640}, {4000, 3000}, {100, 7}, {13, 17}}
	rng := rand.New(rand.NewPCG(41, 1))
	for len(sizes) < 150 {
		sizes = append(sizes, [2]int{1 + rng.IntN(1500), 1 + rng.IntN(1500)})
	}
	seeds := []uint64{0, 1, 12345, 1<<64 - 1}
	var cs []tvCase
	for ri, r := range ranges {
		for si, sz := range sizes {
			for k := 0; k < 4; k++ {
				if ri > 0 && k > 1 {
					break
				}
				id := idents[(si+k+ri)%len(idents)]
				cs = append(cs, tvCase{Identity: hex.EncodeToString([]byte(id)), View: k + si%3,
					Seed: seeds[(si+k)%len(seeds)], W: sz[0], H: sz[1], Scale: r[0], Ratio: r[1]})
			}
		}
	}
	return cs
}

// TestDrawMatchesTorchvision runs torchvision 0.14's own
// RandomResizedCrop.get_params and RandomHorizontalFlip.forward with
// their torch calls fed by the generator as the package doc specifies it
// (scripts/ref_augment.py reimplements it from that text): every box, flip
// and the number of words drawn must be identical.
func TestDrawMatchesTorchvision(t *testing.T) {
	py := testenv.RequireTorch(t)
	cases := tvCases()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range cases {
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, filepath.Join(testenv.RepoRoot(t), "scripts", "ref_augment.py"), "params")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ref_augment.py params: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("ref_augment.py gave %d results for %d cases", len(lines), len(cases))
	}
	fallbacks, flips, expCalls, expDiffs := 0, 0, 0, 0
	for i, c := range cases {
		var want tvResult
		if err := json.Unmarshal([]byte(lines[i]), &want); err != nil {
			t.Fatalf("result %d: %v: %q", i, err, lines[i])
		}
		id, _ := hex.DecodeString(c.Identity)
		got, n := draw(NewStream(string(id), c.View, c.Seed), c.View, c.Seed, c.W, c.H, 224, c.Scale, c.Ratio)
		g := tvResult{Top: got.Top, Left: got.Left, Height: got.Height, Width: got.Width, Flip: got.Flip, Draws: n}
		w := want
		w.ExpCalls, w.ExpULPDiffs = 0, 0
		if g != w {
			t.Errorf("case %d %+v (identity %q):\n got %+v\nwant %+v", i, c, id, g, w)
		}
		if n == 2*Tries+1 {
			fallbacks++
		}
		if got.Flip {
			flips++
		}
		expCalls += want.ExpCalls
		expDiffs += want.ExpULPDiffs
	}
	t.Logf("%d cases identical to torchvision: %d fallbacks, %d flips; torch.exp differed from the correctly rounded exp by an ulp in %d of %d calls",
		len(cases), fallbacks, flips, expDiffs, expCalls)
	// The cases must exercise both the fallback and the flip.
	if fallbacks < 20 || flips < len(cases)/4 || flips > 3*len(cases)/4 {
		t.Errorf("cases exercise too little: %d fallbacks, %d flips of %d", fallbacks, flips, len(cases))
	}
	if expCalls == 0 {
		t.Error("no torch.exp call seen through the shim")
	}
}
