package extractor

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The nvJPEG binding (nvjpeg.go) against fake libnvjpeg.so.13 and
// libcudart.so.13 built here from testdata/fakenvjpeg (gcc): no GPU needed.
// The fakes log every call to $FAKE_CUDA_LOG; see fake_nvjpeg.c for what
// they do.

// fakeNVJPEGLibs is the one build of the fakes per test process: the fake
// nvJPEG calls into the fake runtime, and RTLD_GLOBAL libraries of a
// second build would bind to the first's symbols.
var fakeNVJPEGLibs struct {
	once                                 sync.Once
	dir, nvjpeg, cudart, bad, noPrealloc string
	err                                  error
}

// TestMain removes the fakes' build.
func TestMain(m *testing.M) {
	code := m.Run()
	if fakeNVJPEGLibs.dir != "" {
		os.RemoveAll(fakeNVJPEGLibs.dir)
	}
	os.Exit(code)
}

// fakeNVJPEG builds the fakes once and returns the paths of the fake
// libnvjpeg.so.13 and libcudart.so.13, and of a libnvjpeg.so.13 without
// nvjpegDecodeBatched.
func fakeNVJPEG(t *testing.T) (nvjpeg, cudart, noBatched string) {
	t.Helper()
	f := &fakeNVJPEGLibs
	f.once.Do(func() {
		f.dir, f.err = os.MkdirTemp("", "fakenvjpeg")
		if f.err != nil {
			return
		}
		src, err := filepath.Abs("testdata/fakenvjpeg")
		if err != nil {
			f.err = err
			return
		}
		f.cudart = filepath.Join(f.dir, "libcudart.so.13")
		f.nvjpeg = filepath.Join(f.dir, "libnvjpeg.so.13")
		f.bad = filepath.Join(f.dir, "nobatched", "libnvjpeg.so.13")
		f.noPrealloc = filepath.Join(f.dir, "noprealloc", "libnvjpeg.so.13")
		for _, d := range []string{filepath.Dir(f.bad), filepath.Dir(f.noPrealloc)} {
			if f.err = os.MkdirAll(d, 0o755); f.err != nil {
				return
			}
		}
		cc := func(args ...string) error {
			args = append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", "."}, args...)
			out, err := exec.Command("gcc", args...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		}
		// -I . : nvjpeg.h, the declarations the binding uses.
		if f.err = cc("-o", f.cudart, filepath.Join(src, "fake_cudart.c")); f.err != nil {
			return
		}
		if f.err = cc("-o", f.nvjpeg, filepath.Join(src, "fake_nvjpeg.c"), f.cudart); f.err != nil {
			return
		}
		if f.err = cc("-DFAKE_OMIT_DECODE_BATCHED", "-o", f.bad, filepath.Join(src, "fake_nvjpeg.c"), f.cudart); f.err != nil {
			return
		}
		f.err = cc("-DFAKE_OMIT_PREALLOCATE", "-o", f.noPrealloc, filepath.Join(src, "fake_nvjpeg.c"), f.cudart)
	})
	if f.err != nil {
		t.Fatalf("building the fake nvJPEG (needs gcc): %v", f.err)
	}
	return f.nvjpeg, f.cudart, f.bad
}

// fakeCUDALog points the fakes' call log at a new file and returns a
// function reading the calls logged so far.
func fakeCUDALog(t *testing.T) func() []string {
	p := filepath.Join(t.TempDir(), "calls.log")
	t.Setenv("FAKE_CUDA_LOG", p)
	return func() []string {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// openFakeNVJPEG opens a decoder on the fakes and closes it at the end.
func openFakeNVJPEG(t *testing.T, maxBatch int) *nvjpegDecoder {
	t.Helper()
	nv, rt, _ := fakeNVJPEG(t)
	g, err := openNVJPEG(0, nv, rt, maxBatch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g.(*nvjpegDecoder)
}

// synthJPEG is a JPEG's marker structure, enough for nvJPEG's header
// parsers (and the fake's): SOI, a COM segment holding note, a frame header
// of type sof (0xC0 baseline, 0xC2 progressive) with comps components, a
// scan and EOI.
func synthJPEG(w, h, comps int, sof byte, note string) []byte {
	var b bytes.Buffer
	b.Write([]byte{0xFF, 0xD8})
	com := []byte(note + " pad")
	b.Write([]byte{0xFF, 0xFE, byte((len(com) + 2) >> 8), byte(len(com) + 2)})
	b.Write(com)
	n := 8 + 3*comps
	b.Write([]byte{0xFF, sof, byte(n >> 8), byte(n), 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(comps)})
	for c := range comps {
		b.Write([]byte{byte(c + 1), 0x11, 0})
	}
	ns := 6 + 2*comps
	b.Write([]byte{0xFF, 0xDA, byte(ns >> 8), byte(ns), byte(comps)})
	for c := range comps {
		b.Write([]byte{byte(c + 1), 0})
	}
	b.Write([]byte{0, 63, 0, 0x12, 0x34, 0x56, 0xFF, 0xD9})
	return b.Bytes()
}

// realJPEG is a baseline 4:2:0 JPEG from Go's encoder.
func realJPEG(t *testing.T, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 9), uint8(y * 5), 100, 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fakePixels is what the fake decodes data (w x h, comps components) to.
func fakePixels(data []byte, w, h, comps int) []byte {
	var seed byte
	for _, c := range data {
		seed += c
	}
	out := make([]byte, 0, 3*w*h)
	for y := range h {
		for x := range w {
			for c := range 3 {
				k := 101 * c
				if comps == 1 {
					k = 0
				}
				out = append(out, byte(7*x+13*y+k)+seed)
			}
		}
	}
	return out
}

// count returns how many logged calls start with prefix.
func count(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// deviceBytes sums the fake's cudaMalloc minus cudaFree.
func deviceBytes(t *testing.T, calls []string) int {
	n := 0
	for _, c := range calls {
		f := strings.Fields(c)
		if len(f) == 2 && (f[0] == "cudaMalloc" || f[0] == "cudaFree") {
			v, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("log line %q", c)
			}
			if f[0] == "cudaFree" {
				v = -v
			}
			n += v
		}
	}
	return n
}

// A library or a function that is not there is an error naming it; so is a
// device the runtime does not have. Nothing is left made on the way.
func TestNVJPEGOpenMissingLibraryOrSymbol(t *testing.T) {
	nv, rt, noBatched := fakeNVJPEG(t)
	calls := fakeCUDALog(t)
	missing := filepath.Join(t.TempDir(), "libnvjpeg.so.13")
	if _, err := openNVJPEG(0, missing, rt, 8); err == nil || !strings.Contains(err.Error(), "cannot load "+missing) {
		t.Errorf("missing libnvjpeg: %v, want an error naming %s", err, missing)
	}
	if _, err := openNVJPEG(0, nv, missing, 8); err == nil || !strings.Contains(err.Error(), "cannot load "+missing) {
		t.Errorf("missing libcudart: %v, want an error naming %s", err, missing)
	}
	if _, err := openNVJPEG(0, noBatched, rt, 8); err == nil || err.Error() != "nvJPEG: "+noBatched+" has no symbol nvjpegDecodeBatched" {
		t.Errorf("library without nvjpegDecodeBatched: %v", err)
	}
	// Only a symbol of the fake runtime: not of libnvjpeg.
	if _, err := openNVJPEG(0, rt, rt, 8); err == nil || !strings.Contains(err.Error(), rt+" has no symbol nvjpegGetProperty") {
		t.Errorf("libcudart given as libnvjpeg: %v", err)
	}
	if c := calls(); len(c) != 0 {
		t.Errorf("calls made before every symbol was found: %q", c)
	}
	// nvjpegDecodeBatchedPreAllocate is optional.
	if g, err := openNVJPEG(0, fakeNVJPEGLibs.noPrealloc, rt, 8); err != nil {
		t.Errorf("library without nvjpegDecodeBatchedPreAllocate: %v", err)
	} else {
		g.Close()
	}
	if c := calls(); count(c, "nvjpegDecodeBatchedPreAllocate") != 0 || count(c, "nvjpegJpegStreamCreate") != 1 {
		t.Errorf("without nvjpegDecodeBatchedPreAllocate: calls %q", c)
	}
	calls = fakeCUDALog(t)
	_, err := openNVJPEG(3, nv, rt, 8)
	if err == nil || !strings.Contains(err.Error(), "cudaSetDevice(3): invalid device ordinal") {
		t.Errorf("cuda:3 on a one-GPU host: %v", err)
	}
	if c := calls(); count(c, "nvjpegCreateEx") != 0 || count(c, "cudaStreamCreateWithFlags") != 0 {
		t.Errorf("calls after cudaSetDevice failed: %q", c)
	}
	if v, err := probeNVJPEG(nv, rt); err != nil || v != "13.0.1" {
		t.Errorf("probeNVJPEG: %q, %v; want the fake's 13.0.1", v, err)
	}
	if _, err := probeNVJPEG(missing, rt); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("probeNVJPEG of a missing library: %v", err)
	}
}

// The hardware backend first; refused, the default backend, said in
// Describe with the reason.
func TestNVJPEGHardwareFallbackAndDescribe(t *testing.T) {
	calls := fakeCUDALog(t)
	d := openFakeNVJPEG(t, 4)
	if got, want := d.Describe(), "nvJPEG 13.0.1 (hardware backend) on cuda:0"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if d.MaxBatch() != 4 {
		t.Errorf("MaxBatch() = %d", d.MaxBatch())
	}
	want := []string{"cudaSetDevice 0", "cudaStreamCreateWithFlags 1", "nvjpegCreateEx 3", "nvjpegJpegStateCreate", "nvjpegJpegStreamCreate",
		"nvjpegDecodeBatchedPreAllocate 1 1 1 0 5", "nvjpegGetProperty 0", "nvjpegGetProperty 1", "nvjpegGetProperty 2"}
	if c := calls(); !slices.Equal(c, want) {
		t.Errorf("open's calls %q, want %q", c, want)
	}

	// A library that refuses NVJPEG_FLAGS_BITSTREAM_STRICT is used
	// without it, and says so.
	t.Setenv("FAKE_NVJPEG_NO_STRICT", "1")
	if got, want := openFakeNVJPEG(t, 4).Describe(), "nvJPEG 13.0.1 (hardware backend, not strict) on cuda:0"; got != want {
		t.Errorf("without strict: Describe() = %q, want %q", got, want)
	}
	os.Unsetenv("FAKE_NVJPEG_NO_STRICT")

	t.Setenv("FAKE_NVJPEG_NO_HW", "1")
	calls = fakeCUDALog(t)
	d = openFakeNVJPEG(t, 4)
	if got, want := d.Describe(), "nvJPEG 13.0.1 (default backend; hardware backend refused: nvjpegCreateEx NVJPEG_STATUS_ARCH_MISMATCH) on cuda:0"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	c := calls()
	if i, j := slices.Index(c, "nvjpegCreateEx 3"), slices.Index(c, "nvjpegCreateEx 0"); i < 0 || j < i ||
		count(c, "nvjpegJpegStreamCreate") != 0 || count(c, "nvjpegDecodeBatchedPreAllocate") != 0 {
		t.Errorf("calls %q: want the hardware backend tried, then the default one, without a jpeg stream nor pre-allocation", c)
	}
	// The default backend takes a progressive JPEG (no hardware check).
	img := synthJPEG(5, 4, 3, 0xC2, "progressive")
	dst := make([]byte, 3*5*4)
	if errs := d.Decode([][]byte{img}, [][]byte{dst}); errs[0] != nil || !bytes.Equal(dst, fakePixels(img, 5, 4, 3)) {
		t.Errorf("progressive on the default backend: %v", errs[0])
	}
	if c := calls(); count(c, "nvjpegDecodeBatchedSupported") != 0 {
		t.Errorf("the hardware check ran on the default backend: %q", c)
	}
}

// A batch is one nvjpegDecodeBatched call; each image's pixels land in its
// own destination: sizes, gray and color, a real JPEG's SOF.
func TestNVJPEGBatchDecodesPixels(t *testing.T) {
	calls := fakeCUDALog(t)
	d := openFakeNVJPEG(t, 8)
	real := realJPEG(t, 33, 17)
	imgs := [][]byte{
		synthJPEG(7, 5, 3, 0xC0, "a"),
		synthJPEG(1, 1, 3, 0xC0, "b"),
		synthJPEG(40, 3, 1, 0xC0, "gray"),
		real,
		synthJPEG(64, 48, 3, 0xC0, "big"),
	}
	sizes := [][3]int{{7, 5, 3}, {1, 1, 3}, {40, 3, 1}, {33, 17, 3}, {64, 48, 3}}
	decode := func() {
		dst := make([][]byte, len(imgs))
		for i, s := range sizes {
			dst[i] = make([]byte, 3*s[0]*s[1])
		}
		errs := d.Decode(imgs, dst)
		for i, s := range sizes {
			if errs[i] != nil {
				t.Errorf("image %d: %v", i, errs[i])
			} else if !bytes.Equal(dst[i], fakePixels(imgs[i], s[0], s[1], s[2])) {
				t.Errorf("image %d (%dx%d): pixels differ from the decoder's", i, s[0], s[1])
			}
		}
	}
	decode()
	c := calls()
	if count(c, "nvjpegDecodeBatched ") != 1 || !slices.Contains(c, "nvjpegDecodeBatched 5") ||
		!slices.Contains(c, "nvjpegDecodeBatchedInitialize 5 1 5") {
		t.Errorf("calls %q: want one batch of 5, initialized for 5, RGBI", c)
	}
	if n := count(c, "nvjpegDecodeBatchedSupported"); n != 5 {
		t.Errorf("%d hardware checks, want 5", n)
	}
	if n := count(c, "cudaMemcpyAsync"); n != 5 {
		t.Errorf("%d copies, want 5", n)
	}
	// Same batch size again: no new initialization, no new device memory.
	decode()
	c = calls()
	if count(c, "nvjpegDecodeBatchedInitialize") != 1 || count(c, "cudaMalloc") != 1 || count(c, "nvjpegDecodeBatched ") != 2 {
		t.Errorf("second batch: calls %q; want no new initialization nor allocation", c)
	}
	// More images than MaxBatch: split.
	d2 := openFakeNVJPEG(t, 2)
	dst := make([][]byte, len(imgs))
	for i, s := range sizes {
		dst[i] = make([]byte, 3*s[0]*s[1])
	}
	for i, err := range d2.Decode(imgs, dst) {
		if err != nil || !bytes.Equal(dst[i], fakePixels(imgs[i], sizes[i][0], sizes[i][1], sizes[i][2])) {
			t.Errorf("split batch, image %d: %v", i, err)
		}
	}
}

// A corrupt image fails alone: the batch is retried one image at a time,
// the others decode, the state is initialized again, and later batches
// work (item 4 of issue 38).
func TestNVJPEGCorruptImageFailsAlone(t *testing.T) {
	calls := fakeCUDALog(t)
	d := openFakeNVJPEG(t, 8)
	imgs := [][]byte{
		synthJPEG(6, 4, 3, 0xC0, "one"),
		synthJPEG(6, 4, 3, 0xC0, "two"),
		synthJPEG(6, 4, 3, 0xC0, "FAKE-CORRUPT"),
		synthJPEG(6, 4, 1, 0xC0, "four"),
	}
	dst := make([][]byte, len(imgs))
	for i := range dst {
		dst[i] = make([]byte, 3*6*4)
	}
	errs := d.Decode(imgs, dst)
	for i := range imgs {
		comps := 3
		if i == 3 {
			comps = 1
		}
		switch {
		case i == 2:
			if !errors.Is(errs[i], ErrBadImage) || errors.Is(errs[i], errGPURefused) ||
				!strings.Contains(errs[i].Error(), "nvjpegDecodeBatched: NVJPEG_STATUS_BAD_JPEG") {
				t.Errorf("corrupt image: %v, want its own ErrBadImage naming nvjpegDecodeBatched's status", errs[i])
			}
		case errs[i] != nil:
			t.Errorf("image %d failed with the corrupt one: %v", i, errs[i])
		case !bytes.Equal(dst[i], fakePixels(imgs[i], 6, 4, comps)):
			t.Errorf("image %d: wrong pixels", i)
		}
	}
	c := calls()
	if count(c, "nvjpegDecodeBatched 4") != 1 || count(c, "nvjpegDecodeBatched 1") != 4 {
		t.Errorf("calls %q: want the batch of 4, then each of the 4 alone", c)
	}
	// A good batch after it: one call, no retry.
	good := [][]byte{imgs[0], imgs[1], imgs[3], imgs[0]}
	before := len(c)
	errs = d.Decode(good, [][]byte{dst[0], dst[1], dst[3], make([]byte, 3*6*4)})
	for i, err := range errs {
		if err != nil {
			t.Errorf("batch after the corrupt one, image %d: %v", i, err)
		}
	}
	after := calls()[before:]
	if count(after, "nvjpegDecodeBatched ") != 1 || count(after, "nvjpegDecodeBatchedInitialize 4") != 1 {
		t.Errorf("calls after the corrupt batch %q: want one initialized batch of 4", after)
	}
	// Alone, the corrupt image is one call and its error.
	errs = d.Decode(imgs[2:3], dst[2:3])
	if !errors.Is(errs[0], ErrBadImage) {
		t.Errorf("corrupt image alone: %v", errs[0])
	}
}

// Images the GPU decoder does not take are errGPURefused (the CPU decodes
// them); an unreadable header and an empty file are the image's own
// errors; a destination of the wrong size is that image's error.
func TestNVJPEGRefusedBadAndMismatch(t *testing.T) {
	calls := fakeCUDALog(t)
	d := openFakeNVJPEG(t, 8)
	good := synthJPEG(4, 4, 3, 0xC0, "good")
	imgs := [][]byte{
		synthJPEG(4, 4, 4, 0xC0, "cmyk"),
		synthJPEG(4, 4, 3, 0xC2, "progressive"),
		synthJPEG(4, 4, 3, 0xC0, "FAKE-UNSUPPORTED"),
		synthJPEG(4, 4, 3, 0xC0, "FAKE-BADHDR"),
		{},
		[]byte("not a jpeg"),
		synthJPEG(4, 4, 3, 0xC0, "short dst"),
		good,
	}
	dst := make([][]byte, len(imgs))
	for i := range dst {
		dst[i] = make([]byte, 3*4*4)
	}
	dst[6] = dst[6][:47]
	errs := d.Decode(imgs, dst)
	for i, want := range []string{"4 components", "nvjpegDecodeBatchedSupported", "nvjpegDecodeBatchedSupported"} {
		if !errors.Is(errs[i], errGPURefused) || errors.Is(errs[i], ErrBadImage) || !strings.Contains(errs[i].Error(), want) {
			t.Errorf("image %d: %v, want errGPURefused saying %q", i, errs[i], want)
		}
	}
	for i := 3; i <= 6; i++ {
		if !errors.Is(errs[i], ErrBadImage) || errors.Is(errs[i], errGPURefused) {
			t.Errorf("image %d: %v, want its own ErrBadImage", i, errs[i])
		}
	}
	if !strings.Contains(errs[6].Error(), "destination of 47 bytes for 4x4 RGB (48 bytes)") {
		t.Errorf("short destination: %v", errs[6])
	}
	if errs[7] != nil || !bytes.Equal(dst[7], fakePixels(good, 4, 4, 3)) {
		t.Errorf("the good image: %v", errs[7])
	}
	if c := calls(); !slices.Contains(c, "nvjpegDecodeBatched 1") || count(c, "nvjpegDecodeBatched ") != 1 {
		t.Errorf("calls %q: want only the good image decoded, in one batch", c)
	}
	if errs := d.Decode(imgs[:2], dst[:1]); len(errs) != 2 || !errors.Is(errs[0], errGPURefused) || !errors.Is(errs[1], errGPURefused) {
		t.Errorf("2 images, 1 destination: %v", errs)
	}
}

// A lost CUDA context (a sticky error) is found after the failed batch:
// the image that caused it, and every image after, go to the CPU.
func TestNVJPEGLostContextSendsToCPU(t *testing.T) {
	fakeCUDALog(t)
	d := openFakeNVJPEG(t, 8)
	imgs := [][]byte{synthJPEG(3, 3, 3, 0xC0, "ok"), synthJPEG(3, 3, 3, 0xC0, "FAKE-STICKY"), synthJPEG(3, 3, 3, 0xC0, "ok too")}
	dst := [][]byte{make([]byte, 27), make([]byte, 27), make([]byte, 27)}
	errs := d.Decode(imgs, dst)
	for i, err := range errs {
		if !errors.Is(err, errGPURefused) || !strings.Contains(err.Error(), "the CUDA context of cuda:0 failed (an illegal memory access was encountered) after nvjpegDecodeBatched: NVJPEG_STATUS_EXECUTION_FAILED") {
			t.Errorf("image %d: %v, want errGPURefused naming the lost context", i, err)
		}
	}
	errs = d.Decode(imgs[:1], dst[:1])
	if !errors.Is(errs[0], errGPURefused) {
		t.Errorf("after the context was lost: %v", errs[0])
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close after the context was lost: %v", err)
	}
}

// Close frees every GPU object and byte made; a second Close does nothing;
// Decode after Close refuses instead of crashing.
func TestNVJPEGCloseTwiceFreesAll(t *testing.T) {
	calls := fakeCUDALog(t)
	nv, rt, _ := fakeNVJPEG(t)
	g, err := openNVJPEG(0, nv, rt, 4)
	if err != nil {
		t.Fatal(err)
	}
	img := synthJPEG(10, 10, 3, 0xC0, "x")
	if errs := g.Decode([][]byte{img}, [][]byte{make([]byte, 300)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	c := calls()
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if c2 := calls(); len(c2) != len(c) {
		t.Errorf("second Close made calls: %q", c2[len(c):])
	}
	for _, pair := range [][2]string{{"nvjpegCreateEx", "nvjpegDestroy"}, {"nvjpegJpegStateCreate", "nvjpegJpegStateDestroy"},
		{"nvjpegJpegStreamCreate", "nvjpegJpegStreamDestroy"}, {"cudaStreamCreateWithFlags", "cudaStreamDestroy"}, {"cudaMalloc", "cudaFree"}} {
		if count(c, pair[0]) != 1 || count(c, pair[1]) != 1 {
			t.Errorf("%s x%d, %s x%d: want each once", pair[0], count(c, pair[0]), pair[1], count(c, pair[1]))
		}
	}
	if n := deviceBytes(t, c); n != 0 {
		t.Errorf("%d device bytes left after Close", n)
	}
	if errs := g.Decode([][]byte{img}, [][]byte{make([]byte, 300)}); !errors.Is(errs[0], errGPURefused) {
		t.Errorf("Decode after Close: %v", errs[0])
	}
	// A failed open frees what it made: the hardware backend refused and
	// the default one too (no device 1 is not it: cudaSetDevice 0 works).
	t.Setenv("FAKE_NVJPEG_NO_HW", "1")
	calls = fakeCUDALog(t)
	t.Setenv("FAKE_CUDA_DEVICES", "2")
	if g, err := openNVJPEG(1, nv, rt, 2); err != nil {
		t.Fatal(err)
	} else {
		g.Close()
	}
	c = calls()
	if count(c, "nvjpegCreateEx") != 2 || count(c, "nvjpegDestroy") != 1 || count(c, "cudaStreamDestroy") != 1 || !slices.Contains(c, "cudaSetDevice 1") {
		t.Errorf("open on cuda:1 with the default backend, then Close: %q", c)
	}
}

// The device output buffer is kept between calls while it is within the
// bound, freed after a call that needed more; a failed allocation sends the
// images to the CPU without harm.
func TestNVJPEGDeviceBufferBounded(t *testing.T) {
	calls := fakeCUDALog(t)
	d := openFakeNVJPEG(t, 4)
	d.setKept(8 << 20)
	small := synthJPEG(100, 100, 3, 0xC0, "small")
	big := synthJPEG(1500, 1000, 3, 0xC0, "big") // 4.5 MB each, 9 MB for two
	for range 3 {
		if errs := d.Decode([][]byte{small}, [][]byte{make([]byte, 3*100*100)}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	c := calls()
	if count(c, "cudaMalloc") != 1 || d.kept() == 0 || d.kept() > 8<<20 || deviceBytes(t, c) != d.kept() {
		t.Errorf("small batches: %d allocations, %d kept, %d held: want one buffer kept", count(c, "cudaMalloc"), d.kept(), deviceBytes(t, c))
	}
	dst := [][]byte{make([]byte, 3*1500*1000), make([]byte, 3*1500*1000)}
	errs := d.Decode([][]byte{big, big}, dst)
	if errs[0] != nil || errs[1] != nil || !bytes.Equal(dst[1], fakePixels(big, 1500, 1000, 3)) {
		t.Fatalf("big batch: %v", errs)
	}
	c = calls()
	if d.kept() != 0 || deviceBytes(t, c) != 0 {
		t.Errorf("after a batch needing more than the bound: %d kept, %d held; want 0", d.kept(), deviceBytes(t, c))
	}
	// Out of device memory: refused (the CPU decodes), and the next batch
	// that fits works.
	t.Setenv("FAKE_CUDA_MALLOC_LIMIT", strconv.Itoa(4<<20))
	errs = d.Decode([][]byte{big, big}, dst)
	for i, err := range errs {
		if !errors.Is(err, errGPURefused) || !strings.Contains(err.Error(), "cudaMalloc: out of memory") {
			t.Errorf("image %d without device memory: %v", i, err)
		}
	}
	if errs := d.Decode([][]byte{small}, [][]byte{make([]byte, 3*100*100)}); errs[0] != nil {
		t.Errorf("after running out of device memory: %v", errs[0])
	}
}

// The whole --decode gpu path over the fake nvJPEG: the opener finds the
// libraries where the CUDA libraries are searched (--cuda-lib-dir), the
// scheduler sends baseline JPEGs to it in batches and takes its pixels
// (the fake's pattern: the features differ from the CPU's), a JPEG whose
// batch nvJPEG fails (FAKE-CORRUPT) is decoded on the CPU, and a
// progressive one never reaches it.
func TestNVJPEGThroughTheScheduler(t *testing.T) {
	nvjpeg, _, _ := fakeNVJPEG(t)
	dec, err := gpuJPEGOpener(0, cudaSearch{extra: []string{filepath.Dir(nvjpeg)}, env: func(string) string { return "" }}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dec.Describe(), "nvJPEG") {
		t.Errorf("describe %q", dec.Describe())
	}
	cpuSvc := newResNetService(t, nil)
	gpuSvc := newResNetService(t, nil)
	useGPUDecoder(gpuSvc, dec, 64<<20, 50*time.Millisecond)

	inputs := map[string][]byte{}
	for i := range 6 {
		inputs[fmt.Sprintf("img%d.jpg", i)] = jpegOf(t, 300+10*i, 200, i)
	}
	good := jpegOf(t, 320, 240, 9)
	// Bytes after the end of image: libjpeg ignores them, the fake fails
	// the batch on them.
	inputs["corrupt_for_nvjpeg.jpg"] = append(append([]byte{}, good...), "FAKE-CORRUPT"...)
	prog := append([]byte{}, good...)
	sof := bytes.Index(prog, []byte{0xFF, 0xC0})
	prog[sof+1] = 0xC2 // marked progressive: kept on the CPU by its header
	inputs["marked_progressive.jpg"] = prog

	want, got := extractEach(cpuSvc, inputs), extractEach(gpuSvc, inputs)
	for k := range inputs {
		if err := got[k].err; err != nil && k != "marked_progressive.jpg" {
			t.Errorf("%s: %v", k, err)
		}
		same := bytes.Equal(want[k].b, got[k].b)
		switch {
		case strings.HasPrefix(k, "img") && same:
			t.Errorf("%s: the CPU's feature, not from nvJPEG's pixels", k)
		case k == "corrupt_for_nvjpeg.jpg" && !same:
			t.Errorf("%s: nvJPEG failed it, so the CPU should have decoded it", k)
		}
	}
	st := gpuSvc.Stats().GPUDecode
	if st == nil || st.Decoded != 6 || st.KeptOnCPU != 1 || st.Failed+st.Refused != 1 {
		t.Errorf("gpu decode figures %+v: want 6 decoded, 1 kept on the CPU by its kind, 1 failed or refused", st)
	}
}
