package mountopts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "featurefs.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	p := writeConfig(t, `
models:
  resnet50:
    path: models/resnet50.onnx
    preprocess: {crop: 200, mean: [0.5, 0.5, 0.5]}
    aliases: {pool: layer18}
  vgg16:
    path: /abs/vgg16.onnx
endpoint-url: http://127.0.0.1:9000
cache-size: 20GiB
max-object-size: 64MiB
metadata-ttl: 2m
negative-ttl: 30s
dtype: float16
batch-size: 16
allow-other: true
allow-nonempty: true
allow-cpu-fallback: true
image-extensions: [JPG, png]
max-pixels: 1000
`)
	o := Default()
	if err := o.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	if o.ConfigFile != p || len(o.Models) != 2 {
		t.Fatalf("ConfigFile %q, Models %+v", o.ConfigFile, o.Models)
	}
	r := o.Models[0]
	if r.Name != "resnet50" || r.Path != filepath.Join(filepath.Dir(p), "models/resnet50.onnx") || r.Aliases["pool"] != "layer18" {
		t.Errorf("resnet50 = %+v", r)
	}
	want := spec.DefaultPreprocess()
	want.Crop, want.Mean = 200, [3]float32{0.5, 0.5, 0.5}
	if r.Preprocess == nil || *r.Preprocess != want {
		t.Errorf("preprocess = %+v, want %+v", r.Preprocess, want)
	}
	if o.Models[1].Path != "/abs/vgg16.onnx" || o.Models[1].Preprocess != nil {
		t.Errorf("vgg16 = %+v", o.Models[1])
	}
	if o.EndpointURL != "http://127.0.0.1:9000" || o.CacheSize != 20*GiB || o.MaxObjectSize != 64*MiB ||
		o.MetadataTTL != 2*time.Minute || o.NegativeTTL != 30*time.Second || o.DType != spec.Float16 ||
		o.BatchSize != 16 || !o.AllowOther || !o.AllowNonempty || !o.AllowCPUFallback || strings.Join(o.ImageExtensions, ",") != "jpg,png" || o.MaxPixels != 1000 {
		t.Errorf("options = %+v", o)
	}
	// Untouched keys keep their defaults.
	if d := Default(); o.Device != d.Device || o.CacheDir != d.CacheDir || o.ReadTimeout != d.ReadTimeout {
		t.Errorf("defaults lost: %+v", o)
	}
}

// TestFlagsOverrideFile follows cmd/featurefs's order: defaults, then the
// file, then the flags' setters.
func TestFlagsOverrideFile(t *testing.T) {
	p := writeConfig(t, `
models:
  resnet50: {path: /file.onnx, aliases: {pool: layer18}}
cache-size: 20GiB
device: cpu
`)
	o := Default()
	if err := o.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	if err := o.AddModel("resnet50=/flag.onnx"); err != nil {
		t.Fatal(err)
	}
	o.CacheSize = 1 * GiB
	if len(o.Models) != 1 || o.Models[0].Path != "/flag.onnx" || o.Models[0].Aliases["pool"] != "layer18" {
		t.Errorf("Models = %+v", o.Models)
	}
	if o.Device != "cpu" || o.CacheSize != GiB {
		t.Errorf("Device %q CacheSize %d", o.Device, o.CacheSize)
	}
}

func TestLoadFileErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"cache-sise: 1GiB\n", "field cache-sise not found"},
		{"cache-size: lots\n", "cache-size: size \"lots\""},
		{"metadata-ttl: 60\n", "metadata-ttl: "},
		{"models: [a, b]\n", "cannot unmarshal"},
	} {
		p := writeConfig(t, c.text)
		o := Default()
		err := o.LoadFile(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("LoadFile(%q) = %v, want an error naming the file and %q", c.text, err, c.want)
		}
	}
	o := Default()
	if err := o.LoadFile("/nonexistent.yaml"); err == nil || !strings.Contains(err.Error(), "--config /nonexistent.yaml") {
		t.Errorf("missing file: %v", err)
	}
	// An empty file is fine and changes nothing.
	p := writeConfig(t, "")
	if err := o.LoadFile(p); err != nil {
		t.Errorf("empty file: %v", err)
	}
}

func TestLoadFilePlainByteCount(t *testing.T) {
	o := Default()
	if err := o.LoadFile(writeConfig(t, "cache-size: 1073741824\n")); err != nil {
		t.Fatal(err)
	}
	if o.CacheSize != GiB {
		t.Fatalf("CacheSize = %d", o.CacheSize)
	}
}
