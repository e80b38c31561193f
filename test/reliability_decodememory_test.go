package test

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// largeImagesScript writes the images of TestReliabilityDecodeMemory into
// argv[1]: 16-bit RGBA PNGs of 9000x9000 (smooth, so about a megabyte each;
// image/png decodes one into 648 MB of NRGBA64), 8-bit RGB PNGs of
// 8000x8000 and progressive JPEGs of 8000x6000, and one small JPEG. It
// prints the keys, one a line.
const largeImagesScript = `
import os, struct, sys, zlib
import numpy as np
from PIL import Image

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)

def ramp_png(path, w, h, depth, k):
    # Row 0 varies along x; every 64th row adds one to the high byte of
    # green and blue (PNG filter 2, Up), the rows between repeat the row
    # above: smooth both ways, and the IDAT is mostly zeros.
    alpha = depth == 16
    xs = np.arange(w) / w
    chans = [0.3 * xs, 0.15 + 0.15 * np.sin(xs * (6 + 3 * k)), 0.15 + 0.15 * np.cos(xs * (4 + 2 * k))]
    if alpha:
        chans.append(np.ones(w))
    row0 = (np.stack(chans, -1) * ((1 << depth) - 1)).astype(">u2" if depth == 16 else np.uint8).tobytes()
    step = (b"\0\0\1\0\1\0\0\0" if alpha else b"\0\1\1") * w
    zero = b"\2" + bytes(len(row0))
    co = zlib.compressobj(1)
    parts = [co.compress(b"\0" + row0)]
    for y in range(1, h):
        parts.append(co.compress(b"\2" + step if y % 64 == 0 else zero))
    parts.append(co.flush())
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, 6 if alpha else 2, 0, 0, 0))
                + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))

def smooth(w, h, k):
    xs = np.arange(w, dtype=np.float32)[None, :] / w
    ys = np.arange(h, dtype=np.float32)[:, None] / h
    a = np.stack([xs + 0 * ys, ys + 0 * xs, 0.5 + 0.4 * np.sin(xs * (9 + k)) * np.cos(ys * (7 + k))], -1)
    return Image.fromarray((a * 255).astype(np.uint8), "RGB")

keys = []
for k in range(3):
    ramp_png(os.path.join(out, "rgba16-%d.png" % k), 9000, 9000, 16, k)
    keys.append("rgba16-%d.png" % k)
for k in range(2):
    ramp_png(os.path.join(out, "rgb8-%d.png" % k), 8000, 8000, 8, k + 3)
    keys.append("rgb8-%d.png" % k)
for k in range(2):
    smooth(800, 600, k + 5).resize((8000, 6000), Image.BILINEAR).save(os.path.join(out, "progressive-%d.jpg" % k), quality=90, progressive=True)
    keys.append("progressive-%d.jpg" % k)
smooth(320, 240, 7).save(os.path.join(out, "small.jpg"), quality=90)
print("\n".join(keys))
`

// decodeBudget is the mount's default --decode-memory (mountopts).
const decodeBudget = 1 << 30

// TestReliabilityDecodeMemory reads seven large images at once through a
// kernel mount with the default --decode-memory (1 GiB): three 9000x9000
// 16-bit RGBA PNGs (891 MB each to decode and convert), two 8000x8000 RGB
// PNGs and two 8000x6000 progressive JPEGs, 4.4 GB of decode memory in
// all. Before the bound, two decode workers (this machine's two cores)
// each held a 16-bit PNG and the mount's peak RSS rose by about 2 GB.
//   - the mount's peak RSS (VmHWM) rises by at most the budget plus
//     256 MiB above its peak after a small read;
//   - once the burst is over its RSS comes back to within 256 MiB of that
//     peak;
//   - every feature equals torchvision's forward on the PIL-decoded image
//     (scripts/ref_features.py; cosine >= 0.999).
func TestReliabilityDecodeMemory(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := filepath.Join(t.TempDir(), "objects")
	t0 := time.Now()
	out, err := exec.Command(py, "-c", largeImagesScript, dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("generating images: %v\n%s", err, stderr)
	}
	keys := strings.Fields(string(out))
	t.Logf("generated %d large images in %v", len(keys), time.Since(t0).Round(time.Millisecond))

	// torchvision's features of the same images (run before the mount, so
	// that Python's memory is not counted against nothing and the two do
	// not compete for the cores).
	refDir := filepath.Join(t.TempDir(), "ref")
	args := []string{filepath.Join(testenv.RepoRoot(t), "scripts", "ref_features.py"),
		"--model", modelName, "--seed", "0", "--module", "layer3.3", "--threads", "2", "--out", refDir}
	refIndex := map[string]int{} // ref_features.py numbers its outputs by argument
	for i, k := range keys {
		args = append(args, filepath.Join(dir, k))
		refIndex[k] = i
	}
	t0 = time.Now()
	if b, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("ref_features.py: %v\n%s", err, b)
	}
	t.Logf("torchvision reference in %v", time.Since(t0).Round(time.Millisecond))

	srv, env := minioBucket(t, "large", "", dir)
	m := testMount(t, mountConfig{Source: "s3://large", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off"}})
	layerDir := m.Layer(testLayer)
	names := featureNames(append([]string{"small.jpg"}, keys...))

	// Warm up on a small image (model loaded, session open, one batch
	// run), then take the memory baseline.
	if _, err := os.ReadFile(filepath.Join(layerDir, names["small.jpg"])); err != nil {
		t.Fatal(err)
	}
	hwm0 := rssBytes(t, m.PID(), "VmHWM")

	var wg sync.WaitGroup
	var mu sync.Mutex
	errs, data := map[string]error{}, map[string][]byte{}
	t0 = time.Now()
	for _, k := range keys {
		wg.Go(func() {
			b, err := readErr(filepath.Join(layerDir, names[k]))
			mu.Lock()
			defer mu.Unlock()
			errs[k], data[k] = err, b
		})
	}
	wg.Wait()
	took := time.Since(t0)
	hwm := rssBytes(t, m.PID(), "VmHWM")
	t.Logf("%d large reads at once in %v: peak RSS %s -> %s (+%s; bound +%s)", len(keys), took.Round(time.Millisecond),
		mib(hwm0), mib(hwm), mib(hwm-hwm0), mib(decodeBudget+256<<20))
	if hwm-hwm0 > decodeBudget+256<<20 {
		t.Errorf("peak RSS rose by %s reading %d large images at once; the decode budget is %s (+256 MiB allowed)",
			mib(hwm-hwm0), len(keys), mib(decodeBudget))
	}

	sort.Strings(keys)
	for _, k := range keys {
		if errs[k] != nil {
			t.Errorf("%s: %v", k, errs[k])
			continue
		}
		got, err := parseNPY(data[k])
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		ref := readNPY(t, filepath.Join(refDir, strconv.Itoa(refIndex[k])+".npy"))
		c := cosine64(got.Data, ref.Data)
		t.Logf("%-22s cosine %.6f", k, c)
		if !(c >= 0.999) {
			t.Errorf("%s: features differ from torchvision's on PIL's decode: cosine %.6f < 0.999", k, c)
		}
	}

	// Memory goes back after the burst (the budget frees the heap once it
	// is idle; give it a few seconds).
	var rss int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		rss = rssBytes(t, m.PID(), "VmRSS")
		if rss-hwm0 <= 256<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("RSS after the burst: %s (baseline peak %s)", mib(rss), mib(hwm0))
	if rss-hwm0 > 256<<20 {
		t.Errorf("RSS %s 10 s after the burst, more than 256 MiB over the peak before it (%s)", mib(rss), mib(hwm0))
	}
}

// cosine64 is the cosine similarity of two tensors (NaN when their
// lengths differ).
func cosine64(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.NaN()
	}
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}
