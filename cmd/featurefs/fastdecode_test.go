package main

import (
	"testing"

	"github.com/featurefs/featurefs/mountopts"
)

// --fast-decode is bound for mount, serve and warm (warm --source), off
// by default, and reaches the models' preprocessing (the cache key).
func TestFastDecodeFlag(t *testing.T) {
	o := mountopts.Default()
	var w warmArgs
	sets := map[string]func() bool{
		"mount": func() bool { return mountFlags(&o).Lookup("fast-decode") != nil },
		"serve": func() bool { return serveFlags(&o).Lookup("fast-decode") != nil },
		"warm":  func() bool { return warmFlags(&o, &w).Lookup("fast-decode") != nil },
	}
	for name, has := range sets {
		if !has() {
			t.Errorf("featurefs %s has no --fast-decode", name)
		}
	}
	o, _, err := parseMount([]string{"--model", "r50=/r.onnx", "src", "mnt"})
	if err != nil || o.FastDecode || o.ModelSpecs()[0].Preprocess.FastDecode {
		t.Errorf("without the flag: FastDecode %v (err %v)", o.FastDecode, err)
	}
	o, _, err = parseMount([]string{"--model", "r50=/r.onnx", "src", "--fast-decode", "mnt"})
	if err != nil || !o.FastDecode || !o.ModelSpecs()[0].Preprocess.FastDecode {
		t.Errorf("--fast-decode: FastDecode %v (err %v)", o.FastDecode, err)
	}
}
