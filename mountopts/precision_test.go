package mountopts

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// --precision: fp32 by default; tf32 and fp16 only where a GPU can be
// asked for, fp16 only with TensorRT; anything else refused with a message
// naming the flag. The config file takes precision and cuda-lib-dir.
func TestPrecisionValidation(t *testing.T) {
	if d := Default(); d.Precision != spec.FP32 || d.CUDALibDir != "" {
		t.Errorf("defaults: precision %q, cuda-lib-dir %q", d.Precision, d.CUDALibDir)
	}
	for _, c := range []struct {
		device    string
		precision spec.Precision
		tensorRT  bool
		want      string // "" valid, else part of the message
	}{
		{"auto", "fp32", false, ""},
		{"auto", "tf32", false, ""},
		{"cuda:1", "tf32", false, ""},
		{"cuda", "fp16", true, ""},
		{"cpu", "fp32", false, ""},
		{"cuda", "fp16", false, "--precision fp16 needs --tensorrt"},
		{"cpu", "tf32", false, "--precision tf32: the CPU computes in fp32"},
		{"auto", "bf16", false, `--precision "bf16": want fp32, tf32 or fp16`},
	} {
		o := validOptions(t)
		o.Device, o.Precision, o.TensorRT = c.device, c.precision, c.tensorRT
		err := o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s tensorrt=%v: %v", c.device, c.precision, c.tensorRT, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || ModelProblemsOnly(err)):
			t.Errorf("%s %s tensorrt=%v: %v, want a bad-option error containing %q", c.device, c.precision, c.tensorRT, err, c.want)
		}
	}
	o := Default()
	p := writeConfig(t, "precision: tf32\ncuda-lib-dir: /opt/cudnn/lib:/opt/cuda/lib64\n")
	if err := o.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	if o.Precision != spec.TF32 || o.CUDALibDir != "/opt/cudnn/lib:/opt/cuda/lib64" {
		t.Errorf("from the config file: precision %q, cuda-lib-dir %q", o.Precision, o.CUDALibDir)
	}
}

// Without FEATUREFS_ORT_LIB, --ort-lib defaults to where
// scripts/install-ort.sh puts ONNX Runtime 1.29.0.
func TestDefaultORTLibIsVersioned(t *testing.T) {
	t.Setenv("FEATUREFS_ORT_LIB", "")
	want := filepath.Join(".cache", "featurefs", "lib", "onnxruntime-1.29.0", "libonnxruntime.so.1")
	if got := Default().ORTLib; !strings.HasSuffix(got, string(filepath.Separator)+want) {
		t.Errorf("default --ort-lib %q, want ~/%s", got, want)
	}
	if got := spec.DefaultORTLib(); got != Default().ORTLib {
		t.Errorf("spec.DefaultORTLib() %q differs from the mount default %q", got, Default().ORTLib)
	}
}
