package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// What the model reload tests (model_reload_test.go, serve_reload_test.go,
// split_reload_test.go) share: reading a layer's files, a reader that
// reads them over and over while a model is replaced, and an unmodified
// PyTorch DataLoader doing the same.

// readLayerFiles reads the feature file of every key of names (key -> feature
// path under a layer directory) under layer of m.
func readLayerFiles(t *testing.T, m *mounted, layer string, names map[string]string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for key, name := range names {
		b, err := os.ReadFile(filepath.Join(m.Layer(layer), filepath.FromSlash(name)))
		if err != nil {
			t.Fatalf("read %s %s: %v", layer, name, err)
		}
		out[key] = b
	}
	return out
}

// reloadReader reads the feature files of some layers in a loop, in one
// goroutine, until stopped: every read must succeed, and the contents each
// layer and key returned are kept for the test to check that no read
// mixed versions.
type reloadReader struct {
	reads, failed atomic.Int64
	stop          atomic.Bool
	wg            sync.WaitGroup
	mu            sync.Mutex
	seen          map[string]map[string]bool // GUARDED_BY(mu); layer/key -> contents read
}

// startReloadReader starts a reader of layers of m; it is stopped at the
// test's cleanup too (before the unmount), when the test stops early.
func startReloadReader(t *testing.T, m *mounted, names map[string]string, layers ...string) *reloadReader {
	r := &reloadReader{seen: map[string]map[string]bool{}}
	t.Cleanup(r.Stop)
	r.wg.Go(func() {
		for !r.stop.Load() {
			for _, layer := range layers {
				for key, name := range names {
					b, err := os.ReadFile(filepath.Join(m.Layer(layer), filepath.FromSlash(name)))
					r.reads.Add(1)
					if err != nil {
						if r.failed.Add(1) <= 5 {
							t.Errorf("read %s %s during the reload: %v", layer, name, err)
						}
						continue
					}
					r.mu.Lock()
					k := layer + "/" + key
					if r.seen[k] == nil {
						r.seen[k] = map[string]bool{}
					}
					r.seen[k][string(b)] = true
					r.mu.Unlock()
				}
			}
		}
	})
	return r
}

// Stop stops the reader and waits for its last read.
func (r *reloadReader) Stop() {
	r.stop.Store(true)
	r.wg.Wait()
}

// mixed counts the distinct contents read of layer/key that are none of
// want (each one version's whole feature file). Call after Stop.
func (r *reloadReader) mixed(layer, key string, want ...[]byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for c := range r.seen[layer+"/"+key] {
		ok := false
		for _, w := range want {
			ok = ok || c == string(w)
		}
		if !ok {
			n++
		}
	}
	return n
}

// stopAndCheck stops the reader of layer4 and layer15 and checks what it
// read through a reload that changed layer15 (old15 to new15) and kept
// layer4 (old4): no read failed, layer15 changed, and every read was one
// version's whole feature.
func (r *reloadReader) stopAndCheck(t *testing.T, names map[string]string, old4, old15, new15 map[string][]byte) {
	t.Helper()
	r.Stop()
	if r.failed.Load() != 0 {
		t.Fatalf("%d of %d reads failed during the reloads", r.failed.Load(), r.reads.Load())
	}
	for key := range names {
		if bytes.Equal(new15[key], old15[key]) {
			t.Errorf("layer15 %s: the old version's feature after the reload", key)
		}
		if n := r.mixed("layer15", key, old15[key], new15[key]); n != 0 {
			t.Errorf("layer15 %s: %d reads returned neither version's feature", key, n)
		}
		if n := r.mixed("layer4", key, old4[key]); n != 0 {
			t.Errorf("layer4 %s: %d reads returned another feature; its digest did not change", key, n)
		}
	}
}

// loaderRun is scripts/loader_check.py reading a feature tree epoch after
// epoch (an unmodified DatasetFolder + DataLoader, 2 workers) until
// finished.
type loaderRun struct {
	cmd    *exec.Cmd
	until  string
	out    strings.Builder
	stderr strings.Builder
	done   chan error
}

// startLoader starts the DataLoader on root (e.g. MOUNT/features/M/L/train).
func startLoader(t *testing.T, root string) *loaderRun {
	t.Helper()
	py := testenv.RequireTorch(t)
	l := &loaderRun{until: filepath.Join(t.TempDir(), "stop"), done: make(chan error, 1)}
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "loader_check.py")
	l.cmd = exec.Command(py, script, root, "--workers", "2", "--batch", "2", "--epochs", "100000", "--until", l.until)
	l.cmd.Stdout, l.cmd.Stderr = &l.out, &l.stderr
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.done <- l.cmd.Wait() }()
	t.Cleanup(func() {
		if l.cmd.ProcessState == nil {
			l.cmd.Process.Kill()
			<-l.done
		}
	})
	return l
}

// finish asks the DataLoader for one last epoch, begun after this call,
// and returns what it read: the run must end well (a read that failed
// raises in the DataLoader), after at least 2 epochs.
func (l *loaderRun) finish(t *testing.T) loaderResult {
	t.Helper()
	if err := os.WriteFile(l.until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-l.done:
		if err != nil {
			t.Fatalf("the DataLoader failed during the reload: %v\n%s", err, lastBytes(l.stderr.String(), 3000))
		}
	case <-time.After(2 * time.Minute):
		l.cmd.Process.Kill()
		<-l.done
		t.Fatalf("the DataLoader did not finish its last epoch in 2 minutes\n%s", lastBytes(l.stderr.String(), 3000))
	}
	var r loaderResult
	if err := json.Unmarshal([]byte(l.out.String()), &r); err != nil {
		t.Fatalf("loader_check.py output: %v", err)
	}
	if len(r.Epochs) < 2 {
		t.Fatalf("the DataLoader ran %d epochs, want at least 2 (one before the end)", len(r.Epochs))
	}
	return r
}

// arraySHA256 is what loader_check.py hashes of a feature file: the
// sha256 of its array's raw bytes.
func arraySHA256(t *testing.T, npy []byte) string {
	t.Helper()
	f, err := parseNPY(npy)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(f.Raw)
	return hex.EncodeToString(sum[:])
}

// checkLoaderVersions checks that every sample the DataLoader yielded is
// one of the versions' whole features (before: the features before the
// reload; after: after it, by key), and that its last epoch, begun after
// the reload, yielded only the new ones, each key once.
func checkLoaderVersions(t *testing.T, r loaderResult, before, after map[string][]byte) {
	t.Helper()
	old, cur := map[string]bool{}, map[string]bool{}
	for key := range before {
		old[arraySHA256(t, before[key])] = true
		cur[arraySHA256(t, after[key])] = true
	}
	mixed := 0
	for _, s := range r.Loaded {
		h, _ := s[0].(string)
		if !old[h] && !cur[h] {
			mixed++
		}
	}
	last := r.Epochs[len(r.Epochs)-1].Samples
	if last != len(after) || len(r.Loaded) < last {
		t.Fatalf("the DataLoader's last epoch yielded %d samples, want %d", last, len(after))
	}
	got := map[string]bool{}
	for _, s := range r.Loaded[len(r.Loaded)-last:] {
		h, _ := s[0].(string)
		if !cur[h] {
			t.Errorf("the DataLoader's last epoch, begun after the reload, yielded a feature that is not the new version's")
		}
		got[h] = true
	}
	if len(got) != len(cur) {
		t.Errorf("the DataLoader's last epoch yielded %d distinct features, want %d", len(got), len(cur))
	}
	if mixed != 0 {
		t.Errorf("%d of %d samples the DataLoader yielded are neither version's whole feature", mixed, len(r.Loaded))
	}
	t.Logf("DataLoader: %d epochs, %d samples through the reloads, 0 failed, %d mixed", len(r.Epochs), len(r.Loaded), mixed)
}
