package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestWarmPredictionsRerunLoadsNoModel: a rerun of warm --predictions
// whose output has every image already lists the source and loads no
// model: with a model file that cannot load in place of the model, it
// still exits 0 and says "0 predicted now, N already in OUT". Once an
// image is added, the same rerun needs the model (exit 4), and the real
// model predicts that image alone. At 1942f8f every rerun loaded the
// model (and set up its device) first: the rerun with nothing left exited
// 4 on the bad file.
func TestWarmPredictionsRerunLoadsNoModel(t *testing.T) {
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "cls", "a.jpg"), 64, 48, 1)
	writeJPEG(t, filepath.Join(src, "cls", "sub", "b.jpg"), 64, 48, 2)
	jpg := filepath.Join(work, "c.jpg")
	writeJPEG(t, jpg, 64, 48, 3)
	img, err := os.ReadFile(jpg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "cls", "packed.tar"), packTar(t, map[string][]byte{"c.jpg": img}), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(work, "bad.onnx")
	if err := os.WriteFile(bad, []byte("not an ONNX model at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "out.jsonl")
	warm := func(modelPath string) (cliResult, time.Duration) {
		t.Helper()
		start := time.Now()
		r := runCLI(t, 3*time.Minute, nil, "warm", "--source", src, "--model", modelName+"="+modelPath, "--ort-lib", ort,
			"--device", "cpu", "--cache-dir", filepath.Join(work, "cache"), "--predictions", out, "--log-level", "info", "cls/")
		return r, time.Since(start)
	}
	counts := func(r cliResult) string {
		m := warmSummary.FindStringSubmatch(r.Stdout)
		if m == nil {
			return "no count line"
		}
		return m[1] + " predicted now, " + m[2] + " already"
	}

	r, _ := warm(model)
	if r.Code != 0 || counts(r) != "3 predicted now, 0 already" {
		t.Fatalf("first run: want exit 0, 3 predicted now, 0 already; got %s\n%s", counts(r), r)
	}
	r, took := warm(bad)
	if r.Code != 0 || counts(r) != "0 predicted now, 3 already" || !strings.Contains(r.Stderr, "the model was not loaded") {
		t.Errorf("rerun with nothing left and a model file that cannot load: want exit 0, 0 predicted now, 3 already, and no model loaded; got %s\n%s", counts(r), r)
	}
	t.Logf("rerun with nothing left: %v", took.Round(time.Millisecond))
	b, err := os.ReadFile(out)
	if err != nil || len(lines(string(b))) != 3 {
		t.Errorf("output after the rerun: %d lines, %v; want 3:\n%s", len(lines(string(b))), err, b)
	}

	writeJPEG(t, filepath.Join(src, "cls", "sub", "d.jpg"), 64, 48, 4)
	if r, _ := warm(bad); r.Code != 4 {
		t.Errorf("rerun with an image left and a model file that cannot load: exit %d, want 4:\n%s", r.Code, r)
	}
	if r, _ := warm(model); r.Code != 0 || counts(r) != "1 predicted now, 3 already" {
		t.Errorf("rerun with an image left: want exit 0, 1 predicted now, 3 already; got %s\n%s", counts(r), r)
	}
}
