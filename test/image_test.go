package test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// buildImage runs scripts/mkimage (make image's builder) on the tested
// binary and this machine's ONNX Runtime, writing out.
func buildImage(t testing.TB, out string) []byte {
	t.Helper()
	cmd := exec.Command("go", "run", "./scripts/mkimage", "-bin", featurefsBin(t), "-ort", testenv.ORTLib(t), "-o", out)
	cmd.Dir = testenv.RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkimage: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ociFiles returns the regular files of an OCI layout archive by name.
func ociFiles(t *testing.T, archive []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("image archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

type ociDesc struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

// blob returns the blob d names, checking its size and digest.
func blob(t *testing.T, files map[string][]byte, d ociDesc) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	sum := sha256.Sum256(b)
	if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes, digest sha256:%x; the descriptor says %d bytes", d.Digest, len(b), sum, d.Size)
	}
	return b
}

// TestImage: make image's builder writes a valid OCI image layout (an
// index naming featurefs:latest, a manifest, a config whose entrypoint is
// featurefs, run as the non-root featurefs user, with ONNX Runtime's path
// set, one layer whose digest and diff ID check), the same bytes from the
// same inputs; its root file system, unpacked and entered with chroot as
// that user, runs `featurefs doctor` and `featurefs extract`, whose
// feature is byte for byte the host binary's.
func TestImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestImage unpacks an image with its owners and enters it with chroot: run as root")
	}
	dir := t.TempDir()
	a := buildImage(t, filepath.Join(dir, "a.tar"))
	b := buildImage(t, filepath.Join(dir, "b.tar"))
	if !bytes.Equal(a, b) {
		t.Fatal("two builds of the image from the same inputs differ")
	}
	files := ociFiles(t, a)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout: %q", files["oci-layout"])
	}
	var index struct {
		SchemaVersion int       `json:"schemaVersion"`
		Manifests     []ociDesc `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || index.SchemaVersion != 2 || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if name := index.Manifests[0].Annotations["io.containerd.image.name"]; !strings.HasSuffix(name, "/featurefs:latest") {
		t.Errorf("image name %q, want featurefs:latest (the manifests' image)", name)
	}
	var manifest struct {
		Config ociDesc   `json:"config"`
		Layers []ociDesc `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, files, index.Manifests[0]), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Config struct {
			User       string   `json:"User"`
			Entrypoint []string `json:"Entrypoint"`
			Env        []string `json:"Env"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	c := config.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/featurefs"}) || c.User != "65532:65532" {
		t.Errorf("config: entrypoint %q user %q; want featurefs, run as 65532", c.Entrypoint, c.User)
	}
	layerGz := blob(t, files, manifest.Layers[0])
	zr, err := gzip.NewReader(bytes.NewReader(layerGz))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(layer); len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("diff_ids %v, the layer's digest sha256:%x", config.RootFS.DiffIDs, sum)
	}

	// Its root file system, entered as the image's user with its env.
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	lp := filepath.Join(dir, "layer.tar")
	if err := os.WriteFile(lp, layer, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "xf", lp, "-C", root, "--same-owner", "-p").CombinedOutput(); err != nil {
		t.Fatalf("unpack the layer: %v\n%s", err, out)
	}
	if err := syscall.Mount("proc", filepath.Join(root, "proc"), "proc", 0, ""); err != nil {
		t.Fatalf("mount proc in the image's root: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(filepath.Join(root, "proc"), syscall.MNT_DETACH) })
	model, err := os.ReadFile(testenv.Model(t, modelName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "models", "m.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	writeJPEG(t, filepath.Join(root, "tmp", "a.jpg"), 320, 240, 7)
	inImage := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("/usr/sbin/chroot", append([]string{"--userspec=65532:65532", root, "/usr/local/bin/featurefs"}, args...)...)
		cmd.Env = c.Env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("featurefs %s in the image: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := inImage("doctor"); !strings.Contains(out, "1.29.0") {
		t.Errorf("featurefs doctor in the image does not find ONNX Runtime 1.29.0:\n%s", out)
	}
	inImage("extract", "--model", "/models/m.onnx", "--layer", "layer12", "--device", "cpu", "-o", "/tmp/out", "/tmp/a.jpg")
	got, err := os.ReadFile(filepath.Join(root, "tmp", "out", "a.npy"))
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(dir, "host")
	cmd := exec.Command(featurefsBin(t), "extract", "--model", filepath.Join(root, "models", "m.onnx"), "--layer", "layer12", "--device", "cpu", "-o", host, filepath.Join(root, "tmp", "a.jpg"))
	cmd.Env = append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("host extract: %v\n%s", err, out)
	}
	want, err := os.ReadFile(filepath.Join(host, "a.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the image's feature (%d bytes) differs from the host binary's (%d bytes)", len(got), len(want))
	}
}
