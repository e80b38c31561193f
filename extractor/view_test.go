package extractor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/test/testenv"
)

// viewCases returns the views compared for a w x h image: 4 drawn as
// issue 41's views are (size 224, default ranges), and fixed boxes that
// reach the resize's edge cases: the whole image (flipped), a box of
// exactly 224 columns (no horizontal pass), one of 224 x 224 (no pass at
// all), a 1-pixel-wide strip at the right edge, and a box touching the
// bottom-right corner that is enlarged.
func viewCases(name string, w, h int) []augment.Params {
	var vs []augment.Params
	for k := 0; k < 4; k++ {
		vs = append(vs, augment.Draw(augment.Identity(name, "etag"), k, 41, w, h, 224, augment.DefaultScale, augment.DefaultRatio))
	}
	vs = append(vs, augment.Params{Top: 0, Left: 0, Height: h, Width: w, Flip: true, Size: 224})
	if w >= 224 {
		vs = append(vs, augment.Params{Top: h / 3, Left: w - 224, Height: (h+1)/2 - h/3 + 1, Width: 224, Size: 224})
	}
	if w >= 224 && h >= 224 {
		vs = append(vs, augment.Params{Top: h - 224, Left: (w - 224) / 2, Height: 224, Width: 224, Flip: true, Size: 224})
	}
	vs = append(vs, augment.Params{Top: 0, Left: w - 1, Height: h, Width: 1, Size: 224})
	vs = append(vs, augment.Params{Top: h - (h+2)/3, Left: w - (w+2)/3, Height: (h + 2) / 3, Width: (w + 2) / 3, Flip: true, Size: 97})
	return vs
}

// TestViewPreprocessMatchesTorchvision compares ApplyViewPreprocess with
// torchvision 0.14 on PIL (scripts/ref_augment.py views: F.resized_crop,
// F.hflip, to_tensor, normalize) over JPEGs (4:2:0, 4:4:4, progressive,
// grayscale) and PNGs (RGB, gray, paletted, RGBA) from 37x53 to 640x480
// and elongated ones, 4 drawn views each plus edge-case boxes: identical
// pixels and tensors within 1e-6 required.
func TestViewPreprocessMatchesTorchvision(t *testing.T) {
	py := testenv.RequireTorch(t)
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "ref_augment.py")
	dir := t.TempDir()
	if out, err := exec.Command(py, script, "gen", dir).CombinedOutput(); err != nil {
		t.Fatalf("ref_augment.py gen: %v\n%s", err, out)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) < 20 {
		t.Fatalf("ref_augment.py gen made %d images, want >= 20", len(paths))
	}
	p := DefaultPreprocess()
	type item struct {
		Path   string         `json:"path"`
		Name   string         `json:"name"`
		Params augment.Params `json:"params"`
	}
	job := struct {
		Mean  [3]float32 `json:"mean"`
		Std   [3]float32 `json:"std"`
		Items []item     `json:"items"`
	}{Mean: p.Mean, Std: p.Std}
	data := map[string][]byte{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		w, h, _, err := CheckImage(b, 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data[path] = b
		for i, v := range viewCases(filepath.Base(path), w, h) {
			job.Items = append(job.Items, item{Path: path, Name: fmt.Sprintf("%s.%d", filepath.Base(path), i), Params: v})
		}
	}
	jobs := filepath.Join(t.TempDir(), "jobs.json")
	jb, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jobs, jb, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := t.TempDir()
	if out, err := exec.Command(py, script, "views", jobs, ref).CombinedOutput(); err != nil {
		t.Fatalf("ref_augment.py views: %v\n%s", err, out)
	}
	var worst float64
	flips, jpegs, pngs := 0, 0, 0
	for _, it := range job.Items {
		v := it.Params
		got := make([]float32, 3*v.Size*v.Size)
		if err := ApplyViewPreprocess(p, v, data[it.Path], 0, got); err != nil {
			t.Errorf("%s %+v: %v", it.Name, v, err)
			continue
		}
		refB, err := os.ReadFile(filepath.Join(ref, it.Name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		shape, dt, want, err := api.DecodeNPY(refB)
		if err != nil || dt != Float32 || fmt.Sprint(shape) != fmt.Sprint([]int64{3, int64(v.Size), int64(v.Size)}) {
			t.Fatalf("%s: reference tensor %v %v: %v", it.Name, shape, dt, err)
		}
		d := compareTensors(got, want)
		worst = max(worst, d.maxAbs)
		pix, err := viewRGB(v, data[it.Path], 0, new(preprocScratch))
		if err != nil {
			t.Fatal(err)
		}
		_, wantPix := readNPYU8(t, filepath.Join(ref, it.Name+".u8.npy"))
		diffPix, maxLevel := 0, 0
		for i := range pix {
			if e := int(pix[i]) - int(wantPix[i]); e != 0 {
				diffPix++
				maxLevel = max(maxLevel, max(e, -e))
			}
		}
		if diffPix != 0 || d.maxAbs > 1e-6 || len(pix) != len(wantPix) {
			t.Errorf("%s %+v: %d/%d bytes differ (max %d levels), tensor max abs diff %.3g; want identical",
				it.Name, v, diffPix, len(pix), maxLevel, d.maxAbs)
		}
		if v.Flip {
			flips++
		}
		if strings.HasSuffix(it.Path, ".jpg") {
			jpegs++
		} else {
			pngs++
		}
	}
	t.Logf("%d views of %d images (%d JPEG, %d PNG views, %d flipped): pixels identical, tensor max abs diff %.3g",
		len(job.Items), len(paths), jpegs, pngs, flips, worst)
	if jpegs < 40 || pngs < 30 || flips < 20 {
		t.Errorf("too few kinds compared: %d JPEG, %d PNG, %d flipped views", jpegs, pngs, flips)
	}
}

// TestViewCropIsNotABoxResize: the view resamples the crop alone, its
// filter clamped at the crop's edges; resizing the whole image with the
// crop as its box would read the pixels around the crop. A crop of a
// white square inside a black image must stay white to its edges.
func TestViewCropIsNotABoxResize(t *testing.T) {
	const w, h = 64, 48
	data := testPNGFunc(t, w, h, func(x, y int) [3]byte {
		if x >= 16 && x < 48 && y >= 8 && y < 40 {
			return [3]byte{255, 255, 255}
		}
		return [3]byte{0, 0, 0}
	})
	p := Preprocess{Resize: 16, Crop: 16, Std: [3]float32{1, 1, 1}}
	v := augment.Params{Top: 8, Left: 16, Height: 32, Width: 32, Size: 7}
	dst := make([]float32, 3*7*7)
	if err := ApplyViewPreprocess(p, v, data, 0, dst); err != nil {
		t.Fatal(err)
	}
	for i, x := range dst {
		if x != 1 {
			t.Fatalf("value %d = %v, want 1 (white): the resize read outside the crop", i, x)
		}
	}
}

func TestViewPreprocessRejectsBadInput(t *testing.T) {
	p := DefaultPreprocess()
	good := testPNG(t, 40, 30)
	ok := augment.Params{Top: 0, Left: 0, Height: 30, Width: 40, Size: 8}
	dst := make([]float32, 3*8*8)
	if err := ApplyViewPreprocess(p, ok, good, 0, dst); err != nil {
		t.Fatalf("valid view: %v", err)
	}
	for _, c := range []struct {
		name    string
		v       augment.Params
		data    []byte
		max     int64
		dst     int
		badData bool // the error must match ErrBadImage
	}{
		{"box past the right edge", augment.Params{Left: 1, Height: 30, Width: 40, Size: 8}, good, 0, 192, true},
		{"box past the bottom", augment.Params{Top: 29, Height: 2, Width: 4, Size: 8}, good, 0, 192, true},
		{"overflowing box", augment.Params{Top: math.MaxInt, Height: 2, Width: 4, Size: 8}, good, 0, 192, true},
		{"empty box", augment.Params{Height: 0, Width: 4, Size: 8}, good, 0, 192, false},
		{"negative left", augment.Params{Left: -1, Height: 2, Width: 4, Size: 8}, good, 0, 192, false},
		{"zero size", augment.Params{Height: 2, Width: 4, Size: 0}, good, 0, 0, false},
		{"huge size", augment.Params{Height: 2, Width: 4, Size: 100000}, good, 0, 192, false},
		{"short dst", ok, good, 0, 10, false},
		{"not an image", ok, []byte("hello"), 0, 192, true},
		{"truncated", ok, good[:len(good)/2], 0, 192, true},
		{"over maxPixels", ok, good, 100, 192, true},
	} {
		err := ApplyViewPreprocess(p, c.v, c.data, c.max, make([]float32, c.dst))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if errors.Is(err, ErrBadImage) != c.badData {
			t.Errorf("%s: error %v: matches ErrBadImage = %v, want %v", c.name, err, !c.badData, c.badData)
		}
	}
}

// FuzzApplyViewPreprocess: any bytes and any box: an error or a tensor,
// never a panic.
func FuzzApplyViewPreprocess(f *testing.F) {
	f.Add(testPNG(f, 5, 3), 0, 0, 3, 5, true, 4)
	f.Add(testJPEG(f, 9, 17), 2, 1, 10, 7, false, 6)
	f.Add(bigPNGHeader(f, 1, 70000), 0, 0, 1, 1, false, 1)
	p := Preprocess{Resize: 16, Crop: 12, Std: [3]float32{1, 1, 1}}
	f.Fuzz(func(t *testing.T, data []byte, top, left, height, width int, flip bool, size int) {
		size = 1 + (size&0x7fffffff)%64
		v := augment.Params{Top: top, Left: left, Height: height, Width: width, Flip: flip, Size: size}
		dst := make([]float32, 3*size*size)
		if err := ApplyViewPreprocess(p, v, data, 1<<20, dst); err == nil {
			for _, x := range dst {
				if x < 0 || x > 1 {
					t.Fatalf("value %v outside [0, 1] with mean 0, std 1", x)
				}
			}
		}
	})
}

// testPNGFunc returns a w x h RGB PNG whose pixel (x, y) is at(x, y).
func testPNGFunc(t testing.TB, w, h int, at func(x, y int) [3]byte) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := at(x, y)
			img.Set(x, y, color.RGBA{c[0], c[1], c[2], 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestViewPreprocessUsesTheDecodeBudget: with a budget, a view's decode
// holds its cost while it runs and gives it back, also on error; a full
// budget makes it wait until the context ends.
func TestViewPreprocessUsesTheDecodeBudget(t *testing.T) {
	p := DefaultPreprocess()
	data := testPNG(t, 40, 30)
	v := augment.Params{Height: 30, Width: 40, Size: 8}
	b := newDecodeBudget(1 << 20)
	want := make([]float32, 3*8*8)
	if err := ApplyViewPreprocess(p, v, data, 0, want); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3*8*8)
	if err := applyViewPreprocess(context.Background(), p, v, data, 0, got, b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Error("the budgeted path computed another tensor")
	}
	bad := v
	bad.Left = 1
	if err := applyViewPreprocess(context.Background(), p, bad, data, 0, got, b); !errors.Is(err, ErrBadImage) {
		t.Errorf("box outside: %v", err)
	}
	if n := b.inUse(); n != 0 {
		t.Errorf("%d budget bytes still held after the decodes", n)
	}
	held, err := b.acquire(context.Background(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := applyViewPreprocess(ctx, p, v, data, 0, got, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("full budget: %v, want the context's deadline", err)
	}
	b.release(held, 1<<20)
}

// BenchmarkApplyViewPreprocess is a drawn view (size 224) of the
// benchmark JPEGs, beside BenchmarkApplyViewPlain, the plain view of the
// same images: a view decodes at full size and resamples a crop of 8% to
// 100% of the image.
func BenchmarkApplyViewPreprocess(b *testing.B) {
	imgs := benchJPEGs(b)
	p := DefaultPreprocess()
	var views []augment.Params
	for i, data := range imgs {
		w, h, _, err := CheckImage(data, 0)
		if err != nil {
			b.Fatal(err)
		}
		views = append(views, augment.Draw(fmt.Sprint(i), 0, 1, w, h, 224, augment.DefaultScale, augment.DefaultRatio))
	}
	dst := make([]float32, 3*224*224)
	loop(b, len(imgs), func(i int) {
		if err := ApplyViewPreprocess(p, views[i], imgs[i], 0, dst); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkApplyViewPlain(b *testing.B) {
	imgs := benchJPEGs(b)
	p := DefaultPreprocess()
	dst := make([]float32, 3*224*224)
	loop(b, len(imgs), func(i int) {
		if err := ApplyPreprocess(p, imgs[i], 0, dst); err != nil {
			b.Fatal(err)
		}
	})
}
