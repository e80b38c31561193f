package extractor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// fakeGPUJPEG "decodes" on the CPU (libjpeg-turbo), then adds tint to
// every red value, so that a feature shows which decoder made its pixels.
// Images whose name (names[data]) contains refuse are refused, fail are
// failed, and a batch holding panicOn panics.
type fakeGPUJPEG struct {
	max                   int
	names                 map[string]string
	refuse, fail, panicOn string
	tint                  byte

	mu       sync.Mutex
	seen     []string
	panicked []string // the images of the batches that panicked
	batches  []int
	closed   int
}

func (f *fakeGPUJPEG) Decode(imgs [][]byte, dst [][]byte) []error {
	f.mu.Lock()
	f.batches = append(f.batches, len(imgs))
	for _, b := range imgs {
		f.seen = append(f.seen, f.names[string(b)])
	}
	f.mu.Unlock()
	errs := make([]error, len(imgs))
	for i, b := range imgs {
		name := f.names[string(b)]
		if f.panicOn != "" && strings.Contains(name, f.panicOn) {
			f.mu.Lock()
			for _, b := range imgs {
				f.panicked = append(f.panicked, f.names[string(b)])
			}
			f.mu.Unlock()
			panic("fake decoder: " + name)
		}
		switch {
		case f.refuse != "" && strings.Contains(name, f.refuse):
			errs[i] = fmt.Errorf("%s: %w", name, errGPURefused)
			continue
		case f.fail != "" && strings.Contains(name, f.fail):
			errs[i] = fmt.Errorf("%s: fake decode error", name)
			continue
		}
		img, err := decodeRGB(b, DefaultMaxPixels, nil, fullRegion)
		if err != nil {
			errs[i] = err
			continue
		}
		if len(dst[i]) != 3*img.w*img.h {
			errs[i] = fmt.Errorf("dst holds %d bytes for %dx%d", len(dst[i]), img.w, img.h)
			continue
		}
		copy(dst[i], img.pix)
		for p := 0; p < len(dst[i]); p += 3 {
			dst[i][p] = min(255, dst[i][p]+f.tint)
		}
	}
	return errs
}

func (f *fakeGPUJPEG) MaxBatch() int    { return f.max }
func (f *fakeGPUJPEG) Describe() string { return "fake GPU JPEG decoder" }
func (f *fakeGPUJPEG) Close() error {
	f.mu.Lock()
	f.closed++
	f.mu.Unlock()
	return nil
}

// useGPUDecoder gives svc (a CPU service: resolveDecode opens nothing
// there) a GPU decode loop over dec, with a GPU pixel budget of pixBytes,
// gathering its batches for up to gather (long enough that they fill under
// any load); svc's Close closes it.
func useGPUDecoder(svc *Service, dec gpuJPEG, pixBytes int64, gather time.Duration) {
	loop := newGPUDecodeLoop(dec, newDecodeBudget(pixBytes))
	loop.gather = gather
	svc.sched.cfg.gpu, svc.gpuDec = loop, loop
}

// With --decode gpu, each image goes where its header says: baseline
// YCbCr and gray JPEGs to the GPU decoder, in batches; progressive,
// arithmetic-coded, CMYK, YCCK and RGB JPEGs to libjpeg-turbo. An image
// the GPU decoder refuses or fails, and every image of a batch whose
// decoder panicked, is decoded on the CPU; a corrupt one gets the CPU's
// verdict, alone. The features show which decoder made each image's
// pixels (the fake tints its own).
func TestGPUDecodeRoutesPerImage(t *testing.T) {
	py := testenv.RequireTorch(t)
	paths := makeJPEGSet(t, py, t.TempDir())
	inputs := map[string][]byte{}
	for _, p := range paths {
		if strings.HasPrefix(filepath.Base(p), "pilfails_") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(p)] = b
	}
	good := inputs["q90_420_500x375.jpg"]
	inputs["corrupt_trunc.jpg"] = good[:len(good)/3]
	inputs["corrupt_junk.jpg"] = append(append([]byte{}, good[:700]...), make([]byte, 4000)...)
	fake := &fakeGPUJPEG{max: 8, names: map[string]string{}, refuse: "q10_", fail: "q100_444", panicOn: "smooth_", tint: 9}
	for k, b := range inputs {
		fake.names[string(b)] = k
	}

	cpuSvc := newResNetService(t, nil)
	gpuSvc := newResNetService(t, nil)
	useGPUDecoder(gpuSvc, fake, 64<<20, 50*time.Millisecond)

	want, got := extractEach(cpuSvc, inputs), extractEach(gpuSvc, inputs)

	var onGPU, keptKind, refused, failed, panicked int
	for k, b := range inputs {
		w, g := want[k], got[k]
		if strings.HasPrefix(k, "corrupt_") {
			var ie *ImageError
			if !errors.As(g.err, &ie) || !errors.Is(g.err, ErrBadImage) || ie.Key != k {
				t.Errorf("%s: %v; want the CPU's verdict, an *ImageError naming it", k, g.err)
			}
			continue
		}
		if w.err != nil || g.err != nil {
			t.Errorf("%s: cpu %v, gpu %v", k, w.err, g.err)
			continue
		}
		kind, err := jpegKindOf(b)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		decodable, _ := kind.gpuDecodable()
		inPanic := slices.Contains(fake.panicked, k)
		onCPU := !decodable || strings.Contains(k, "q10_") || strings.Contains(k, "q100_444") || inPanic
		same := slices.Equal(w.b, g.b)
		switch {
		case onCPU && !same:
			t.Errorf("%s: decoded on the CPU, but its feature differs from --decode cpu's", k)
		case !onCPU && same:
			t.Errorf("%s: should have been decoded on the GPU (tinted), but its feature is the CPU's", k)
		}
		switch {
		case !decodable:
			keptKind++
			if slices.Contains(fake.seen, k) {
				t.Errorf("%s: its kind stays on the CPU, but the GPU decoder was given it", k)
			}
		case inPanic:
			panicked++
		case strings.Contains(k, "q10_"):
			refused++
		case strings.Contains(k, "q100_444"):
			failed++
		default:
			onGPU++
		}
	}
	if onGPU < 10 || keptKind < 10 || refused == 0 || failed == 0 || panicked == 0 {
		t.Fatalf("the set exercised %d GPU decodes, %d kept by kind, %d refused, %d failed, %d panicked", onGPU, keptKind, refused, failed, panicked)
	}
	st := gpuSvc.Stats().GPUDecode
	if st == nil {
		t.Fatal("no gpu_decode figures in the stats")
	}
	// Images in the panicking batch count as failed, as do the corrupt ones.
	if st.Decoded < int64(onGPU) || st.Refused != int64(refused) || st.KeptOnCPU != int64(keptKind) || st.Failed < int64(failed+panicked+2) {
		t.Errorf("stats %+v; want decoded >= %d, refused %d, kept %d, failed >= %d", *st, onGPU, refused, keptKind, failed+panicked+2)
	}
	if st.Decoded+st.Failed+st.Refused != int64(len(fake.seen)) {
		t.Errorf("stats %+v count %d images; the decoder saw %d", *st, st.Decoded+st.Failed+st.Refused, len(fake.seen))
	}
	if slices.Max(fake.batches) < 2 {
		t.Errorf("batches %v: never more than one image per GPU call", fake.batches)
	}
	if slices.Max(fake.batches) > fake.max {
		t.Errorf("batches %v: over MaxBatch %d", fake.batches, fake.max)
	}
	gpuSvc.Close()
	if fake.closed != 1 {
		t.Errorf("decoder closed %d times, want 1", fake.closed)
	}
}

// Where JPEGs are decoded is decided once, and said in one line naming
// why: --decode cpu; no GPU; no decoder in the build; auto on a GPU type
// without fidelity figures; the decoder failing to open (its error); and
// the decoder opened.
func TestResolveDecodeSaysWhy(t *testing.T) {
	saved := gpuJPEGOpener
	t.Cleanup(func() { gpuJPEGOpener = saved })
	gpu := deviceChoice{gpu: true, index: 1, name: "NVIDIA H200"}
	fake := &fakeGPUJPEG{max: 4}
	var openedDev, openedBatch int
	opener := func(dev int, _ cudaSearch, maxBatch int) (gpuJPEG, error) {
		openedDev, openedBatch = dev, maxBatch
		return fake, nil
	}
	for _, c := range []struct {
		name   string
		mode   DecodeMode
		dev    deviceChoice
		opener func(int, cudaSearch, int) (gpuJPEG, error)
		gpu    bool
		why    string
	}{
		{"cpu", DecodeCPU, gpu, opener, false, "cpu: --decode cpu"},
		{"no gpu", DecodeGPU, deviceChoice{}, opener, false, "cpu: --decode gpu needs a GPU and inference runs on the CPU"},
		{"no binding", DecodeGPU, gpu, nil, false, "this build of featurefs has no GPU JPEG decoder"},
		{"auto unmeasured", DecodeAuto, gpu, opener, false, `cpu: --decode auto: no decode fidelity figures for "NVIDIA H200" yet`},
		{"open fails", DecodeGPU, gpu, func(int, cudaSearch, int) (gpuJPEG, error) {
			return nil, errors.New("libnvjpeg.so.13 not found")
		}, false, "cpu: --decode gpu: libnvjpeg.so.13 not found"},
		{"gpu", DecodeGPU, gpu, opener, true, "gpu: fake GPU JPEG decoder (--decode gpu;"},
	} {
		gpuJPEGOpener = c.opener
		dec, why := resolveDecode(c.mode, c.dev, cudaSearch{}, 32)
		if (dec != nil) != c.gpu || !strings.Contains(why, c.why) {
			t.Errorf("%s: decoder %v, %q; want decoder %v, %q", c.name, dec != nil, why, c.gpu, c.why)
		}
	}
	if openedDev != 1 || openedBatch != 32 {
		t.Errorf("opened on device %d for batches of %d, want 1 and 32", openedDev, openedBatch)
	}
	gpuDecodeFidelity["NVIDIA H200"] = true
	t.Cleanup(func() { delete(gpuDecodeFidelity, "NVIDIA H200") })
	gpuJPEGOpener = opener
	if dec, why := resolveDecode(DecodeAuto, gpu, cudaSearch{}, 32); dec == nil || !strings.HasPrefix(why, "gpu: ") {
		t.Errorf("auto on a measured GPU type: %q", why)
	}
}

// A service asked for --decode gpu on the CPU says why it decodes on the
// CPU, in its stats; features decoded on the GPU are cached apart.
func TestDecodeChoiceInStatsAndKey(t *testing.T) {
	svc := newResNetService(t, func(c *Config) { c.Decode = DecodeGPU })
	if got := svc.Stats().JPEGDecode; !strings.HasPrefix(got, "cpu: --decode gpu needs a GPU") {
		t.Errorf("jpeg_decode %q", got)
	}
	if svc.Stats().GPUDecode != nil {
		t.Error("gpu_decode figures without a GPU decoder")
	}
	p := DefaultPreprocess()
	q := p
	q.Decoder = "nvjpeg"
	if p.Key() == q.Key() || !strings.HasSuffix(q.Key(), "/jpeg-decoder=nvjpeg") {
		t.Errorf("keys %q and %q", p.Key(), q.Key())
	}
}

// The batch sizing sees the GPU's free memory less what the JPEG
// decoder may take.
func TestReserveGPUForDecoder(t *testing.T) {
	est, free := reserveGPU(8<<30, func() (uint64, error) { return 3 << 30, nil }, gpuDecodeReserve)
	if n, err := free(); est != 8<<30-gpuDecodeReserve || n != 3<<30-gpuDecodeReserve || err != nil {
		t.Errorf("est %d, free %d %v", est, n, err)
	}
	est, free = reserveGPU(100, func() (uint64, error) { return 0, errors.New("nvml") }, gpuDecodeReserve)
	if n, err := free(); est != 0 || n != 0 || err == nil {
		t.Errorf("small: est %d, free %d %v", est, n, err)
	}
}

// The pixels decoded on the GPU come from a budget of their own: a worker
// holds them while it waits for a decode slot, and the CPU decoders in
// those slots wait for room in the decode budget. From one shared budget,
// GPU images waiting for a slot held all of it while progressive JPEGs in
// every slot waited for room: no image finished.
func TestGPUPixelsDoNotStarveCPUDecodes(t *testing.T) {
	py := testenv.RequireTorch(t)
	paths := makeJPEGSet(t, py, t.TempDir())
	read := func(name string) []byte {
		for _, p := range paths {
			if filepath.Base(p) == name {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
		t.Fatalf("no %s in the set", name)
		return nil
	}
	base, prog := read("q90_420_500x375.jpg"), read("prog_420_500x375.jpg")
	svc := newResNetService(t, func(c *Config) { c.Workers, c.DecodeMemory = 2, 1<<20 })
	fake := &fakeGPUJPEG{max: 8, names: map[string]string{}}
	useGPUDecoder(svc, fake, 1<<20, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		b := base
		if i%2 == 1 {
			b = prog
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := svc.Extract(ctx, Request{Model: "resnet50", Layer: 1, Key: fmt.Sprintf("img%d.jpg", i), Fetch: fetchOf(b)})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("extract: %v (a deadlock ends at the test's 2 minute bound)", err)
	}
	if st := svc.Stats().GPUDecode; st == nil || st.Decoded != 32 || st.KeptOnCPU != 32 {
		t.Errorf("gpu decode figures %+v, want 32 decoded on the GPU and 32 kept on the CPU", st)
	}
}

// doctor says where --decode auto decodes, and why, as resolveDecode
// would choose.
func TestDecodeAutoInDoctor(t *testing.T) {
	gpu := devicePick{devs: []deviceChoice{{gpu: true, name: "NVIDIA H200"}}}
	ok := NVJPEGStatus{Path: "/x/libnvjpeg.so.13", Version: "13.0.1"}
	for _, c := range []struct {
		name      string
		pick      devicePick
		nv        NVJPEGStatus
		where, in string
	}{
		{"cpu", devicePick{devs: []deviceChoice{{}}}, ok, "cpu", "inference runs on the CPU"},
		{"missing", gpu, NVJPEGStatus{Missing: "libnvjpeg.so.13 not found"}, "cpu", "libnvjpeg.so.13 not found"},
		{"unmeasured", gpu, ok, "cpu", `no decode fidelity figures for "NVIDIA H200"`},
	} {
		if where, why := decodeAuto(c.pick, c.nv); where != c.where || !strings.Contains(why, c.in) {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, where, why, c.where, c.in)
		}
	}
	gpuDecodeFidelity["NVIDIA H200"] = true
	defer delete(gpuDecodeFidelity, "NVIDIA H200")
	if where, why := decodeAuto(gpu, ok); where != "gpu" || !strings.Contains(why, "nvJPEG 13.0.1 on NVIDIA H200") {
		t.Errorf("measured: %s (%s)", where, why)
	}
}
