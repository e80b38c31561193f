package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestSplitMountFollowsReloads: `featurefs serve` over MinIO and a
// `--remote --split 8` mount with its own copy of the model file (the
// server computes layer8, the mount finishes layer8..layer15). While a
// reader reads layer4 and layer15 over and over, the server's file is
// replaced with the version that changes torchvision's layer4 and fc: the
// mount's tree follows the server, and since the mount's own file still
// computes layer15 the old way, the server computes layer15 whole (one
// WARN naming both digests) instead of finishing a new-version tensor with
// the old weights: every read is one version's whole feature, none fails.
// Then the mount's file is replaced too: the mount reloads it and splits
// again (a layer not read before is split, with no second WARN). The
// first version written back on both sides with SIGHUPs comes back.
func TestSplitMountFollowsReloads(t *testing.T) {
	versions := testenv.ModelVersions(t)
	serverModel := filepath.Join(t.TempDir(), "server.onnx")
	mountModel := filepath.Join(t.TempDir(), "mount.onnx")
	replaceFile(t, filepath.Join(versions, "base.onnx"), serverModel, true)
	replaceFile(t, filepath.Join(versions, "base.onnx"), mountModel, true)
	d := genDataset(t, "--classes", "1", "--train", "3", "--val", "0")
	names := featureNames(d.keys(t))
	mio, env := minioBucket(t, "split-reload", "imagenet/", d.Dir)
	s := startServe(t, "s3://split-reload/imagenet", env, "--endpoint-url", mio.Endpoint, "--model", modelName+"="+serverModel)
	m := testMount(t, mountConfig{Args: s.remoteArgs("--prefetch", "off", "--split", "8", "--model", modelName+"="+mountModel), NoModel: true})

	read := func(layer string) map[string][]byte { t.Helper(); return readLayerFiles(t, m, layer, names) }
	old4, old15 := read("layer4"), read("layer15")

	reader := startReloadReader(t, m, names, "layer4", "layer15")

	// The server's file first.
	replaceFile(t, filepath.Join(versions, "layer4fc.onnx"), serverModel, true)
	waitServeLog(t, s, "model reloaded", 1)
	read("layer8") // its answer carries the new models version
	waitLog(t, m, "models refreshed", 1)
	waitLog(t, m, "model replaced", 1)
	new15 := read("layer15")
	waitLog(t, m, "servers compute it whole", 1)
	if log := readLog(m); !strings.Contains(log, "local_digest=") || !strings.Contains(log, "servers_digest=") {
		t.Errorf("the disagreement's WARN line names no digests:\n%s", lastBytes(log, 3000))
	}

	// Then the mount's own file: it reloads it and splits again.
	replaceFile(t, filepath.Join(versions, "layer4fc.onnx"), mountModel, true)
	waitLog(t, m, "model reloaded", 1)
	waitLog(t, m, "split execution follows", 2)
	time.Sleep(500 * time.Millisecond)
	reader.Stop()
	read("layer16")
	if n := strings.Count(readLog(m), "servers compute it whole"); n != 1 {
		t.Errorf("%d disagreement WARN lines, want 1 (both sides agree after the mount's reload)", n)
	}
	if reader.failed.Load() != 0 {
		t.Fatalf("%d of %d reads failed during the reloads", reader.failed.Load(), reader.reads.Load())
	}
	mixed := 0
	for key := range names {
		if bytes.Equal(new15[key], old15[key]) {
			t.Errorf("layer15 %s: the old version's feature after the server's reload (the mount's old weights finished it)", key)
		}
		mixed += reader.mixed("layer15", key, old15[key], new15[key]) + reader.mixed("layer4", key, old4[key])
	}
	if mixed != 0 {
		t.Errorf("%d reads returned neither version's whole feature", mixed)
	}
	t.Logf("%d reads during the reloads, 0 failed, %d mixed", reader.reads.Load(), mixed)

	// The first version written back in place on both sides, a SIGHUP to
	// the server and one to the mount: the mount's SIGHUP both refreshes
	// the servers' models (no read in between tells it) and reloads its
	// own file; the first version's features come back, and a layer not
	// read before is split.
	replaceFile(t, filepath.Join(versions, "base.onnx"), serverModel, false)
	replaceFile(t, filepath.Join(versions, "base.onnx"), mountModel, false)
	if err := syscall.Kill(s.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitServeLog(t, s, "model reloaded", 2)
	if err := syscall.Kill(m.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, m, "models refreshed", 2)
	waitLog(t, m, "model reloaded", 2)
	back := read("layer15")
	for key := range names {
		if !bytes.Equal(back[key], old15[key]) {
			t.Errorf("layer15 %s: not the first version's feature after it came back", key)
		}
	}
	read("layer17")
	if n := strings.Count(readLog(m), "servers compute it whole"); n != 1 {
		t.Errorf("%d disagreement WARN lines after the first version came back, want 1", n)
	}
	st := mountStats(t, m)
	ex, _ := st["extractor"].(map[string]any)
	sp, _ := ex["split"].(map[string]any)
	plans, _ := sp["plans"].([]any)
	found := 0
	for _, p := range plans {
		if p, _ := p.(map[string]any); p["freeze"] == 16.0 && p["split"] == 8.0 {
			found++
		}
		if p, _ := p.(map[string]any); p["freeze"] == 17.0 && p["split"] == 8.0 {
			found++
		}
	}
	if found != 2 {
		t.Errorf("want split plans layer8 for layer16 and layer17 in the stats: %v", sp)
	}
}

// readLog returns the mount's log so far.
func readLog(m *mounted) string {
	b, _ := os.ReadFile(m.Log)
	return string(b)
}
