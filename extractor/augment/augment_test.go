package augment

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestDrawIsDeterministic(t *testing.T) {
	id := Identity("train/cat/1.jpg", "\"abc\"")
	for k := 0; k < 8; k++ {
		a := Draw(id, k, 7, 640, 480, 224, DefaultScale, DefaultRatio)
		b := Draw(id, k, 7, 640, 480, 224, DefaultScale, DefaultRatio)
		if a != b {
			t.Fatalf("view %d: %+v then %+v", k, a, b)
		}
		if a.View != k || a.Seed != 7 || a.Size != 224 {
			t.Errorf("view %d: params %+v do not name their view, seed and size", k, a)
		}
	}
}

// TestStreamWords pins the generator's first words: a change to the
// documented encoding changes every cached view, and must be deliberate.
func TestStreamWords(t *testing.T) {
	s := NewStream("key\x00etag", 0, 1)
	got := []uint64{s.Uint64(), s.Uint64()}
	// Python: int.from_bytes(hashlib.sha256(b"featurefs-augment-v1" +
	// struct.pack("<Q", 8) + b"key\x00etag" + struct.pack("<qQQ", 0, 1, n)).digest()[:8], "little")
	want := []uint64{0xab2335dd0e035107, 0xf67aa61ec1930ccd}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("words %#x, want %#x", got, want)
	}
	if s.Drawn() != 2 {
		t.Fatalf("Drawn = %d, want 2", s.Drawn())
	}
}

func TestDrawDiffersAcrossViewsSeedsAndIdentities(t *testing.T) {
	base := Draw(Identity("a.jpg", "e1"), 0, 0, 640, 480, 224, DefaultScale, DefaultRatio)
	box := func(p Params) [5]int {
		f := 0
		if p.Flip {
			f = 1
		}
		return [5]int{p.Top, p.Left, p.Height, p.Width, f}
	}
	seen := map[[5]int]bool{box(base): true}
	for _, p := range []Params{
		Draw(Identity("a.jpg", "e1"), 1, 0, 640, 480, 224, DefaultScale, DefaultRatio),
		Draw(Identity("a.jpg", "e1"), 0, 1, 640, 480, 224, DefaultScale, DefaultRatio),
		Draw(Identity("a.jpg", "e2"), 0, 0, 640, 480, 224, DefaultScale, DefaultRatio),
		Draw(Identity("b.jpg", "e1"), 0, 0, 640, 480, 224, DefaultScale, DefaultRatio),
		// The length prefix keeps ("a", "b\x00c") and ("a\x00b", "c") apart.
		Draw(Identity("a.jpg\x00e1", ""), 0, 0, 640, 480, 224, DefaultScale, DefaultRatio),
	} {
		if seen[box(p)] {
			t.Errorf("%+v repeats another input's box", p)
		}
		seen[box(p)] = true
	}
	// Over many views the boxes spread: not a constant, flips near half.
	flips, distinct := 0, map[[5]int]bool{}
	for k := 0; k < 400; k++ {
		p := Draw("x", k, 3, 640, 480, 224, DefaultScale, DefaultRatio)
		distinct[box(p)] = true
		if p.Flip {
			flips++
		}
	}
	if len(distinct) < 390 || flips < 150 || flips > 250 {
		t.Errorf("400 views: %d distinct boxes, %d flips", len(distinct), flips)
	}
}

// checkBox fails unless p's box lies inside a w x h image with >= 1 pixel.
func checkBox(t *testing.T, p Params, w, h int) {
	t.Helper()
	if p.Width < 1 || p.Height < 1 || p.Top < 0 || p.Left < 0 || p.Top+p.Height > h || p.Left+p.Width > w {
		t.Fatalf("%dx%d image: box %+v outside it or empty", w, h, p)
	}
}

func TestDrawBoxInsideImage(t *testing.T) {
	sizes := [][2]int{{1, 1}, {1, 2}, {2, 1}, {1, 10000}, {10000, 1}, {2000, 10}, {10, 2000}, {7, 3}, {640, 480}}
	ranges := [][2][2]float64{
		{DefaultScale, DefaultRatio},
		{{1, 1}, {1, 1}},
		{{2, 4}, {0.1, 10}},    // never fits: fallback
		{{0.01, 1}, {50, 100}}, // fallback rounds h = w/50 to 0 on narrow images: kept at 1
		{{0.01, 1}, {0.001, 0.01}},
	}
	for _, sz := range sizes {
		for _, r := range ranges {
			for k := 0; k < 20; k++ {
				checkBox(t, Draw("id", k, 0, sz[0], sz[1], 224, r[0], r[1]), sz[0], sz[1])
			}
		}
	}
	// The fallback is torchvision's center crop: 2000x10 at ratio <= 4/3
	// gives h = 10, w = round(10 * 4/3) = 13, centered.
	p, n := draw(NewStream("id", 0, 0), 0, 0, 2000, 10, 224, DefaultScale, DefaultRatio)
	if n != 2*Tries+1 || p.Top != 0 || p.Height != 10 || p.Width != 13 || p.Left != (2000-13)/2 {
		t.Errorf("2000x10 fallback: %+v after %d draws", p, n)
	}
}

func TestDrawInvalidRangesStayInside(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, r := range [][2][2]float64{
		{{nan, 1}, DefaultRatio}, {DefaultScale, {nan, nan}}, {DefaultScale, {-1, 0}},
		{{-1, -0.5}, DefaultRatio}, {{0, inf}, {0, inf}}, {{1, 0.5}, {2, 1}},
	} {
		if err := CheckRanges(r[0], r[1]); !errors.Is(err, ErrBadRange) {
			t.Errorf("CheckRanges(%v, %v) = %v, want ErrBadRange", r[0], r[1], err)
		}
		for _, sz := range [][2]int{{1, 1}, {640, 480}, {3, 900}} {
			checkBox(t, Draw("id", 0, 0, sz[0], sz[1], 224, r[0], r[1]), sz[0], sz[1])
		}
	}
	if err := CheckRanges(DefaultScale, DefaultRatio); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	if p := Draw("id", 0, 0, 0, 5, 224, DefaultScale, DefaultRatio); p.Width != 0 || p.Height != 0 {
		t.Errorf("0-pixel image: %+v, want the empty box", p)
	}
}

func TestParamsJSON(t *testing.T) {
	b, err := json.Marshal(Params{Top: 1, Left: 2, Height: 3, Width: 4, Flip: true, Size: 224, Seed: 1<<64 - 1, View: 5})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"top":1,"left":2,"height":3,"width":4,"flip":true,"size":224,"seed":18446744073709551615,"view":5}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
}

// TestExp32CorrectlyRounded checks, for every value Uniform can give over
// the default ratio's log range (2^24 of them), that float64 exp lies far
// enough from a float32 rounding midpoint that rounding it gives the
// correctly rounded float32 exp: the spec's "correctly rounded" holds for
// the default ratio whatever the float64 exp's last-bit error.
func TestExp32CorrectlyRounded(t *testing.T) {
	if testing.Short() {
		t.Log("-short: checking 1 in 64 values")
	}
	lo, hi := log32(DefaultRatio[0]), log32(DefaultRatio[1])
	d := float32(hi - lo)
	step := 1
	if testing.Short() {
		step = 64
	}
	close := 0
	for i := 0; i < 1<<24; i += step {
		u := float32(i) * (1.0 / (1 << 24))
		x := float32(float32(u*d) + lo)
		e := math.Exp(float64(x))
		f := float32(e)
		// The midpoints around f are f +- half its ulp.
		ulp := float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
		for _, m := range []float64{float64(f) + ulp/2, float64(f) - ulp/2} {
			if math.Abs(e-m) <= 4*math.Abs(e)*0x1p-52 {
				close++
			}
		}
	}
	if close != 0 {
		t.Errorf("%d values of exp lie within 4 float64 ulps of a float32 midpoint: rounding may differ", close)
	}
}

// FuzzDraw: any identity, view, seed, image size and ranges: no panic, a
// box inside the image of at least one pixel, the same params twice.
func FuzzDraw(f *testing.F) {
	f.Add("a.jpg\x00e", 0, uint64(0), 640, 480, 0.08, 1.0, 0.75, 4.0/3)
	f.Add("", -3, uint64(1<<63), 1, 1, 0.5, 0.5, 1.0, 1.0)
	f.Add("x", 7, uint64(9), 2000, 10, 2.0, 3.0, 0.01, 100.0)
	f.Fuzz(func(t *testing.T, id string, view int, seed uint64, w, h int, s0, s1, r0, r1 float64) {
		w, h = 1+abs(w)%20000, 1+abs(h)%20000
		sc, ra := [2]float64{s0, s1}, [2]float64{r0, r1}
		p := Draw(id, view, seed, w, h, 224, sc, ra)
		checkBox(t, p, w, h)
		if q := Draw(id, view, seed, w, h, 224, sc, ra); q != p {
			t.Fatalf("not deterministic: %+v then %+v", p, q)
		}
	})
}

func abs(x int) int {
	if x < 0 {
		if x == math.MinInt {
			return 0
		}
		return -x
	}
	return x
}
