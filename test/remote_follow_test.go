package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestRemoteMountFollowsReloadWithoutReads: a --remote mount whose reads
// all hit its own cache (nothing reaches the server) still follows the
// server's model reload, within --metadata-ttl and one GET /v1/models: it
// asks the server for its models version (HEAD /v1/models) at that
// interval. Its layers file then shows the new version. At 1942f8f such
// a mount stayed on the old version until a read reached the server.
func TestRemoteMountFollowsReloadWithoutReads(t *testing.T) {
	versions := testenv.ModelVersions(t)
	modelPath := filepath.Join(t.TempDir(), "model.onnx")
	replaceFile(t, filepath.Join(versions, "base.onnx"), modelPath, true)
	src := filepath.Join(t.TempDir(), "src")
	writeJPEG(t, filepath.Join(src, "cls", "a.jpg"), 64, 48, 1)
	writeJPEG(t, filepath.Join(src, "cls", "b.jpg"), 64, 48, 2)
	names := map[string]string{"cls/a.jpg": "cls/a.npy", "cls/b.jpg": "cls/b.npy"}
	s := startServe(t, src, nil, "--model", modelName+"="+modelPath)
	const ttl = 2 * time.Second
	m := testMount(t, mountConfig{Args: s.remoteArgs("--prefetch", "off", "--metadata-ttl", ttl.String()), NoModel: true})

	readLayerFiles(t, m, "layer15", names) // now in the mount's cache
	before := layersFileDigests(t, m)

	replaceFile(t, filepath.Join(versions, "layer4fc.onnx"), modelPath, true)
	waitServeLog(t, s, "model reloaded", 1)
	reloaded := time.Now()
	// No read of the mount from here on: only its polls reach the server.
	const bound = ttl + 20*time.Second // the TTL, one GET /v1/models and a loaded machine's slack
	for {
		b, _ := os.ReadFile(m.Log)
		if strings.Contains(string(b), "model replaced") {
			break
		}
		if time.Since(reloaded) > bound {
			t.Fatalf("the mount did not follow the server's reload within %v with no read reaching the server:\n%s", bound, tail(m.Log, 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the mount followed the server's reload %v after the server's log said so (--metadata-ttl %v)", time.Since(reloaded).Round(time.Millisecond), ttl)
	after := layersFileDigests(t, m)
	if after["layer15"] == before["layer15"] || after["layer4"] != before["layer4"] {
		t.Errorf("layers file after the reload: layer15 %.12s (was %.12s), layer4 %.12s (was %.12s); want layer15 changed, layer4 kept",
			after["layer15"], before["layer15"], after["layer4"], before["layer4"])
	}
}
