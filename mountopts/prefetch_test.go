package mountopts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrefetchOptions(t *testing.T) {
	o := Default()
	if o.Prefetch != "tree" || o.PrefetchLimit != 0 {
		t.Errorf("defaults: prefetch %q, limit %d; want tree, 0", o.Prefetch, o.PrefetchLimit)
	}
	if err := o.Validate(); err != nil && strings.Contains(err.Error(), "prefetch") {
		t.Errorf("defaults rejected: %v", err)
	}
	o.Prefetch, o.PrefetchLimit = "all", -1
	o.ModelPrefetchLimits = map[string]int{"m": -2}
	err := o.Validate()
	for _, want := range []string{`--prefetch "all"`, "--prefetch-limit -1", `model "m": prefetch-limit -2`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "featurefs.yaml")
	yaml := "prefetch: dir\nprefetch-limit: 500\nmodels:\n  r50:\n    path: r50.onnx\n    prefetch-limit: 20\n  vit:\n    path: vit.onnx\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	o = Default()
	if err := o.LoadFile(cfg); err != nil {
		t.Fatal(err)
	}
	if o.Prefetch != "dir" || o.PrefetchLimit != 500 || len(o.ModelPrefetchLimits) != 1 || o.ModelPrefetchLimits["r50"] != 20 {
		t.Errorf("from the file: prefetch %q, limit %d, per model %v", o.Prefetch, o.PrefetchLimit, o.ModelPrefetchLimits)
	}
}
