package extractor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/test/testenv"
)

func TestProfileMeasuredOnceAndCached(t *testing.T) {
	dir := t.TempDir()
	open := func() *Service {
		cfg := DefaultConfig()
		cfg.ORTLib = testenv.ORTLib(t)
		cfg.Device = "cpu"
		cfg.BatchSize = 2
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		svc, err := New(cfg, []ModelSpec{{Name: "resnet18", Path: testenv.Model(t, "resnet18")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		return svc
	}
	ctx := context.Background()
	svc := open()
	// The fastest of 3 runs per prefix: one run timed alone under -race,
	// beside other packages' tests on 2 cores, once took layer1's prefix
	// as long as the whole model (CI, stop 58), and the monotone fit
	// pooled them.
	p, err := svc.Profile(ctx, "resnet18", ProfileOptions{Dir: dir, Runs: 3})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := svc.Model("resnet18")
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(p.Layers) != len(m.Layers) || p.Digest != m.Digest || p.Device != "cpu" || p.Batch != 2 || p.Host != split.HostID() || p.Host == "" {
		t.Fatalf("profile %+v does not describe the model", p)
	}
	// Prefixes are timed whole and fitted non-decreasing: a segment may
	// cost 0 where timing noise pooled it with its neighbours, never less.
	for i, l := range p.Layers {
		if l.Tensor != m.Layers[i].Tensor || l.Bytes != m.Layers[i].Bytes || l.Seconds < 0 || l.WireRatio < 1 ||
			i > 0 && l.CumSeconds < p.Layers[i-1].CumSeconds {
			t.Errorf("layer %d: %+v", i, l)
		}
	}
	if p.Layers[0].CumSeconds <= 0 {
		t.Errorf("the first prefix timed at %g s", p.Layers[0].CumSeconds)
	}
	// ReLU outputs compress: some layer of the model measures a ratio
	// over 1.2 (the cost model divides its bytes by it).
	best := 0.0
	for _, l := range p.Layers {
		best = max(best, l.WireRatio)
	}
	if best < 1.2 {
		t.Errorf("no layer compresses by 1.2x or more (best %.2f)", best)
	}
	if p.DecodeSeconds <= 0 {
		t.Errorf("decode time %g", p.DecodeSeconds)
	}
	// The tensor path is timed: a copy of the first layer's 800 KB costs
	// CPU, and where it compresses, so do the codec's two ways.
	if l := p.Layers[0]; !(l.CopySeconds > 0) || l.WireRatio > 1 && !(l.EncodeSeconds > 0 && l.DecodeSeconds > 0) {
		t.Errorf("layer 0's tensor path: copy %g, encode %g, decode %g s (ratio %.2f)", l.CopySeconds, l.EncodeSeconds, l.DecodeSeconds, l.WireRatio)
	}
	// The cumulative time follows the compute: the last layer costs more
	// than the first block.
	if last := p.Layers[len(p.Layers)-1].CumSeconds; last <= p.Layers[1].CumSeconds {
		t.Errorf("cumulative %g s at the end, %g s at layer1", last, p.Layers[1].CumSeconds)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "profile-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	// In memory: the same profile.
	if p2, err := svc.Profile(ctx, "resnet18", ProfileOptions{Dir: dir, Runs: 1}); err != nil || p2 != p {
		t.Errorf("second call: %p %v, want the cached %p", p2, err, p)
	}
	// Another Service reads the file instead of measuring.
	st, _ := os.Stat(files[0])
	p3, err := open().Profile(ctx, "resnet18", ProfileOptions{Dir: dir, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(files[0])
	if !p3.Created.Equal(p.Created) || p3.Layers[3].Seconds != p.Layers[3].Seconds || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second service measured again: created %v vs %v", p3.Created, p.Created)
	}
	// A damaged file is measured again and rewritten.
	if err := os.WriteFile(files[0], []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	p4, err := open().Profile(ctx, "resnet18", ProfileOptions{Dir: dir, Runs: 1})
	if err != nil || p4.Created.Equal(p.Created) {
		t.Fatalf("damaged cache: %v, created %v", err, p4.Created)
	}
	if _, err := split.LoadProfile(files[0]); err != nil {
		t.Errorf("rewritten cache: %v", err)
	}
	if _, err := svc.Profile(ctx, "nope", ProfileOptions{}); err == nil {
		t.Error("unknown model profiled")
	}
}

// timeRuns takes the fastest run without a quota, and under one at least
// the run's CPU time over the quota: a run stopped between bursts (as a
// quota stops it) is timed at its sustained rate, and time it spends off
// the CPU (sleeping, waiting for another) is not charged to the quota.
func TestTimeRunsUnderAQuota(t *testing.T) {
	// spin uses d of this thread's CPU time (a spin for d of wall time
	// used 1.2 ms of 2 in a loaded CI run, other packages' tests on the
	// same 2 cores).
	spin := func(d time.Duration) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for c0 := threadCPU(); time.Duration(threadCPU()-c0) < d; {
		}
	}
	n := 0
	burst := func() error { // every third run is stopped for 20 ms
		n++
		if n%3 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		spin(2 * time.Millisecond)
		return nil
	}
	best, err := timeRuns(3, 0, burst)
	if err != nil || best > 50*time.Millisecond || n != 3 {
		t.Errorf("no quota: %v after %d runs (%v), want the fastest, about 2 ms, of 3", best, n, err)
	}
	n = 0
	sustained, err := timeRuns(3, 0.25, burst)
	if err != nil || sustained < 7500*time.Microsecond || sustained > time.Second {
		t.Errorf("quota 0.25: %v after %d runs (%v), want the CPU time over the quota, about 8 ms", sustained, n, err)
	}
	// At a quota of 0.05 a wall time charged as CPU time would read 200
	// ms.
	sleepy, err := timeRuns(3, 0.05, func() error { time.Sleep(10 * time.Millisecond); return nil })
	if err != nil || sleepy < 10*time.Millisecond || sleepy > 100*time.Millisecond {
		t.Errorf("quota 0.05, a run that sleeps 10 ms: %v (%v), want about 10 ms, the wall time", sleepy, err)
	}
	if _, err := timeRuns(3, 0.5, func() error { return errors.New("boom") }); err == nil {
		t.Error("a failing run was timed")
	}
}
