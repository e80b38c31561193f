package extractor

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// helperJPEGs are JPEG kinds Pillow 9.4 cannot write (restart markers,
// arithmetic coding, real YCCK, RGB colour space, 4:4:0 and 4:1:1),
// written by testdata/jpegenc.c through the same libjpeg: name and
// arguments (width, height, options). Names starting with "pilfails_"
// are valid JPEGs that PIL cannot decode: libjpeg's arithmetic decoder
// cannot suspend, and Pillow feeds it 64 KiB at a time.
var helperJPEGs = []struct{ name, args string }{
	{"pilfails_arith_420_500x375.jpg", "500 375 arith"},
	{"rst_420_500x375.jpg", "500 375 restart=7"},
	{"rst_rows_444_333x251.jpg", "333 251 restartrows=1 sample=1x1,1x1,1x1"},
	{"rst_prog_420_301x199.jpg", "301 199 restart=3 progressive"},
	{"rst_gray_99x77.jpg", "99 77 cs=gray restart=2"},
	{"arith_420_200x150.jpg", "200 150 arith restart=4"},
	{"arith_prog_444_257x255.jpg", "257 255 arith progressive sample=1x1,1x1,1x1"},
	{"ycck_500x375.jpg", "500 375 cs=ycck"},
	{"ycck_420_odd_123x77.jpg", "123 77 cs=ycck sample=2x2,1x1,1x1,2x2 restart=5"},
	{"cmyk_prog_211x97.jpg", "211 97 cs=cmyk progressive"},
	{"rgbcs_500x375.jpg", "500 375 cs=rgb"},
	{"rgbcs_prog_95x131.jpg", "95 131 cs=rgb progressive"},
	{"s440_500x375.jpg", "500 375 sample=1x2,1x1,1x1"},
	{"s440_odd_77x33.jpg", "77 33 sample=1x2,1x1,1x1"},
	{"s411_500x375.jpg", "500 375 sample=4x1,1x1,1x1"},
	{"s411_odd_13x9.jpg", "13 9 sample=4x1,1x1,1x1"},
	{"s420_odd_1x1.jpg", "1 1 q=100"},
	{"s420_q10_3x700.jpg", "3 700 q=10"},
}

// makeJPEGSet writes the test JPEGs into dir (PIL's from
// scripts/ref_preprocess.py genjpeg, the rest from testdata/jpegenc.c) and
// returns their paths.
func makeJPEGSet(t *testing.T, py, dir string) []string {
	t.Helper()
	root := testenv.RepoRoot(t)
	if out, err := exec.Command(py, filepath.Join(root, refScript), "genjpeg", dir).CombinedOutput(); err != nil {
		t.Fatalf("%s genjpeg: %v\n%s", refScript, err, out)
	}
	cc := "gcc"
	if out, err := exec.Command("go", "env", "CC").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		cc = string(bytes.TrimSpace(out))
	}
	enc := filepath.Join(t.TempDir(), "jpegenc")
	if out, err := exec.Command(cc, "-O1", "-o", enc, filepath.Join(root, "extractor", "testdata", "jpegenc.c"),
		"-l:libjpeg.a").CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/jpegenc.c: %v\n%s", err, out)
	}
	for _, h := range helperJPEGs {
		args := append([]string{filepath.Join(dir, h.name)}, strings.Fields(h.args)...)
		if out, err := exec.Command(enc, args...).CombinedOutput(); err != nil {
			t.Fatalf("jpegenc %s: %v\n%s", h.args, err, out)
		}
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	return paths
}

// brokenJPEGs writes damaged copies of a few of paths into dir: truncated
// in the header, in the middle of the scan data, just before and inside
// the EOI marker, with bytes flipped in the scan data, and with trailing
// junk; and returns their paths.
func brokenJPEGs(t *testing.T, dir string, paths []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		base := filepath.Base(p)
		if !strings.HasPrefix(base, "q90_420") && !strings.HasPrefix(base, "prog_420") &&
			!strings.HasPrefix(base, "rst_420") && !strings.HasPrefix(base, "cmyk_500") &&
			!strings.HasPrefix(base, "gray_prog") && !strings.HasPrefix(base, "arith_420") &&
			!strings.HasPrefix(base, "pilfails_") {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sos := bytes.Index(data, []byte{0xff, 0xda})
		if sos < 0 {
			t.Fatalf("%s: no SOS", p)
		}
		n := len(data)
		flip := func(at ...int) []byte {
			b := bytes.Clone(data)
			for _, i := range at {
				b[i] ^= 0x5a
			}
			return b
		}
		variants := map[string][]byte{
			"trunc_header":  data[:sos/2],
			"trunc_sos":     data[:sos+4],
			"trunc_half":    data[:sos+(n-sos)/2],
			"trunc_90pct":   data[:sos+(n-sos)*9/10],
			"trunc_noeoi":   data[:n-2],
			"trunc_halfeoi": data[:n-1],
			"flip_scan":     flip(sos+(n-sos)/3, sos+(n-sos)/3+1),
			"flip_many":     flip(sos+(n-sos)/5, sos+(n-sos)*2/5, sos+(n-sos)*3/5, sos+(n-sos)*4/5),
			"zero_tail":     append(bytes.Clone(data[:sos+(n-sos)/2]), make([]byte, (n-sos)/2)...),
			"junk_after":    append(bytes.Clone(data), []byte("trailing junk after EOI")...),
		}
		for name, b := range variants {
			q := filepath.Join(dir, strings.TrimSuffix(base, ".jpg")+"."+name+".jpg")
			if err := os.WriteFile(q, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// TestJPEGMatchesPIL decodes a varied JPEG set and damaged copies of some
// of it and requires PIL's verdict: where Image.open(f).convert("RGB")
// succeeds, the same size and a maximum absolute pixel difference of 0;
// where it raises, an error matching ErrBadImage.
func TestJPEGMatchesPIL(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := t.TempDir()
	good := makeJPEGSet(t, py, filepath.Join(dir, "good"))
	broken := brokenJPEGs(t, filepath.Join(dir, "good"), good)
	all := append(append([]string{}, good...), broken...)
	ref := filepath.Join(dir, "ref")
	args := append([]string{filepath.Join(testenv.RepoRoot(t), refScript), "decode", ref}, all...)
	if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s decode: %v\n%s", refScript, err, out)
	}
	isBroken := map[string]bool{}
	for _, p := range broken {
		isBroken[p] = true
	}
	var exact, bothFail, brokenExact int
	for _, p := range all {
		name := filepath.Base(p)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		img, gotErr := decodeRGB(data, 0, nil, fullRegion)
		if pilErr, err := os.ReadFile(filepath.Join(ref, name+".err")); err == nil {
			if gotErr == nil || !errors.Is(gotErr, ErrBadImage) {
				t.Errorf("%s: PIL raises %s but decodeRGB returns %v", name, bytes.TrimSpace(pilErr), gotErr)
				continue
			}
			if !isBroken[p] && !strings.HasPrefix(name, "pilfails_") {
				t.Errorf("%s: PIL cannot decode an undamaged test image: %s", name, pilErr)
			}
			t.Logf("%s: both fail: PIL %s; featurefs %v", name, bytes.TrimSpace(pilErr), gotErr)
			bothFail++
			continue
		}
		want, err := os.ReadFile(filepath.Join(ref, name+".rgb"))
		if err != nil {
			t.Fatal(err)
		}
		sz, err := os.ReadFile(filepath.Join(ref, name+".size"))
		if err != nil {
			t.Fatal(err)
		}
		var w, h int
		if _, err := fmt.Sscan(string(sz), &w, &h); err != nil {
			t.Fatal(err)
		}
		if gotErr != nil {
			t.Errorf("%s: PIL decodes it (%dx%d) but decodeRGB fails: %v", name, w, h, gotErr)
			continue
		}
		if img.w != w || img.h != h || img.rw != w || img.rh != h {
			t.Errorf("%s: decoded %dx%d (region %dx%d), PIL %dx%d", name, img.w, img.h, img.rw, img.rh, w, h)
			continue
		}
		maxDiff, nDiff := 0, 0
		for y := 0; y < h; y++ {
			got, ref := img.row(y), want[3*w*y:3*w*(y+1)]
			for i := range got {
				if d := int(got[i]) - int(ref[i]); d != 0 {
					nDiff++
					maxDiff = max(maxDiff, d, -d)
				}
			}
		}
		if maxDiff != 0 {
			t.Errorf("%s (%dx%d): %d of %d bytes differ from PIL, max abs diff %d; want 0", name, w, h, nDiff, 3*w*h, maxDiff)
			continue
		}
		exact++
		if isBroken[p] {
			brokenExact++
		}
	}
	t.Logf("%d files: %d pixel-identical to PIL (%d of them damaged), %d rejected by both", len(all), exact, brokenExact, bothFail)
	// The set must exercise both verdicts, or the test proves nothing.
	pilFails := 0
	for _, p := range good {
		if strings.HasPrefix(filepath.Base(p), "pilfails_") {
			pilFails++
		}
	}
	if exact < len(good)-pilFails || bothFail < 6 || brokenExact < 6 {
		t.Errorf("want all %d undamaged files exact and >= 6 damaged files of each verdict; got %d exact (%d damaged), %d rejected",
			len(good), exact, brokenExact, bothFail)
	}
}

// TestJPEGRegionRows checks that decoding only a band of rows (what the
// resize reads) gives the same bytes as the whole decode, for every
// subsampling's row-group boundaries.
func TestJPEGRegionRows(t *testing.T) {
	py := testenv.RequireTorch(t)
	paths := makeJPEGSet(t, py, t.TempDir())
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		full, err := decodeRGB(data, 0, nil, fullRegion)
		if strings.HasPrefix(filepath.Base(p), "pilfails_") {
			if !errors.Is(err, ErrBadImage) {
				t.Errorf("%s: err = %v, want ErrBadImage (as PIL)", p, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		w, h := full.w, full.h
		for _, r := range []image.Rectangle{
			image.Rect(w/4, h/3, w-w/5, h-h/7),
			image.Rect(0, h-1, w, h),
			image.Rect(w-1, 0, w, 1),
			image.Rect(1, 7, w, h-9),
		} {
			r = r.Intersect(image.Rect(0, 0, w, h))
			if r.Empty() {
				continue
			}
			part, err := decodeRGB(data, 0, make([]byte, 5), func(int, int) image.Rectangle { return r })
			if err != nil {
				t.Fatalf("%s %v: %v", filepath.Base(p), r, err)
			}
			for y := r.Min.Y; y < r.Max.Y; y++ {
				fr := full.row(y)[3*r.Min.X : 3*r.Max.X]
				if !bytes.Equal(part.row(y), fr) {
					t.Fatalf("%s region %v: row %d differs from the whole decode", filepath.Base(p), r, y)
				}
			}
		}
	}
}

// TestJPEGArena decodes the varied JPEG set and its damaged copies one
// after the other through one reused arena for libjpeg's large
// allocations (what a preprocessing scratch does), at full size and at
// 1/2, and requires the bytes and verdicts of decoding without one; the
// arena must have grown to hold a progressive image's coefficients.
func TestJPEGArena(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := t.TempDir()
	good := makeJPEGSet(t, py, dir)
	all := append(append([]string{}, good...), brokenJPEGs(t, dir, good)...)
	var arena []byte
	grew := false
	for _, denom := range []int{1, 2} {
		for _, p := range all {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			full := func(w, h, d int) image.Rectangle { sw, sh := scaledSize(w, h, d); return fullRegion(sw, sh) }
			scale := func(int, int) int { return denom }
			want, wantErr := decodeRGBScaled(data, 0, nil, nil, scale, full)
			got, gotErr := decodeRGBScaled(data, 0, nil, &arena, scale, full)
			name := fmt.Sprintf("%s at 1/%d", filepath.Base(p), denom)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("%s: without an arena %v, with one %v", name, wantErr, gotErr)
			}
			if wantErr == nil && !bytes.Equal(got.pix[:3*got.w*got.h], want.pix[:3*want.w*want.h]) {
				t.Fatalf("%s: pixels differ with the arena", name)
			}
			if strings.Contains(filepath.Base(p), "prog_444_500x375.jpg") && !strings.Contains(filepath.Base(p), ".trunc") {
				// 3 components of 63x47 blocks of 128 bytes.
				grew = grew || len(arena) >= 3*63*47*128
			}
		}
	}
	if !grew || len(arena) > maxJPEGArena {
		t.Errorf("arena is %d bytes; want room for a progressive 500x375 4:4:4 image's coefficients, at most %d", len(arena), maxJPEGArena)
	}
}
