package extractor

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// resizeJob is one Pillow resize of a test image.
type resizeJob struct {
	sw, sh, tw, th int
}

// resizeJobs covers every kernel (2 to 8 taps per axis and more),
// upscaling, one axis unchanged (Pillow skips that pass), both unchanged,
// 1-pixel sides and extreme ratios.
var resizeJobs = []resizeJob{
	{500, 375, 341, 256}, {375, 500, 256, 341}, {333, 251, 256, 192}, {640, 427, 383, 256},
	{800, 533, 384, 256}, {1024, 683, 383, 256}, {2000, 100, 5120, 256}, {3, 1000, 256, 85},
	{224, 224, 256, 256}, {256, 256, 256, 256}, {257, 300, 256, 298}, {300, 257, 298, 256},
	{500, 375, 500, 256}, {500, 375, 341, 375}, {100, 80, 320, 256}, {1, 1, 256, 256},
	{7, 1, 3, 1}, {1, 9, 1, 2}, {97, 61, 13, 9}, {1200, 30, 40, 1}, {640, 480, 64, 48},
	{333, 501, 97, 146}, {401, 399, 200, 200}, {401, 399, 160, 160}, {999, 17, 250, 5},
	{800, 600, 341, 256}, {800, 600, 300, 225}, {1000, 700, 320, 224}, {1000, 700, 292, 204},
	{1100, 733, 384, 256}, {4000, 3000, 341, 256},
}

// writeTestPNG writes a w x h RGB PNG of noise over gradients.
func writeTestPNG(t *testing.T, path string, w, h int, rng *rand.Rand) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			n := rng.IntN(60)
			img.SetNRGBA(x, y, color.NRGBA{byte(x*255/w + n), byte(y*255/h + n), byte((x/5+y/3)%2*200 + n), 255})
		}
	}
	writePNG(t, path, img)
}

// TestResizeMatchesPIL compares the windowed resize with Pillow's
// Image.resize(BILINEAR) over resizeJobs: the whole output and several
// windows of it must equal PIL's bytes exactly.
func TestResizeMatchesPIL(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	var jobs strings.Builder
	paths := map[[2]int]string{}
	for _, j := range resizeJobs {
		key := [2]int{j.sw, j.sh}
		if paths[key] == "" {
			paths[key] = filepath.Join(dir, fmt.Sprintf("src_%dx%d.png", j.sw, j.sh))
			writeTestPNG(t, paths[key], j.sw, j.sh, rng)
		}
		fmt.Fprintf(&jobs, "%s %d %d\n", paths[key], j.tw, j.th)
	}
	jobFile := filepath.Join(dir, "jobs.txt")
	if err := os.WriteFile(jobFile, []byte(jobs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if o, err := exec.Command(py, filepath.Join(testenv.RepoRoot(t), refScript), "resize", jobFile, out).CombinedOutput(); err != nil {
		t.Fatalf("%s resize: %v\n%s", refScript, err, o)
	}
	kernels := map[int]bool{}
	var rs resizeScratch
	for i, j := range resizeJobs {
		data, err := os.ReadFile(paths[[2]int{j.sw, j.sh}])
		if err != nil {
			t.Fatal(err)
		}
		src, err := decodeRGB(data, 0, nil, fullRegion)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("%d.rgb", i)))
		if err != nil {
			t.Fatal(err)
		}
		if len(want) != 3*j.tw*j.th {
			t.Fatalf("job %v: PIL wrote %d bytes", j, len(want))
		}
		windows := []image.Rectangle{
			image.Rect(0, 0, j.tw, j.th),
			image.Rect(j.tw/3, j.th/4, j.tw-j.tw/5, j.th-j.th/6),
			image.Rect(j.tw-1, j.th-1, j.tw, j.th),
			image.Rect(0, j.th/2, 1, j.th/2+1),
		}
		for _, win := range windows {
			if win.Empty() {
				continue
			}
			r := rs.plan(j.sw, j.sh, j.tw, j.th, win.Min.X, win.Min.Y, win.Dx(), win.Dy())
			// Give run only the source rectangle the plan asked for.
			part := cropRGBImage(src, r)
			got := rs.run(part)
			if rs.hc != nil {
				kernels[rs.hc.taps] = true
			}
			if rs.vc != nil {
				kernels[rs.vc.taps] = true
			}
			for y := win.Min.Y; y < win.Max.Y; y++ {
				g := got[3*win.Dx()*(y-win.Min.Y) : 3*win.Dx()*(y-win.Min.Y+1)]
				w := want[3*(j.tw*y+win.Min.X) : 3*(j.tw*y+win.Max.X)]
				if !bytes.Equal(g, w) {
					t.Errorf("%dx%d -> %dx%d window %v: row %d differs from PIL", j.sw, j.sh, j.tw, j.th, win, y)
					break
				}
			}
		}
	}
	for _, n := range []int{2, 3, 4, 5, 6, 7, 8} {
		if !kernels[n] {
			t.Errorf("no job used the %d-tap kernel (used: %v)", n, kernels)
		}
	}
	generic := false
	for n := range kernels {
		generic = generic || n > 8
	}
	if !generic {
		t.Errorf("no job used the generic kernel (used: %v)", kernels)
	}
}

// cropRGBImage returns the part r of a fully decoded image, packed, as
// decodeRGB returns a region.
func cropRGBImage(src rgbImage, r image.Rectangle) rgbImage {
	out := rgbImage{w: src.w, h: src.h, x0: r.Min.X, y0: r.Min.Y, rw: r.Dx(), rh: r.Dy(), stride: 3 * r.Dx()}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		out.pix = append(out.pix, src.row(y)[3*r.Min.X:3*r.Max.X]...)
	}
	return out
}

// TestCoeffCacheBounded checks that the coefficient cache reuses entries
// and never holds more than coeffCacheBytes.
func TestCoeffCacheBounded(t *testing.T) {
	var cc coeffCache
	a := cc.get(coeffKey{500, 341, 58, 224, 500})
	if b := cc.get(coeffKey{500, 341, 58, 224, 500}); a != b {
		t.Error("same key built twice")
	}
	for in := 300; in < 3000; in++ {
		cc.get(coeffKey{in, 256, 16, 224, float32(in)})
		if cc.size > coeffCacheBytes {
			t.Fatalf("cache holds %d bytes > %d", cc.size, coeffCacheBytes)
		}
	}
	if len(cc.m) != len(cc.order) || len(cc.m) < 10 {
		t.Errorf("map %d entries, order %d", len(cc.m), len(cc.order))
	}
	if _, ok := cc.m[coeffKey{500, 341, 58, 224, 500}]; ok {
		t.Error("oldest entry not evicted")
	}
	// An entry larger than the whole budget is returned, not kept.
	big := cc.get(coeffKey{300000, 1, 0, 1, 300000})
	if big.taps < 1000 || cc.size > coeffCacheBytes {
		t.Errorf("big entry: %d taps, cache %d bytes", big.taps, cc.size)
	}
}
