//go:build cgo

// These tests run the real extractor (ONNX Runtime, cgo); the packages
// they test are cgo-free (TestFSIsCgoFree).

package remote

// Regression test: a mount with a short silence timeout (--remote-timeout
// 2s) and --model failed at mount time because Split probed and profiled
// the server even for --split none, and GET /v1/profile (seconds of
// measurement on a CPU) ran under the silence timeout.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

// slowProfiler is a real extraction service whose Profile takes delay and
// returns prof (a server measuring its profile on a slow CPU).
type slowProfiler struct {
	*extractor.Service
	delay time.Duration
	prof  *split.Profile
}

func (s *slowProfiler) Profile(ctx context.Context, model string, opts api.ProfileOptions) (*split.Profile, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.prof, nil
}

// syntheticProfile is a valid CPU profile of m (1 ms per layer), so that
// the test does not spend its time measuring one.
func syntheticProfile(m *api.Model, threads, batch int) *split.Profile {
	p := &split.Profile{Schema: split.ProfileSchema, Model: m.Name, Digest: m.Digest, Device: "cpu", Host: split.HostID(), Threads: threads, Batch: batch,
		Created: time.Now().UTC(), DecodeSeconds: 0.005, WeightBytes: 1 << 20}
	for i, l := range m.Layers {
		p.Layers = append(p.Layers, split.LayerProfile{Index: i, Tensor: l.Tensor, Bytes: l.Bytes, ActBytes: l.Bytes, Seconds: 0.001, CumSeconds: 0.001 * float64(i+1)})
	}
	return p
}

// pathCounter counts the requests of each URL path.
type pathCounter struct {
	profile, probe atomic.Int64
}

func (p *pathCounter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/profile":
			p.profile.Add(1)
		case "/v1/probe":
			p.probe.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

func TestSplitShortTimeoutSlowProfile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.jpg"), splitJPEG(t, 64, 48, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := extractor.DefaultConfig()
	cfg.ORTLib = testenv.ORTLib(t)
	cfg.Device = "cpu"
	cfg.BatchSize = 2
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: "resnet18", Path: testenv.Model(t, "resnet18")}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	b, err := bucket.Open(ctx, dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 500 * time.Millisecond
	const delay = 4 * timeout
	// The mount's profile: a synthetic one in its profile directory, under
	// the name Service.Profile looks for (another name only makes the test
	// measure one, slowly).
	m, _ := svc.Model("resnet18")
	prof := syntheticProfile(m, cfg.IntraOpThreads, cfg.BatchSize)
	localDir := t.TempDir()
	if err := split.SaveProfile(filepath.Join(localDir, fmt.Sprintf("profile-%s-cpu-t%d-b%d.json", m.Digest[:16], cfg.IntraOpThreads, cfg.BatchSize)), prof); err != nil {
		t.Fatal(err)
	}
	serve := func(heartbeat time.Duration) (*httptest.Server, *pathCounter) {
		srv, err := newTestServer(t, testConfig{pipelineConfig{Bucket: b, Extractor: &slowProfiler{svc, delay, prof}, Cache: newMemCache()},
			ServerConfig{NoAuth: true, ProfileDir: t.TempDir(), Heartbeat: heartbeat}})
		if err != nil {
			t.Fatal(err)
		}
		pc := &pathCounter{}
		hs := httptest.NewServer(pc.wrap(srv))
		t.Cleanup(hs.Close)
		return hs, pc
	}

	hs, pc := serve(100 * time.Millisecond)
	c, err := Dial(ctx, clientLimits(ClientConfig{URLs: []string{hs.URL}, Timeout: timeout}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	table := c.Info().Models[0].Table

	// --split none with the models given: nothing measured, nothing asked.
	x, err := c.Split(ctx, SplitConfig{Policy: spec.SplitPolicy{Mode: "none"}, Local: svc, ProfileDir: t.TempDir()})
	if err != nil {
		t.Fatalf("--split none with a %v timeout: %v", timeout, err)
	}
	if n, m := pc.profile.Load(), pc.probe.Load(); n != 0 || m != 0 || x.Planner("resnet18") != nil {
		t.Errorf("--split none: %d profile and %d probe requests, planner %v; want none", n, m, x.Planner("resnet18"))
	}
	if got, ok := layersTable(x, "resnet18"); !ok || got != table || !strings.Contains(got, "input") {
		t.Errorf("split extractor's layers table (%v):\n%s\nwant the server's:\n%s", ok, got, table)
	}
	x.Close()

	// --split auto: the server takes 4x the silence timeout to profile,
	// sending heartbeats; the profile arrives.
	start := time.Now()
	x, err = c.Split(ctx, SplitConfig{Policy: spec.SplitPolicy{Mode: "auto"}, Local: svc, ProfileDir: localDir, ProbeBytes: 64 << 10})
	if err != nil {
		t.Fatalf("--split auto with a %v timeout and a server profiling for %v: %v", timeout, delay, err)
	}
	if took := time.Since(start); took < delay || pc.profile.Load() != 1 || x.Planner("resnet18") == nil {
		t.Errorf("--split auto: took %v, %d profile requests, planner %v", took, pc.profile.Load(), x.Planner("resnet18"))
	}
	if got, ok := layersTable(x, "resnet18"); !ok || got != table {
		t.Errorf("split extractor's layers table under auto: %v", ok)
	}
	x.Close()

	// A server that sends nothing while profiling (heartbeats slower than
	// the timeout) still fails after the silence timeout, not the profile
	// timeout.
	hs2, _ := serve(time.Minute)
	c2, err := Dial(ctx, clientLimits(ClientConfig{URLs: []string{hs2.URL}, Timeout: timeout}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	start = time.Now()
	_, err = c2.Split(ctx, SplitConfig{Policy: spec.SplitPolicy{Mode: "auto"}, Local: svc, ProfileDir: localDir, ProbeBytes: 64 << 10})
	// The server answers its header after 100ms and then stays silent.
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took > delay {
		t.Errorf("--split auto with a silent server: %v after %v; want ErrUnavailable after about %v", err, took, timeout)
	}
}
