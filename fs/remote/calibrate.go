package remote

// Calibration of the split cost model by the CPU both sides spend per
// sample while serving (split.Calibration): the profiles time a model's
// runs and a tensor's path alone, and serving costs more (HTTP, page
// faults, Go's runtime, decoding real images). Every tick the mount reads
// the first server's CPU time and samples served (GET /v1/load) and its
// own CPU time; over a window in which one freeze layer of one model
// delivered every sample by the split its plan has in use, the growth of
// each side's CPU over its samples is what a sample costs that side, and
// the planner corrects its estimates with it (Planner.ObserveCPU) and,
// under --split auto, moves to a better split where the corrected model
// finds one.

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/featurefs/featurefs/extractor/split"
)

const (
	// calMinWindow and calMinSamples are the least time and samples a
	// window counts; a shorter one is extended.
	calMinWindow  = time.Second
	calMinSamples = 16
	// calFlushSamples is how many samples the plan in use must have
	// delivered before a window opens: the requests of the previous plan
	// still in flight on the server cost it CPU meanwhile.
	calFlushSamples = 16
)

// processName is ServerStats.Process of this process.
func processName() string { return split.HostID() + "/" + strconv.Itoa(os.Getpid()) }

// errServerIsSelf is calSnapshot's error for a server in this process.
var errServerIsSelf = errors.New("the server is this process: its CPU time is the mount's too")

// calSnap is one tick's counters.
type calSnap struct {
	at            time.Time
	serverCPU     float64
	serverSamples int64
	clientCPU     float64
	probes        int64
	served        map[string][]split.Served // by model
}

// calibrate runs the windows every tick until the extractor closes.
func (x *SplitExtractor) calibrate(tick time.Duration) {
	ctx := x.owner.Context()
	tk := time.NewTicker(tick)
	defer tk.Stop()
	var start *calSnap
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		s, err := x.calSnapshot(ctx)
		if err != nil {
			x.log.Debug("featurefs: split calibration: server figures", slog.Any("err", err))
			start = nil
			continue
		}
		if start == nil {
			start = s
			continue
		}
		w, ok := calWindow(start, s)
		if !ok {
			start = s
			continue
		}
		if !w.ready {
			continue
		}
		p := x.planners[w.model]
		serverCPU := (s.serverCPU - start.serverCPU) / float64(s.serverSamples-start.serverSamples)
		clientCPU := (s.clientCPU - start.clientCPU) / float64(w.samples)
		if p.ObserveCPU(w.key, serverCPU, clientCPU) {
			st := p.Stats()
			for _, ps := range st.Plans {
				if ps.Freeze == w.key.Freeze {
					x.log.Info("featurefs: split re-planned by the CPU measured per sample", slog.String("model", w.model), slog.Int("freeze", ps.Freeze),
						slog.String("split", ps.SplitLayer), slog.Bool("compressed", ps.Compressed),
						slog.Float64("server_cpu_ms", serverCPU*1000), slog.Float64("local_cpu_ms", clientCPU*1000),
						slog.Float64("predicted_per_second", ps.PredictedPerSec))
				}
			}
		}
		start = s
	}
}

// calSnapshot reads the counters now.
func (x *SplitExtractor) calSnapshot(ctx context.Context) (*calSnap, error) {
	s := &calSnap{probes: x.probes.Load(), served: map[string][]split.Served{}}
	for name, p := range x.planners {
		s.served[name] = p.Served()
	}
	var ld Load
	if err := x.c.get(ctx, x.c.servers[0].url, "/v1/load", nil, &ld); err != nil {
		return nil, err
	}
	if ld.Process == processName() && !x.calSelf {
		return nil, errServerIsSelf
	}
	s.at, s.clientCPU = time.Now(), processCPU().Seconds()
	s.serverCPU, s.serverSamples = ld.CPUSeconds, ld.Samples
	if x.probes.Load() != s.probes {
		s.probes = -1 // a probe ran while it was read
	}
	return s, nil
}

// calWin is a window between two snapshots.
type calWin struct {
	model   string
	key     split.CalKey
	samples int64 // delivered by the mount
	ready   bool  // long enough to count
}

// calWindow returns the window from a to b, and false where it cannot
// count and a new one should open at b: a bandwidth probe ran (its CPU
// is not a sample's), no freeze layer or more than one delivered samples
// (the server's CPU cannot be told apart), the plan changed, a sample
// came by another split, or the plan had delivered fewer than
// calFlushSamples when the window opened.
func calWindow(a, b *calSnap) (calWin, bool) {
	if a.probes < 0 || b.probes < 0 || a.probes != b.probes || a.probes%2 != 0 {
		return calWin{}, false
	}
	var w calWin
	found := 0
	for model, now := range b.served {
		for _, sb := range now {
			var sa split.Served
			seen := false
			for _, s := range a.served[model] {
				if s.Key.Freeze == sb.Key.Freeze {
					sa, seen = s, true
				}
			}
			if sb.Total == sa.Total {
				continue
			}
			found++
			if !seen || sa.Key != sb.Key || sa.Run < calFlushSamples || sb.Run-sa.Run != sb.Total-sa.Total {
				return calWin{}, false
			}
			w = calWin{model: model, key: sb.Key, samples: sb.Total - sa.Total}
		}
	}
	if found != 1 || b.serverSamples <= a.serverSamples {
		return calWin{}, false
	}
	w.ready = b.at.Sub(a.at) >= calMinWindow && w.samples >= calMinSamples && b.serverSamples-a.serverSamples >= calMinSamples
	return w, true
}
