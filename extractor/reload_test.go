package extractor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// copyFile writes src's bytes to dst by a rename, as a deployment would.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// Reload replaces a model whose file changed: new requests use the new
// version, a request made for the old version (Request.Digest) still gets
// the old version's feature, the layer digests follow the computation, and
// a file that does not load or does not fit the running tree is refused
// while the current version keeps serving.
func TestReloadReplacesTheModel(t *testing.T) {
	versions := testenv.ModelVersions(t)
	path := filepath.Join(t.TempDir(), "r.onnx")
	copyFile(t, filepath.Join(versions, "base.onnx"), path)
	svc := newCPUService(t, nil, ModelSpec{Name: "r", Path: path})
	ctx := context.Background()
	img := testJPEG(t, 64, 48)
	old, _ := svc.Model("r")
	extract := func(digest string) []byte {
		t.Helper()
		b, err := svc.Extract(ctx, Request{Model: "r", Layer: 19, Key: "a.jpg", Fetch: fetchOf(img), Digest: digest})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := extract("")

	if _, changed, err := svc.Reload("r"); err != nil || changed {
		t.Fatalf("reload of the same file: changed %v, %v", changed, err)
	}
	copyFile(t, filepath.Join(versions, "layer4fc.onnx"), path)
	nm, changed, err := svc.Reload("r")
	if err != nil || !changed {
		t.Fatalf("reload: changed %v, %v", changed, err)
	}
	if cur, _ := svc.Model("r"); cur != nm || nm.Digest == old.Digest || svc.Versions()[0].Digest != nm.Digest {
		t.Errorf("after reload the model is not the new version")
	}
	for i, l := range nm.Layers {
		if (l.Digest == old.Layers[i].Digest) != (i < 15) {
			t.Errorf("%s keeps its digest: %v", l.Name, l.Digest == old.Layers[i].Digest)
		}
	}
	if bytes.Equal(extract(""), before) {
		t.Error("a new request got the old version's feature")
	}
	if !bytes.Equal(extract(old.Digest), before) {
		t.Error("a request made for the old version did not get its feature")
	}

	for what, write := range map[string]func(){
		"garbage":     func() { os.WriteFile(path, []byte("not onnx"), 0o644) },
		"other shape": func() { copyFile(t, testenv.OddModel(t, "tiny"), path) },
	} {
		write()
		if _, _, err := svc.Reload("r"); !errors.Is(err, ErrReloadRefused) {
			t.Errorf("%s: %v, want ErrReloadRefused", what, err)
		}
		if cur, _ := svc.Model("r"); cur.Digest != nm.Digest {
			t.Errorf("%s: the model changed", what)
		}
	}
	extract("") // still serves
}
