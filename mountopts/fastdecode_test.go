package mountopts

import (
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// --fast-decode: off by default, set by the config file's fast-decode key,
// and carried into every model's preprocessing (and so its cache key) by
// ModelSpecs, which leaves Models as they were.
func TestFastDecodeOption(t *testing.T) {
	if Default().FastDecode {
		t.Fatal("FastDecode is on by default")
	}
	o := Default()
	if err := o.LoadFile(writeConfig(t, `
models:
  a: {path: /a.onnx, preprocess: {crop: 200}}
  b: {path: /b.onnx}
fast-decode: true
`)); err != nil {
		t.Fatal(err)
	}
	if !o.FastDecode {
		t.Fatal("fast-decode: true in the config file left FastDecode off")
	}
	specs := o.ModelSpecs()
	if len(specs) != 2 || specs[0].Name != "a" || specs[1].Name != "b" {
		t.Fatalf("specs = %+v", specs)
	}
	for _, s := range specs {
		if s.Preprocess == nil || !s.Preprocess.FastDecode {
			t.Errorf("model %s: preprocess %+v without FastDecode", s.Name, s.Preprocess)
		}
	}
	if specs[0].Preprocess.Crop != 200 || specs[1].Preprocess.Crop != spec.DefaultPreprocess().Crop {
		t.Errorf("the models' own preprocessing was lost: %+v, %+v", *specs[0].Preprocess, *specs[1].Preprocess)
	}
	if o.Models[0].Preprocess.FastDecode || o.Models[1].Preprocess != nil {
		t.Errorf("ModelSpecs changed Models: %+v", o.Models)
	}
	o.FastDecode = false
	for _, s := range o.ModelSpecs() {
		if s.Preprocess.FastDecode {
			t.Errorf("model %s: FastDecode without the option", s.Name)
		}
	}
	if k := o.ModelSpecs()[1].Preprocess.Key(); k != spec.DefaultPreprocess().Key() {
		t.Errorf("exact key %q, want the default's", k)
	}
}

// With --remote the servers decode: --fast-decode on such a mount would
// change nothing, so it is refused unless the mount decodes too (--split).
func TestFastDecodeWithRemote(t *testing.T) {
	o := validOptions(t)
	o.Models = nil
	o.Remote.URLs = []string{"http://127.0.0.1:7070"}
	o.FastDecode = true
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--fast-decode: with --remote the servers decode") {
		t.Errorf("Validate = %v, want the --fast-decode problem", err)
	}
	o.Remote.Split = "raw"
	if err := o.Validate(); err != nil && strings.Contains(err.Error(), "--fast-decode") {
		t.Errorf("--split raw decodes on the mount, yet Validate = %v", err)
	}
	o.Remote.Split, o.FastDecode = "", false
	if err := o.Validate(); err != nil && strings.Contains(err.Error(), "--fast-decode") {
		t.Errorf("Validate = %v without --fast-decode", err)
	}
}
