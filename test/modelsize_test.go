package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// sparseFile makes a sparse file of size bytes at path (no disk used),
// through a rename as a deployment replaces a model.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.WriteFile(path+".new", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path+".new", size); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// TestModelOverTwoGiBRefused: a model file of 2 GiB + 1 bytes (sparse) is
// refused by its size, never read: a mount started with it exits 4 at once
// with one line naming it; a running mount whose model file is replaced by
// it logs one WARN, keeps serving the old version, and its peak resident
// memory (VmHWM) grows by less than 64 MiB (issue 36, item 5). On ca82ffd
// the reload read the file whole twice (RSS 74 MB to 6.38 GB for 3 GB)
// before "bad ONNX model: bad tag".
func TestModelOverTwoGiBRefused(t *testing.T) {
	tiny := testenv.OddModel(t, "tiny")
	src := t.TempDir()
	writeJPEG(t, filepath.Join(src, "cls", "0.jpg"), 64, 48, 1)
	work := t.TempDir()
	big := filepath.Join(work, "big.onnx")
	sparseFile(t, big, 2<<30+1)
	if err := os.Mkdir(filepath.Join(work, "mnt0"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := runCLI(t, 3*time.Minute, nil, "mount", "--model", modelName+"="+big, "--cache-dir", filepath.Join(work, "cache"),
		"--device", "cpu", "--log-file", filepath.Join(work, "start.log"), src, filepath.Join(work, "mnt0"))
	if r.Code != 4 || len(lines(r.Stderr)) != 1 || !strings.Contains(r.Stderr, big) || !strings.Contains(r.Stderr, "2 GiB") {
		t.Errorf("mount of a 2 GiB + 1 model: want exit 4 and one line naming it and the 2 GiB limit, got\n%s", r)
	}
	t.Logf("mount with the 2 GiB + 1 model refused in %v", time.Since(start))

	modelPath := filepath.Join(work, "model.onnx")
	replaceFile(t, tiny, modelPath, true)
	m := testMount(t, mountConfig{Source: src, Model: modelPath, Args: []string{"--prefetch", "off", "--device", "cpu"}})
	ents, err := os.ReadDir(m.Path("features", modelName))
	if err != nil || len(ents) == 0 {
		t.Fatalf("layers: %v, %v", ents, err)
	}
	feature := filepath.Join(m.Path("features", modelName, ents[0].Name()), "cls", "0.npy")
	before, err := os.ReadFile(feature)
	if err != nil {
		t.Fatal(err)
	}
	hwm0, rss0 := rssBytes(t, m.PID(), "VmHWM"), rssBytes(t, m.PID(), "VmRSS")
	sparseFile(t, modelPath, 2<<30+1)
	waitLog(t, m, "model file refused", 1)
	hwm1, rss1 := rssBytes(t, m.PID(), "VmHWM"), rssBytes(t, m.PID(), "VmRSS")
	t.Logf("mount VmRSS %s -> %s, VmHWM %s -> %s across the refused reload", mib(rss0), mib(rss1), mib(hwm0), mib(hwm1))
	if hwm1-hwm0 > 64<<20 {
		t.Errorf("peak RSS grew by %s refusing the file", mib(hwm1-hwm0))
	}
	b, _ := os.ReadFile(m.Log)
	if c := strings.Count(string(b), "model file refused"); c != 1 || !strings.Contains(string(b), "2 GiB") {
		t.Errorf("%d refusal lines (want 1, naming the 2 GiB limit):\n%s", c, tail(m.Log, 2000))
	}
	if got, err := os.ReadFile(feature); err != nil || !bytes.Equal(got, before) {
		t.Errorf("after the refused file: %v; the old version's feature %v", err, bytes.Equal(got, before))
	}
}
