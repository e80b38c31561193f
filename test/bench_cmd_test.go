package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// featurefs bench (scripts/bench-extract.sh and make gpu-check run it):
// one JSON line per mode and layer, with the decode workers and intra-op
// threads it was asked for, the extractor's stage seconds and batches, and
// CPU time, on the real ONNX Runtime.
func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	for i := range 4 {
		writeJPEG(t, filepath.Join(dir, fmt.Sprintf("%d.jpg", i)), 320+16*i, 240, i)
	}
	model := testenv.Model(t, modelName)
	r := runCLI(t, 5*time.Minute, cliEnv(t), "bench", "--model", model, "--device", "cpu", "--modes", "extract,decode,ort",
		"--layers", testLayer, "--workers", "1", "--intra-op-threads", "1", "--ort-time", "1s", dir)
	if r.Code != 0 {
		t.Fatalf("featurefs bench: %v", r)
	}
	got := map[string]map[string]any{}
	for _, l := range lines(r.Stdout) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		got[m["mode"].(string)] = m
	}
	for _, mode := range []string{"extract", "decode", "ort"} {
		m, ok := got[mode]
		if !ok {
			t.Errorf("no %s result in %s", mode, r.Stdout)
			continue
		}
		if m["images_per_s"].(float64) <= 0 || m["cpu_seconds"].(float64) <= 0 {
			t.Errorf("%s: %v", mode, m)
		}
	}
	if ex := got["extract"]; ex != nil {
		if ex["workers"] != 1.0 || ex["intra_op_threads"] != 1.0 || ex["images"] != 4.0 {
			t.Errorf("extract ran with %v workers and %v threads on %v images, want 1, 1 and 4", ex["workers"], ex["intra_op_threads"], ex["images"])
		}
		if ex["decode_seconds"].(float64) <= 0 || ex["infer_seconds"].(float64) <= 0 || ex["batches"].(float64) < 1 {
			t.Errorf("extract stage figures: %v", ex)
		}
	}
	if o := got["ort"]; o != nil && (o["intra_op_threads"] != 1.0 || !strings.HasPrefix(o["device"].(string), "cpu")) {
		t.Errorf("ort: %v", o)
	}
}
