package extractor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/featurefs/featurefs/extractor/graph"
	"github.com/featurefs/featurefs/test/testenv"
)

// A loaded model keeps its weights in the file, not in memory (detach):
// a session reads them back from the file it was loaded from, so a file
// rewritten in place under a loaded version fails that version's session
// opens, as a replaced version (ErrModelReplaced, graph.ErrSourceChanged),
// and never builds a session from the new bytes; a file replaced by a
// rename leaves the loaded version's file whole, and its sessions open.
func TestModelFileChangedUnderALoadedVersion(t *testing.T) {
	orig, err := os.ReadFile(testenv.Model(t, "resnet50"))
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Clone(orig)
	changed[len(changed)-len(changed)/3] ^= 0x55 // inside a weight of the last stages
	img := testJPEG(t, 64, 48)
	extract := func(svc *Service, layer int) ([]byte, error) {
		return svc.Extract(context.Background(), Request{Model: "r", Layer: layer, Key: "a.jpg", Fetch: fetchOf(img)})
	}
	dir := t.TempDir()

	inPlace := filepath.Join(dir, "in-place.onnx")
	if err := os.WriteFile(inPlace, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	svc := newCPUService(t, nil, ModelSpec{Name: "r", Path: inPlace})
	if err := os.WriteFile(inPlace, changed, 0o644); err != nil { // same inode, truncated and written
		t.Fatal(err)
	}
	last := len(svc.reg.Load().models["r"].Layers) - 1
	if b, err := extract(svc, last); !errors.Is(err, ErrModelReplaced) || !errors.Is(err, graph.ErrSourceChanged) {
		t.Fatalf("extract after the file changed in place: %d bytes, %v; want ErrModelReplaced and graph.ErrSourceChanged", len(b), err)
	}
	if _, err := extract(svc, 1); err != nil {
		t.Errorf("a layer before the changed weight: %v", err)
	}

	renamed := filepath.Join(dir, "renamed.onnx")
	if err := os.WriteFile(renamed, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	svc2 := newCPUService(t, nil, ModelSpec{Name: "r", Path: renamed})
	if err := os.WriteFile(renamed+".tmp", changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(renamed+".tmp", renamed); err != nil {
		t.Fatal(err)
	}
	if _, err := extract(svc2, last); err != nil {
		t.Errorf("extract after the file was replaced by a rename: %v", err)
	}
}
