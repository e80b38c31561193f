package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// replaceFile writes src's bytes to dst: by a rename, or in place.
func replaceFile(t *testing.T, src, dst string, rename bool) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !rename {
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(dst+".new", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

// writeSlowly rewrites dst in place with src's bytes in n writes, pause
// apart: a deployment copying a model over the old one.
func writeSlowly(t *testing.T, src, dst string, n int, pause time.Duration) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	step := (len(b) + n - 1) / n
	for off := 0; off < len(b); off += step {
		if _, err := f.Write(b[off:min(off+step, len(b))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
	}
}

// waitLog waits until the mount's log holds n lines containing s.
func waitLog(t *testing.T, m *mounted, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, _ := os.ReadFile(m.Log)
		if strings.Count(string(b), s) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d lines %q in the log after 90s:\n%s", n, s, tail(m.Log, 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestModelReplacedWithoutRestart: a mount watches its model file. While
// a reader reads layer4 and layer15 over and over and an unmodified
// DataLoader reads layer15 epoch after epoch, the file is replaced by a
// rename with a version that changes torchvision's layer4 and fc: the
// mount reloads it, layer15 then serves the new version's features, and
// layer4's files keep their inode and are not computed again. A bad file
// written in place is refused with one log line and the new version keeps
// serving. The first version rewritten in place (slowly, found by the
// watcher) and then the second again with a SIGHUP bring their features
// back from the cache, with no extraction. Through all of it no read
// fails and every file read is one version's whole feature.
func TestModelReplacedWithoutRestart(t *testing.T) {
	versions := testenv.ModelVersions(t)
	modelPath := filepath.Join(t.TempDir(), "model.onnx")
	replaceFile(t, filepath.Join(versions, "base.onnx"), modelPath, true)
	d := genDataset(t, "--classes", "1", "--train", "3", "--val", "0")
	names := featureNames(d.keys(t))
	n := int64(len(names))
	m := testMount(t, mountConfig{Source: d.Dir, Model: modelPath, Args: []string{"--prefetch", "off"}})

	read := func(layer string) map[string][]byte { t.Helper(); return readLayerFiles(t, m, layer, names) }
	inos := func(layer string) map[string]uint64 {
		out := map[string]uint64{}
		for key, name := range names {
			fi, err := os.Stat(filepath.Join(m.Layer(layer), filepath.FromSlash(name)))
			if err != nil {
				t.Fatal(err)
			}
			out[key] = fi.Sys().(*syscall.Stat_t).Ino
		}
		return out
	}
	old4, old15 := read("layer4"), read("layer15")
	// The predictions view follows the version too (its last layer).
	predPath := m.Path("predictions", modelName, filepath.FromSlash(path.Dir(firstKey(names))), "predictions.jsonl")
	readPreds := func() string {
		t.Helper()
		b, err := os.ReadFile(predPath)
		if err != nil {
			t.Fatalf("read %s: %v", predPath, err)
		}
		return string(b)
	}
	oldPreds := readPreds()
	ino4 := inos("layer4")
	if got := extractionCount(t, mountStats(t, m)); got != 3*n {
		t.Fatalf("%d extractions, want %d (layer4, layer15 and the predictions' layer19)", got, 3*n)
	}

	// A reader under load and an unmodified DataLoader: every file read
	// must be one version's whole feature (checked once the new version is
	// known).
	reader := startReloadReader(t, m, names, "layer4", "layer15")
	loader := startLoader(t, filepath.Join(m.Layer("layer15"), "train"))

	replaceFile(t, filepath.Join(versions, "layer4fc.onnx"), modelPath, true)
	waitLog(t, m, "model reloaded", 1)
	new15 := read("layer15")
	if readPreds() == oldPreds {
		t.Error("predictions.jsonl after the reload is the old version's: its last layer changed")
	}
	if got := extractionCount(t, mountStats(t, m)); got != 5*n {
		t.Errorf("after the reload: %d extractions, want %d (layer15 and layer19 again, layer4 never)", got, 5*n)
	}
	for key, ino := range inos("layer4") {
		if ino != ino4[key] {
			t.Errorf("layer4 %s: inode %d, was %d: an unchanged layer lost its kernel entry", key, ino, ino4[key])
		}
	}
	layers := layersFileDigests(t, m)
	models, _ := mountStats(t, m)["models"].([]any)
	if len(models) != 1 || models[0].(map[string]any)["digest"] != fileDigest(t, filepath.Join(versions, "layer4fc.onnx")) || models[0].(map[string]any)["loaded_at"] == "" {
		t.Errorf("stats file's models after the reload: %v", models)
	}

	// A bad file, written in place: refused with one line, the new version serves.
	if err := os.WriteFile(modelPath, []byte("not an onnx model"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitLog(t, m, "model file refused", 1)
	if got, k := read("layer15"), firstKey(names); !bytes.Equal(got[k], new15[k]) {
		t.Error("after a refused file, layer15 is not the new version's")
	}
	if l := layersFileDigests(t, m); l["layer15"] != layers["layer15"] {
		t.Error("after a refused file, the layers file changed")
	}

	// The first version back, rewritten in place in four writes 300 ms
	// apart, which the watcher alone notices (it loads a file once it kept
	// its size, mtime and inode for an interval): from the cache.
	writeSlowly(t, filepath.Join(versions, "base.onnx"), modelPath, 4, 300*time.Millisecond)
	waitLog(t, m, "model reloaded", 2)
	back := read("layer15")
	for key := range names {
		if !bytes.Equal(back[key], old15[key]) {
			t.Errorf("layer15 %s: not the first version's feature after it came back", key)
		}
	}
	if readPreds() != oldPreds {
		t.Error("predictions.jsonl with the first version back is not the first version's")
	}

	// The second version again, in place, with a SIGHUP at once (before
	// the watcher would): from the cache too.
	replaceFile(t, filepath.Join(versions, "layer4fc.onnx"), modelPath, false)
	if err := syscall.Kill(m.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, m, "model reloaded", 3)
	again := read("layer15")
	for key := range names {
		if !bytes.Equal(again[key], new15[key]) {
			t.Errorf("layer15 %s after the SIGHUP is not the second version's feature", key)
		}
	}
	if got := extractionCount(t, mountStats(t, m)); got != 5*n {
		t.Errorf("after the versions came back: %d extractions, want %d (all cached)", got, 5*n)
	}

	// Through all of it: no read failed, none mixed versions, and the
	// DataLoader's last epoch (begun after the SIGHUP's reload) read the
	// second version.
	reader.stopAndCheck(t, names, old4, old15, new15)
	checkLoaderVersions(t, loader.finish(t), old15, new15)
	b, _ := os.ReadFile(m.Log)
	if c := strings.Count(string(b), "model file refused"); c != 1 {
		t.Errorf("%d refusal lines, want 1", c)
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

// fileDigest is the hex SHA-256 of a file.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
