package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/test/testenv"
)

// namingImagesScript writes one distinct image per key into argv[1] (flat
// names) and prints {key: file} as JSON; the keys come on stdin, one a line.
const namingImagesScript = `
import io, json, os, sys
import numpy as np
from PIL import Image

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
files = {}
for i, key in enumerate(k for k in sys.stdin.read().split("\n") if k):
    rng = np.random.default_rng(100 + i)
    w, h = 64 + 16 * i, 96 - 4 * i
    a = rng.integers(0, 256, size=(h, w, 3)).astype(np.uint8)
    fmt = "PNG" if key.lower().endswith(".png") else "JPEG"
    p = os.path.join(out, "img%02d.%s" % (i, "png" if fmt == "PNG" else "jpg"))
    Image.fromarray(a, "RGB").save(p, format=fmt)
    files[key] = p
print(json.dumps(files))
`

// TestNamingThroughMount is the regression test of issues 15 (items 3 and
// 4) and 16 (item 1) through MinIO and a kernel mount. Keys: c.jpg next to
// a directory c.npy/, a key that is only an extension (.jpg), a key that
// is another key's long name (col/a.jpg, col/a.png, col/a.jpg.jpg), two
// 254-byte base names differing only by extension, a prefix over 255 bytes
// and a directory of the reserved shortened form. A fresh mount's tree is
// listed: no name repeats or exceeds 255 bytes, every object's feature is
// reached exactly once and equals featurefs extract of that object, and
// cp -r of the tree succeeds. On a second fresh mount, every name is
// looked up before any listing and finds the same object; each rename is
// logged once with its key.
func TestNamingThroughMount(t *testing.T) {
	py := testenv.RequireTorch(t)
	long := strings.Repeat("L", 250)
	want := map[string]string{ // key -> path under the layer directory
		"c.jpg":         "c.jpg.npy",
		"c.npy/z.jpg":   "c.npy/z.npy",
		".jpg":          ".jpg.npy",
		"col/a.jpg":     "col/a.jpg.npy",
		"col/a.png":     "col/a.png.npy",
		"col/a.jpg.jpg": "col/a.jpg.jpg.npy",
		"deep/" + strings.Repeat("p", 200) + "/" + strings.Repeat("q", 200) + "/x.jpg": "deep/" + strings.Repeat("p", 200) + "/" + strings.Repeat("q", 200) + "/x.npy",
	}
	// Shortened names: the last of the names a key can have.
	for _, k := range []string{"L/" + long + ".jpg", "L/" + long + ".png", "h/q~0123456789abcdef/x.jpg"} {
		ps := naming.FeaturePaths(k)
		want[k] = ps[len(ps)-1]
		if k == "h/q~0123456789abcdef/x.jpg" {
			want[k] = path.Join(path.Dir(want[k]), "x.npy")
		}
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cmd := exec.Command(py, "-c", namingImagesScript, t.TempDir())
	cmd.Stdin = strings.NewReader(strings.Join(keys, "\n"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("generating images: %v", err)
	}
	local := map[string]string{}
	if err := json.Unmarshal(out, &local); err != nil {
		t.Fatalf("generator output %q: %v", out, err)
	}
	srv, env := minioBucket(t, "names", "", "")
	for k, p := range local {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srv.Put(t, "names", k, b)
	}
	ref := extractRef(t, testLayer, local)
	m := testMount(t, mountConfig{Source: "s3://names", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off"}})
	layerDir := m.Layer(testLayer)

	// keyOf finds the object whose reference feature a file holds.
	keyOf := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read: %v", err)
			return ""
		}
		got, err := parseNPY(b)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return ""
		}
		for _, k := range keys {
			if _, ok := closeEnough(got.Data, ref[k].Data); ok {
				return k
			}
		}
		return ""
	}

	// The listing (the first of each directory: read page by page from
	// the store): every name once, at most 255 bytes, every object once.
	reached := map[string]string{}
	var walk func(rel string)
	walk = func(rel string) {
		des, err := os.ReadDir(filepath.Join(layerDir, rel))
		if err != nil {
			t.Errorf("ls %s: %v", rel, err)
			return
		}
		seen := map[string]bool{}
		for _, de := range des {
			n, p := de.Name(), path.Join(rel, de.Name())
			if seen[n] {
				t.Errorf("%s: %q listed twice", rel, n)
			}
			seen[n] = true
			if len(n) > 255 {
				t.Errorf("%s: a name of %d bytes", p, len(n))
			}
			if de.IsDir() {
				walk(p)
				continue
			}
			k := keyOf(filepath.Join(layerDir, p))
			if k == "" {
				t.Errorf("%s: the feature of no object", p)
				continue
			}
			if prev, dup := reached[k]; dup {
				t.Errorf("%s reached twice: %s and %s", k, prev, p)
			}
			reached[k] = p
		}
	}
	walk("")
	for _, k := range keys {
		if reached[k] != want[k] {
			t.Errorf("%s listed as %q, want %q", k, reached[k], want[k])
		}
	}

	// cp -r of the tree works (before, a 258-byte name failed it).
	dst := filepath.Join(t.TempDir(), "copy")
	if b, err := exec.Command("cp", "-r", layerDir, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -r: %v\n%s", err, b)
	}
	for _, k := range keys {
		if _, err := os.Stat(filepath.Join(dst, filepath.FromSlash(want[k]))); err != nil {
			t.Errorf("copy of %s: %v", want[k], err)
		}
	}

	// Lookups by name on a fresh mount (the same cache), before any
	// listing of their directories.
	m.Unmount(t)
	logs := []string{m.Log}
	m = testMount(t, mountConfig{Source: "s3://names", Env: env, CacheDir: m.CacheDir, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off"}})
	layerDir = m.Layer(testLayer)
	for _, k := range keys {
		if got := keyOf(filepath.Join(layerDir, filepath.FromSlash(want[k]))); got != k {
			t.Errorf("%s (for %s) holds the feature of %q", want[k], k, got)
		}
	}

	// Each rename logged once by each mount, with the key.
	for _, log := range append(logs, m.Log) {
		for _, k := range []string{"c.jpg", ".jpg", "col/a.jpg.jpg", "L/" + long + ".png", "h/q~0123456789abcdef/"} {
			if lines := logLines(t, log, "level=WARN", "renamed", "key="+k+" "); len(lines) != 1 {
				t.Errorf("%s: %d rename lines in %s, want 1:\n%s", k, len(lines), log, strings.Join(lines, "\n"))
			}
		}
	}
}
