package test

// What the split benchmarks (split_bench_test.go, split_replan_test.go)
// share: the images they read, the trainer-side helper process they start
// in the trainer's namespace and cgroup, and that helper's own start (its
// plan, its client and its local extractor).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/test/testenv"
)

// benchImages writes bases ImageNet-like JPEGs (benchJPEG, about 500x375)
// into data and hard-links them under each of dirs as names 0..perDir-1
// (name(k)), so that every configuration reads keys of its own without
// more bytes on disk. It returns the images' mean size.
func benchImages(t *testing.T, data string, bases int, dirs []string, perDir int, name func(int) string) float64 {
	t.Helper()
	var sum int64
	for j := range bases {
		b := benchJPEG(480+j%5*10, 360+j%3*10, j)
		sum += int64(len(b))
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("base%03d.jpg", j)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		dir := filepath.Join(data, d)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range perDir {
			if err := os.Link(filepath.Join(data, fmt.Sprintf("base%03d.jpg", k%bases)), filepath.Join(dir, name(k))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return float64(sum) / float64(bases)
}

// runTrainerHelper runs this test binary's test helper (a Test function
// that reads its plan from the file named by env) in the trainer's
// namespace and cgroup, with plan as JSON, passing its progress lines on;
// it fails t with the helper's last output if the helper fails.
func runTrainerHelper(t *testing.T, trainer *cpuSide, l *netLink, helper, env string, plan any, timeout time.Duration) {
	t.Helper()
	pf := filepath.Join(t.TempDir(), "plan.json")
	pb, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pf, pb, 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := trainer.Wrap(l.Command(l.Client, self, "-test.run=^"+helper+"$", "-test.v", "-test.timeout="+timeout.String()))
	cmd.Env = append(os.Environ(), env+"="+pf, "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, progressWriter{t}), io.MultiWriter(&out, progressWriter{t})
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", helper, err, lastBytes(out.String(), 8000))
	}
}

// helperPlan reads the plan of a trainer-side helper from the file named
// by env into plan; false when env is unset (a plain test run, where the
// helper does nothing).
func helperPlan(t *testing.T, env string, plan any) bool {
	t.Helper()
	pf := os.Getenv(env)
	if pf == "" {
		return false
	}
	b, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, plan); err != nil {
		t.Fatal(err)
	}
	return true
}

// trainerSide is the trainer side of a split benchmark: a client of the
// storage side's server at url and a local CPU extractor (batch) of
// models, as a mount with --remote and --split has; both are closed when
// t ends.
func trainerSide(t *testing.T, url string, batch int, models []extractor.ModelSpec) (*remote.Client, *extractor.Service) {
	t.Helper()
	c, err := remote.Dial(context.Background(), remote.ClientConfig{URLs: []string{url}, Timeout: 2 * time.Minute, MaxBatch: 64, MaxWait: 2 * time.Millisecond, MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cfg := extractor.DefaultConfig()
	cfg.ORTLib = os.Getenv("FEATUREFS_ORT_LIB")
	cfg.Device, cfg.BatchSize = "cpu", batch
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := extractor.New(cfg, models)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return c, svc
}
