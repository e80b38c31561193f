package test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// badObjectsScript writes the objects of TestReliabilityBadObjects into
// argv[1] and prints {key: kind} as JSON; kind is good, bad or deleted.
const badObjectsScript = `
import io, json, os, struct, sys, zlib
import numpy as np
from PIL import Image

out = sys.argv[1]
rng = np.random.default_rng(11)
kinds = {}

def image(w, h):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1), (xx + yy) * 127 / max(w + h - 2, 1)], axis=-1)
    a += rng.normal(0, 25, size=a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")

def enc(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()

def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)

def png_raw(w, h, depth, ctype, rows):
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

def put(key, data, kind):
    p = os.path.join(out, *key.split("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
    kinds[key] = kind

jpg = enc(image(320, 240), "JPEG", quality=90)
png = enc(image(200, 150), "PNG")
put("good/baseline.jpg", jpg, "good")
put("good/progressive.jpg", enc(image(300, 200), "JPEG", quality=85, progressive=True), "good")
put("good/cmyk.jpg", enc(image(260, 300).convert("CMYK"), "JPEG", quality=90), "good")
put("good/gray16.png", enc(Image.fromarray(rng.integers(0, 65536, size=(150, 170)).astype(np.uint16)), "PNG"), "good")
rows = b"".join(b"\x00" + rng.integers(0, 65536, size=(130 * 3,)).astype(">u2").tobytes() for _ in range(110))
put("good/rgb16.png", png_raw(130, 110, 16, 2, rows), "good")
put("good/paletted.png", enc(image(200, 180).convert("P", palette=Image.ADAPTIVE, colors=16), "PNG"), "good")
put("good/one.png", enc(image(1, 1), "PNG"), "good")
put("good/one.jpg", enc(image(1, 1), "JPEG"), "good")
put("good/png-named.jpg", enc(image(120, 90), "PNG"), "good")
put("good/jpeg-named.png", enc(image(90, 120), "JPEG"), "good")
put("names/with space.jpg", enc(image(64, 80), "JPEG"), "good")
put("names/ünïcødé 猫.png", enc(image(70, 60), "PNG"), "good")
put("names/100%.jpg", enc(image(50, 50), "JPEG"), "good")
put("names/%41%2F%2e%2e.png", enc(image(60, 50), "PNG"), "good")
put("names/" + "L" * 240 + ".jpg", enc(image(40, 90), "JPEG"), "good")
put("deep/" + "/".join("d%d" % i + "x" * 200 for i in range(4)) + "/leaf.jpg", enc(image(100, 70), "JPEG"), "good")

put("bad/truncated.jpg", jpg[: len(jpg) // 2], "bad")
put("bad/truncated.png", png[: len(png) // 2], "bad")
put("bad/empty.jpg", b"", "bad")
put("bad/random.png", rng.integers(0, 256, size=5000).astype(np.uint8).tobytes(), "bad")
put("bad/random-after-magic.jpg", b"\xff\xd8\xff" + rng.integers(0, 256, size=5000).astype(np.uint8).tobytes(), "bad")
put("bad/text.jpg", b"this is not an image\n" * 20, "bad")
put("bad/bomb.png", png_raw(30000, 30000, 8, 2, b"\x00" * (30000 * 3 + 1) * 4), "bad")
i = jpg.index(b"\xff\xc0")
put("bad/bomb.jpg", jpg[: i + 5] + struct.pack(">HH", 30000, 30000) + jpg[i + 9 :], "bad")

put("gone/deleted.jpg", enc(image(80, 80), "JPEG"), "deleted")
put("gone/kept.jpg", enc(image(81, 80), "JPEG"), "good")
print(json.dumps(kinds))
`

// TestReliabilityBadObjects mounts a bucket of awkward objects next to good
// ones: progressive, CMYK and 1x1 JPEGs, 16-bit, paletted and 1x1 PNGs,
// images under the wrong extension, keys with spaces, unicode, % and very
// long names; truncated, empty, random and text objects named as images, a
// PNG and a JPEG whose headers claim 30000x30000 pixels, and an object
// deleted between the listing and the read. Read concurrently, twice:
//   - every good object lists under its .npy name and reads features equal
//     to `featurefs extract` on the same bytes;
//   - every bad object gives EIO to its reader, both times, with exactly one
//     warning line in the log naming its key and a reason;
//   - the deleted object gives ENOENT and is not logged as bad;
//   - the mount's peak memory stays within 256 MiB of its peak before the
//     bad reads (a decoded bomb would need 2.7 GB), and it still answers.
func TestReliabilityBadObjects(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := filepath.Join(t.TempDir(), "objects")
	out, err := exec.Command(py, "-c", badObjectsScript, dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("generating objects: %v\n%s", err, stderr)
	}
	kinds := map[string]string{}
	if err := json.Unmarshal(out, &kinds); err != nil {
		t.Fatalf("generator output %q: %v", out, err)
	}
	srv, env := minioBucket(t, "awkward", "", dir)
	// Prefetch off: the memory baseline below must not race a background
	// walk extracting the same objects.
	m := testMount(t, mountConfig{Source: "s3://awkward", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off"}})
	layerDir := m.Layer(testLayer)
	var keys []string
	for k := range kinds {
		keys = append(keys, k)
	}
	names := featureNames(keys)

	// Reference features of the good objects, from featurefs extract.
	local := map[string]string{}
	for k, kind := range kinds {
		if kind == "good" {
			local[k] = filepath.Join(dir, filepath.FromSlash(k))
		}
	}
	ref := extractRef(t, testLayer, local)

	// Every object lists under its name (stat never computes).
	for k := range kinds {
		p := filepath.Join(layerDir, filepath.FromSlash(names[k]))
		des, err := os.ReadDir(filepath.Dir(p))
		if err != nil {
			t.Fatalf("ls %s: %v", filepath.Dir(p), err)
		}
		found := false
		for _, de := range des {
			found = found || de.Name() == filepath.Base(p)
		}
		if !found {
			t.Errorf("%s (object %q) is not listed", names[k], k)
		}
	}
	// The deleted object goes between the listing and the read.
	srv.Delete(t, "awkward", "gone/deleted.jpg")

	// Warm up on one good file, then take the memory baseline.
	if _, err := os.ReadFile(filepath.Join(layerDir, filepath.FromSlash(names["good/baseline.jpg"]))); err != nil {
		t.Fatal(err)
	}
	hwm0 := rssBytes(t, m.PID(), "VmHWM")

	for round := 0; round < 2; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs, data := map[string]error{}, map[string][]byte{}
		for k := range kinds {
			wg.Go(func() {
				b, err := readErr(filepath.Join(layerDir, filepath.FromSlash(names[k])))
				mu.Lock()
				defer mu.Unlock()
				errs[k], data[k] = err, b
			})
		}
		wg.Wait()
		for k, kind := range kinds {
			switch kind {
			case "bad":
				if !isErrno(errs[k], syscall.EIO) {
					t.Errorf("round %d: bad object %q: %v, want EIO", round, k, errs[k])
				}
			case "deleted":
				if !isErrno(errs[k], syscall.ENOENT) {
					t.Errorf("round %d: object %q deleted after listing: %v, want ENOENT", round, k, errs[k])
				}
			case "good":
				if errs[k] != nil {
					t.Errorf("round %d: good object %q: %v", round, k, errs[k])
					continue
				}
				got, err := parseNPY(data[k])
				if err != nil {
					t.Errorf("round %d: %q: %v", round, k, err)
					continue
				}
				if int64(len(data[k])) != api.NPYSize(testLayerShape, extractor.Float32) {
					t.Errorf("round %d: %q: %d bytes", round, k, len(data[k]))
				}
				if diff, ok := closeEnough(got.Data, ref[k].Data); !ok {
					t.Errorf("round %d: %q differs from featurefs extract: max |diff| %g", round, k, diff)
				}
			}
		}
	}

	hwm := rssBytes(t, m.PID(), "VmHWM")
	t.Logf("mount peak RSS %s before the bad reads, %s after", mib(hwm0), mib(hwm))
	if hwm > hwm0+256<<20 {
		t.Errorf("mount peak RSS grew from %s to %s reading bad objects", mib(hwm0), mib(hwm))
	}

	// One warning line per bad object, naming the key and why.
	for k, kind := range kinds {
		var lines []string
		for _, form := range []string{"key=" + k + " ", "key=" + strconv.Quote(k) + " "} {
			for _, l := range logLines(t, m.Log, form) {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					lines = append(lines, l)
				}
			}
		}
		switch kind {
		case "bad":
			if len(lines) != 1 {
				t.Errorf("bad object %q: %d warning/error lines name it, want 1:\n%s", k, len(lines), strings.Join(lines, "\n"))
			} else if !strings.Contains(lines[0], "bad image") && !strings.Contains(lines[0], "empty object") {
				t.Errorf("bad object %q: the log line gives no reason: %s", k, lines[0])
			}
		case "good", "deleted":
			for _, l := range lines {
				if strings.Contains(l, "bad object") {
					t.Errorf("%s object %q logged as bad: %s", kind, k, l)
				}
			}
		}
	}
	if b, _ := os.ReadFile(m.Log); bytes.Contains(b, []byte("panic")) {
		t.Errorf("the mount's log mentions a panic")
	}
	// The mount still answers.
	if _, err := os.ReadDir(layerDir); err != nil {
		t.Errorf("ls after the bad reads: %v", err)
	}
	if _, err := os.ReadFile(m.Path(".featurefs", "stats")); err != nil {
		t.Errorf("stats after the bad reads: %v", err)
	}
}
