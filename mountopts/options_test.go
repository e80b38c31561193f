package mountopts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
)

// validOptions returns defaults with one existing model file and an
// existing ORT library path, so Validate passes.
func validOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	model := filepath.Join(dir, "m.onnx")
	lib := filepath.Join(dir, "libonnxruntime.so")
	for _, p := range []string{model, lib} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := Default()
	o.ORTLib = lib
	if err := o.AddModel("resnet50=" + model); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestDefaultsValidateWithAModel(t *testing.T) {
	o := validOptions(t)
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	d := Default()
	if d.CacheSize != 10*GiB || d.MetadataTTL != 60*time.Second || d.DType != spec.Float32 || d.AllowOther {
		t.Errorf("unexpected defaults: %+v", d)
	}
	if !strings.HasSuffix(d.CacheDir, filepath.Join(".cache", "featurefs", "cache")) {
		t.Errorf("CacheDir = %q", d.CacheDir)
	}
}

func TestValidateMessages(t *testing.T) {
	for _, c := range []struct {
		name   string
		modify func(o *Options)
		want   string
	}{
		{"no model", func(o *Options) { o.Models = nil }, "no model: pass --model NAME=PATH.onnx or a config file"},
		{"missing model file", func(o *Options) { o.Models[0].Path = "/x.onnx" }, "--model resnet50=/x.onnx: file does not exist"},
		{"model is a dir", func(o *Options) { o.Models[0].Path = os.TempDir() }, "not a regular file"},
		{"bad model name", func(o *Options) { o.Models[0].Name = "a/b" }, "model name \"a/b\""},
		{"duplicate model", func(o *Options) { o.Models = append(o.Models, o.Models[0]) }, "given twice"},
		{"bad alias target", func(o *Options) { o.Models[0].Aliases = map[string]string{"pool": "avgpool"} }, "alias pool: \"avgpool\" is not a layer name"},
		{"alias shadows a layer", func(o *Options) { o.Models[0].Aliases = map[string]string{"layer3": "layer4"} }, "alias \"layer3\""},
		{"bad preprocess", func(o *Options) { p := spec.DefaultPreprocess(); p.Crop = 300; o.Models[0].Preprocess = &p }, "resize 256: must be at least crop (300)"},
		{"device", func(o *Options) { o.Device = "gpu" }, "--device \"gpu\": want auto, cpu, cuda, cuda:N or cuda:N,M,..."},
		{"device twice", func(o *Options) { o.Device = "cuda:1,0,1" }, "--device \"cuda:1,0,1\": cuda:1 given twice"},
		{"dtype", func(o *Options) { o.DType = "int8" }, "--dtype \"int8\": want float32 or float16"},
		{"cache size", func(o *Options) { o.CacheSize = 10 }, "--cache-size 10B: must be at least 1MiB"},
		{"batch", func(o *Options) { o.BatchSize = -1 }, "--batch-size -1"},
		{"ttl", func(o *Options) { o.MetadataTTL = -time.Second }, "--metadata-ttl -1s: must not be negative"},
		{"log level", func(o *Options) { o.LogLevel = "loud" }, "--log-level \"loud\""},
		{"endpoint", func(o *Options) { o.EndpointURL = "127.0.0.1:9000" }, "--endpoint-url \"127.0.0.1:9000\": want http://HOST:PORT"},
		{"ort", func(o *Options) { o.ORTLib = "/nonexistent/libonnxruntime.so" }, "--ort-lib /nonexistent/libonnxruntime.so: no such file or directory"},
		{"extensions", func(o *Options) { o.ImageExtensions = []string{".JPG"} }, "--image-extensions: \".JPG\""},
		{"max object size", func(o *Options) { o.MaxObjectSize = 0 }, "--max-object-size 0B: must be positive"},
		{"metrics", func(o *Options) { o.MetricsAddr = "9090" }, "--metrics-addr \"9090\": want HOST:PORT"},
		{"tensorrt on cpu", func(o *Options) { o.Device, o.TensorRT = "cpu", true }, "--tensorrt runs on a GPU"},
		{"decode", func(o *Options) { o.Decode = "nvdec" }, "--decode \"nvdec\": want cpu, gpu or auto"},
		{"gpu decode on cpu", func(o *Options) { o.Device, o.Decode = "cpu", "gpu" }, "--decode gpu decodes JPEGs on a GPU"},
		{"fallback from cpu", func(o *Options) { o.Device, o.AllowCPUFallback = "cpu", true }, "--allow-cpu-fallback: --device cpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := validOptions(t)
			c.modify(&o)
			err := o.Validate()
			if err == nil {
				t.Fatalf("Validate passed, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %q, want it to contain %q", err, c.want)
			}
		})
	}
	o := validOptions(t)
	o.Models = nil
	if err := o.Validate(); !errors.Is(err, ErrNoModel) {
		t.Errorf("no model: %v does not match ErrNoModel", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	o := validOptions(t)
	o.Device, o.DType = "tpu", "int4"
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--device") || !strings.Contains(err.Error(), "--dtype") {
		t.Fatalf("Validate = %v, want both --device and --dtype named", err)
	}
}

func TestAddModel(t *testing.T) {
	var o Options
	for _, bad := range []string{"resnet50", "=x.onnx", "resnet50="} {
		if err := o.AddModel(bad); err == nil {
			t.Errorf("AddModel(%q) passed", bad)
		}
	}
	o.Models = []spec.ModelSpec{{Name: "r", Path: "/a.onnx", Aliases: map[string]string{"pool": "layer18"}}}
	if err := o.AddModel("r=/b.onnx"); err != nil {
		t.Fatal(err)
	}
	if err := o.AddModel("s=/c.onnx"); err != nil {
		t.Fatal(err)
	}
	if len(o.Models) != 2 || o.Models[0].Path != "/b.onnx" || o.Models[0].Aliases["pool"] != "layer18" || o.Models[1].Name != "s" {
		t.Fatalf("Models = %+v", o.Models)
	}
}

func TestSetImageExtensions(t *testing.T) {
	var o Options
	if err := o.SetImageExtensions("jpg, .JPEG,png,,"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.ImageExtensions, ",") != "jpg,jpeg,png" {
		t.Fatalf("ImageExtensions = %q", o.ImageExtensions)
	}
	if err := o.SetImageExtensions(" , "); err == nil {
		t.Fatal("empty list accepted")
	}
}

// A missing model file or ONNX Runtime library matches ErrModelFile (exit 4
// in cmd/featurefs); a malformed option next to it, or no model at all,
// does not make every problem one (exit 2).
func TestValidateModelProblems(t *testing.T) {
	for _, c := range []struct {
		name   string
		modify func(o *Options)
		only   bool
	}{
		{"missing model file", func(o *Options) { o.Models[0].Path = "/nonexistent/m.onnx" }, true},
		{"model is a directory", func(o *Options) { o.Models[0].Path = t.TempDir() }, true},
		{"missing ORT library", func(o *Options) { o.ORTLib = "/nonexistent/libonnxruntime.so.1" }, true},
		{"both", func(o *Options) {
			o.Models[0].Path, o.ORTLib = "/nonexistent/m.onnx", "/nonexistent/libonnxruntime.so.1"
		}, true},
		{"missing model and a bad option", func(o *Options) { o.Models[0].Path, o.Device = "/nonexistent/m.onnx", "tpu" }, false},
		{"no model", func(o *Options) { o.Models = nil }, false},
		{"bad option only", func(o *Options) { o.DType = "int8" }, false},
	} {
		o := validOptions(t)
		c.modify(&o)
		err := o.Validate()
		if err == nil {
			t.Fatalf("%s: Validate passed", c.name)
		}
		if got := ModelProblemsOnly(err); got != c.only {
			t.Errorf("%s: ModelProblemsOnly(%q) = %v, want %v", c.name, err, got, c.only)
		}
	}
	missing := validOptions(t)
	missing.ORTLib = "/nonexistent/lib.so"
	malformed := validOptions(t)
	malformed.DType = "int8"
	if ModelProblemsOnly(errors.Join(missing.Validate(), malformed.Validate())) {
		t.Errorf("ModelProblemsOnly of a joined model problem and bad option = true")
	}
	if !ModelProblemsOnly(errors.Join(missing.Validate(), nil)) {
		t.Errorf("ModelProblemsOnly of a joined model problem = false")
	}
	if ModelProblemsOnly(nil) {
		t.Errorf("ModelProblemsOnly(nil) = true")
	}
	o := validOptions(t)
	o.ORTLib = "/nonexistent/lib.so"
	if err := o.Validate(); !errors.Is(err, ErrModelFile) {
		t.Errorf("missing ORT library: %v does not match ErrModelFile", err)
	}
}

// One default per setting: the mount's pixel limit is the extractor's,
// PIL's Image.MAX_IMAGE_PIXELS (there were two: 64 Mi and PIL's).
func TestOneDefaultPixelLimit(t *testing.T) {
	if got, ex := Default().MaxPixels, extractor.DefaultConfig().MaxPixels; got != extractor.DefaultMaxPixels || ex != extractor.DefaultMaxPixels {
		t.Errorf("--max-pixels default %d, extractor's %d, want both %d", got, ex, extractor.DefaultMaxPixels)
	}
}
