package extractor

import (
	"bytes"
	"encoding/binary"
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

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// refScript is the Python reference helper, relative to the repository root.
const refScript = "scripts/ref_preprocess.py"

// genRefImages writes PIL's varied image set plus PNG kinds PIL cannot
// write (16-bit RGB/RGBA, 2- and 4-bit gray, interlacing-free Go encodings)
// into dir and returns the file paths.
func genRefImages(t *testing.T, py, dir string) []string {
	t.Helper()
	script := filepath.Join(testenv.RepoRoot(t), refScript)
	if out, err := exec.Command(py, script, "gen", dir).CombinedOutput(); err != nil {
		t.Fatalf("%s gen: %v\n%s", refScript, err, out)
	}
	// 16-bit RGB (opaque: color type 2) and RGBA (type 6) PNGs from Go.
	w, h := 300, 220
	rgb16 := image.NewRGBA64(image.Rect(0, 0, w, h))
	rgba16 := image.NewNRGBA64(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r := uint16((x*65535/w + y*37) & 0xffff)
			g := uint16(y * 65535 / h)
			b := uint16((x * y * 97) & 0xffff)
			rgb16.SetRGBA64(x, y, color.RGBA64{r, g, b, 0xffff})
			rgba16.SetNRGBA64(x, y, color.NRGBA64{r, g, b, uint16(x * 200)})
		}
	}
	writePNG(t, filepath.Join(dir, "rgb16_300x220.png"), rgb16)
	writePNG(t, filepath.Join(dir, "rgba16_300x220.png"), rgba16)
	paths, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	return paths
}

func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runRef runs the reference transform on paths and returns the output dir.
func runRef(t *testing.T, py string, p Preprocess, paths []string) string {
	t.Helper()
	return runRefScript(t, py, "ref", p, nil, paths)
}

// runRefScript runs scripts/ref_preprocess.py's subcommand sub with p's
// sizes, mean and std and the extra arguments over paths, and returns its
// output directory.
func runRefScript(t *testing.T, py, sub string, p Preprocess, extra, paths []string) string {
	t.Helper()
	out := t.TempDir()
	args := []string{filepath.Join(testenv.RepoRoot(t), refScript), sub,
		"--resize", fmt.Sprint(p.Resize), "--crop", fmt.Sprint(p.Crop), "--out", out}
	args = append(args, extra...)
	args = append(args, "--mean")
	for _, m := range p.Mean {
		args = append(args, fmt.Sprint(m))
	}
	args = append(args, "--std")
	for _, s := range p.Std {
		args = append(args, fmt.Sprint(s))
	}
	args = append(args, paths...)
	if o, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", refScript, sub, err, o)
	}
	return out
}

// readNPYU8 reads a '|u1' .npy file written by numpy.
func readNPYU8(t *testing.T, path string) ([]int64, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" || b[6] != 1 {
		t.Fatalf("%s: not a version 1 .npy", path)
	}
	hl := int(binary.LittleEndian.Uint16(b[8:]))
	descr, fortran, shape, err := api.ParseNPYDict(string(b[10 : 10+hl]))
	if err != nil || descr != "|u1" || fortran {
		t.Fatalf("%s: header %q fortran %v shape %v: %v", path, descr, fortran, shape, err)
	}
	return shape, b[10+hl:]
}

// tensorDiff compares two equally long tensors.
type tensorDiff struct {
	maxAbs, meanAbs, cosine float64
}

func compareTensors(a, b []float32) tensorDiff {
	var d tensorDiff
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		e := math.Abs(x - y)
		d.maxAbs = max(d.maxAbs, e)
		d.meanAbs += e
		dot += x * y
		na += x * x
		nb += y * y
	}
	d.meanAbs /= float64(len(a))
	d.cosine = dot / math.Sqrt(na*nb)
	return d
}

// TestPreprocessMatchesTorchvision compares Apply with torchvision 0.14's
// transform on PIL (scripts/ref_preprocess.py) over PNGs of many sizes and
// modes and JPEGs of every subsampling, progressive, grayscale and CMYK:
// bit-identical pixels and tensors required.
func TestPreprocessMatchesTorchvision(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := t.TempDir()
	paths := genRefImages(t, py, dir)
	settings := []Preprocess{
		DefaultPreprocess(),
		// Crop larger than the resized short side: torchvision zero-pads.
		{Resize: 200, Crop: 230, Mean: [3]float32{0.5, 0.4, 0.3}, Std: [3]float32{0.2, 0.25, 0.3}},
		{Resize: 97, Crop: 64, Mean: [3]float32{0, 0, 0}, Std: [3]float32{1, 1, 1}},
	}
	for si, p := range settings {
		ref := runRef(t, py, p, paths)
		jpegs := 0
		for _, path := range paths {
			name := filepath.Base(path)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, 3*p.Crop*p.Crop)
			if err := ApplyPreprocess(p, data, 0, got); err != nil {
				t.Errorf("setting %d %s: Apply: %v", si, name, err)
				continue
			}
			refB, err := os.ReadFile(filepath.Join(ref, name+".npy"))
			if err != nil {
				t.Fatal(err)
			}
			shape, dt, want, err := api.DecodeNPY(refB)
			if err != nil || dt != Float32 || fmt.Sprint(shape) != fmt.Sprint([]int64{3, int64(p.Crop), int64(p.Crop)}) {
				t.Fatalf("%s: reference tensor %v %v: %v", name, shape, dt, err)
			}
			d := compareTensors(got, want)
			sc := new(preprocScratch)
			pix, err := cropRGB(p, data, 0, sc)
			if err != nil {
				t.Fatal(err)
			}
			_, wantPix := readNPYU8(t, filepath.Join(ref, name+".u8.npy"))
			maxLevel, diffPix := 0, 0
			for i := range pix {
				if e := int(pix[i]) - int(wantPix[i]); e != 0 {
					diffPix++
					maxLevel = max(maxLevel, max(e, -e))
				}
			}
			if diffPix != 0 || d.maxAbs > 1e-6 {
				t.Errorf("setting %d %s: %d/%d bytes differ (max %d levels), tensor max abs diff %.3g; want identical",
					si, name, diffPix, len(pix), maxLevel, d.maxAbs)
			}
			if strings.HasSuffix(name, ".jpg") {
				jpegs++
			}
		}
		// Every kind in genRefImages must have been compared.
		if jpegs < 8 {
			t.Errorf("setting %d: only %d JPEGs compared", si, jpegs)
		}
	}
}

func TestCropOffsetRoundsHalfToEven(t *testing.T) {
	// int(round(d / 2.0)) in Python 3: round half to even.
	for _, c := range []struct{ size, crop, want int }{
		{224, 224, 0}, {225, 224, 0}, {226, 224, 1}, {227, 224, 2}, {229, 224, 2}, {231, 224, 4},
		{200, 230, -15}, {201, 230, -14},
	} {
		if got := cropOffset(c.size, c.crop); got != c.want {
			t.Errorf("cropOffset(%d, %d) = %d, want %d", c.size, c.crop, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultPreprocess().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	bad := []Preprocess{
		{Resize: 0, Crop: 224, Std: [3]float32{1, 1, 1}},
		{Resize: 256, Crop: -1, Std: [3]float32{1, 1, 1}},
		{Resize: 256, Crop: 224, Std: [3]float32{1, 0, 1}},
		{Resize: 256, Crop: 224, Std: [3]float32{1, float32(math.NaN()), 1}},
		{Resize: 256, Crop: 224, Mean: [3]float32{float32(math.Inf(1)), 0, 0}, Std: [3]float32{1, 1, 1}},
		{Resize: 100000, Crop: 224, Std: [3]float32{1, 1, 1}},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrBadPreprocess) {
			t.Errorf("%+v: Validate = %v, want ErrBadPreprocess", p, err)
		}
		if err := ApplyPreprocess(p, nil, 0, make([]float32, 3)); err == nil {
			t.Errorf("%+v: Apply accepted invalid settings", p)
		}
	}
	ok := Preprocess{Resize: 100, Crop: 120, Std: [3]float32{1, 1, 1}}
	if err := ok.Validate(); err != nil {
		t.Errorf("crop > resize (padding) rejected: %v", err)
	}
}

func TestApplyDstLength(t *testing.T) {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 8, 8))); err != nil {
		t.Fatal(err)
	}
	p := DefaultPreprocess()
	err := ApplyPreprocess(p, b.Bytes(), 0, make([]float32, 10))
	if err == nil || errors.Is(err, ErrBadImage) {
		t.Fatalf("short dst: err = %v, want a non-ErrBadImage error", err)
	}
}
