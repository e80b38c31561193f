package extractor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/test/testenv"
)

// sparseModel makes a sparse file of size bytes (no disk used) at path,
// through a rename as a deployment replaces a model.
func sparseModel(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path + ".new")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// allocated runs f and returns the bytes it allocated on the Go heap.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestModelFileOverTwoGiBRefused: a model file of 2 GiB + 1 bytes (sparse)
// is refused by its size before any read, with an error naming the file,
// at load (LayerDigests, loadModel) and on a reload, where the old version
// keeps serving (issue 36, item 5). On ca82ffd each read the whole file
// (a reload twice) before "bad ONNX model: bad tag": 2-4 GiB allocated.
func TestModelFileOverTwoGiBRefused(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.onnx")
	sparseModel(t, big, 2<<30+1)
	var err error
	if n := allocated(func() { _, err = loadModel(ModelSpec{Name: "m", Path: big}) }); n > 16<<20 {
		t.Errorf("loadModel of the sparse file allocated %d bytes", n)
	}
	if !errors.Is(err, ErrModelTooLarge) || !strings.Contains(err.Error(), big) {
		t.Errorf("loadModel: %v; want ErrModelTooLarge naming %s", err, big)
	}
	if n := allocated(func() { _, err = LayerDigests(big, DefaultPreprocess()) }); n > 16<<20 || !errors.Is(err, ErrModelTooLarge) {
		t.Errorf("LayerDigests: %v (%d bytes allocated); want ErrModelTooLarge", err, n)
	}

	path := filepath.Join(dir, "m.onnx")
	b, err := os.ReadFile(testenv.OddModel(t, "tiny"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	svc := newCPUService(t, nil, ModelSpec{Name: "m", Path: path})
	old, _ := svc.Model("m")
	sparseModel(t, path, 2<<30+1)
	start := time.Now()
	if n := allocated(func() { _, _, err = svc.Reload("m") }); n > 16<<20 {
		t.Errorf("Reload of the sparse file allocated %d bytes", n)
	}
	if !errors.Is(err, ErrReloadRefused) || !errors.Is(err, ErrModelTooLarge) || !strings.Contains(err.Error(), path) {
		t.Errorf("Reload: %v; want ErrReloadRefused and ErrModelTooLarge naming %s", err, path)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Reload took %v to refuse the file", d)
	}
	if cur, _ := svc.Model("m"); cur.Digest != old.Digest {
		t.Error("the model changed")
	}
	if _, err := svc.Extract(context.Background(), Request{Model: "m", Layer: 0, Key: "a.jpg", Fetch: fetchOf(testJPEG(t, 64, 48))}); err != nil {
		t.Errorf("the old version no longer serves: %v", err)
	}
}

// TestModelFIFORefused: a model path that is a FIFO with no writer is
// refused at once as not a regular file (os.Open waited for a writer
// forever: loading, digesting or reloading such a model hung).
func TestModelFIFORefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "m.onnx")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := readModelFile(fifo); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, spec.ErrNotRegular) || !strings.Contains(err.Error(), fifo) {
			t.Errorf("a FIFO model: %v, want not a regular file naming it", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a FIFO model: still reading after 5 s")
	}
}
