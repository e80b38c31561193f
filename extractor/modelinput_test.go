package extractor

// What a model's graph inputs must be for featurefs to feed them: on the
// real ONNX Runtime with the small models of scripts/export_odd_models.py.

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// oddService loads the odd models names (each under its own name) with
// mutate applied to a CPU config, logging to the returned buffer.
func oddService(t *testing.T, mutate func(*Config), names ...string) (*Service, *testenv.SyncBuffer, error) {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	cfg := DefaultConfig()
	cfg.ORTLib = testenv.ORTLib(t)
	cfg.Device = "cpu"
	cfg.Workers = 2
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mutate != nil {
		mutate(&cfg)
	}
	var specs []ModelSpec
	for _, n := range names {
		specs = append(specs, ModelSpec{Name: n, Path: testenv.OddModel(t, n)})
	}
	svc, err := New(cfg, specs)
	if err == nil {
		t.Cleanup(func() { svc.Close() })
	}
	return svc, logs, err
}

// TestModelsTheTreeCannotFeedAreRefusedAtLoad: a model that is not exactly
// one float input [batch,3,224,224] fails New with one line matching
// ErrBadModel that says why (issue 16, item 3). Before, a model with two
// inputs or a uint8 input loaded, and every read failed later in ONNX
// Runtime ("Missing Input").
func TestModelsTheTreeCannotFeedAreRefusedAtLoad(t *testing.T) {
	refused := map[string][]string{
		"twoinputs": {"2 inputs", "input [batch,3,224,224]", "extra [batch,4]", "exactly one"},
		"uint8":     {"input input is uint8", "float32"},
		"flat":      {"[batch,150528]", "rank 2"},
		"gray":      {"[batch,1,224,224]", "1 channels", "makes 3"},
		"size128":   {"[batch,3,128,128]", "crops 224x224"},
	}
	for name, want := range refused {
		_, _, err := oddService(t, nil, name)
		if err == nil {
			t.Errorf("%s: loaded; want it refused", name)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, ErrBadModel) {
			t.Errorf("%s: %v does not match ErrBadModel", name, err)
		}
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "model "+name) {
			t.Errorf("%s: want one line naming the model, got %q", name, msg)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q does not say %q", name, msg, w)
			}
		}
	}

	// Initializers listed as graph inputs do not count; a fixed batch is
	// accepted and reported.
	for name, fixed := range map[string]int{"tiny": 0, "initinputs": 0, "batch1": 1, "batch3": 3} {
		svc, _, err := oddService(t, nil, name)
		if err != nil {
			t.Errorf("%s: %v; want it loaded", name, err)
			continue
		}
		m, _ := svc.Model(name)
		if m.FixedBatch != fixed || len(m.Layers) != 4 {
			t.Errorf("%s: fixed batch %d, %d layers; want %d and 4", name, m.FixedBatch, len(m.Layers), fixed)
		}
		if tab := m.Table(); (fixed > 0) != strings.Contains(tab, fmt.Sprintf("fixed batch %d", fixed)) {
			t.Errorf("%s: table header does not say the fixed batch %d:\n%s", name, fixed, tab)
		}
	}

	// A missing file matches ErrBadModel too.
	cfg := DefaultConfig()
	cfg.ORTLib, cfg.Device = testenv.ORTLib(t), "cpu"
	if _, err := New(cfg, []ModelSpec{{Name: "nope", Path: t.TempDir() + "/nope.onnx"}}); !errors.Is(err, ErrBadModel) {
		t.Errorf("missing model file: %v, want ErrBadModel", err)
	}
}
