package mountopts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

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
		{"cache-sise: 1GiB\n", `unknown key "cache-sise" (did you mean "cache-size"?)`},
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

// TestConfigTypoNamesKeyAndValidKeys: a misspelt key in the config file is
// named, with the keys valid where it stands and the likely one, never a
// Go type (it used to say "field cache_dir not found in type
// mountopts.fileOptions").
func TestConfigTypoNamesKeyAndValidKeys(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("cache_dir: /x\nmodels:\n  r50: {pth: m.onnx, preprocess: {rsize: 3}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Default()
	err := o.LoadFile(p)
	if err == nil {
		t.Fatal("a config file with unknown keys loaded")
	}
	msg := err.Error()
	for _, want := range []string{
		`line 1: unknown key "cache_dir" (did you mean "cache-dir"?); valid keys: allow-cpu-fallback, allow-nonempty, allow-other,`,
		"cache-dir, cache-size,", "show-empty-dirs, tensorrt",
		`line 3: unknown key "pth" in a model (models: NAME:) (did you mean "path"?); valid keys: aliases, path, prefetch-limit, preprocess`,
		`line 3: unknown key "rsize" in a model's preprocess: (did you mean "resize"?); valid keys: crop, mean, resize, std`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "mountopts.") || strings.Contains(msg, "struct {") {
		t.Errorf("error names a Go type:\n%s", msg)
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		t.Errorf("error does not unwrap to yaml's: %T", err)
	}
	// A key far from every valid one gets the list without a guess.
	if err := os.WriteFile(p, []byte("wibble: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := o.LoadFile(p); err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), `unknown key "wibble"; valid keys: `) {
		t.Errorf("wibble: %v", err)
	}
}
