package test

// --split auto after the link's rate changes mid-epoch (issue 51): on the
// two-host test bed, readers pull a stream of fresh images through one
// SplitExtractor with the policy auto and the production probe period
// (remote.SplitConfig's default) while the link runs at one rate; then the
// rate changes and the stream goes on. Recorded: every completion's time
// and the planner's choice over time. Then every fixed split is measured
// at the new rate, and the report says when auto's throughput (5 s
// windows) came back within 10% of the best of them (target: 30 s).
//
// CI runs one direction (1000 -> 25 Mbit/s) with shorter phases and checks
// that auto re-planned after the change; FEATUREFS_SPLIT_BENCH=full
// (scripts/bench-split.sh) runs both directions with the report, to
// FEATUREFS_SPLIT_REPLAN_OUT.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/test/testenv"
)

type replanPlan struct {
	URL                  string
	ServerNS, ClientNS   string
	ServerDev, ClientDev string
	Model, Path          string
	Freeze               int
	From, To             int // Mbit/s before and after the change
	Before, After        time.Duration
	Concurrency, Batch   int
	RawBytes             float64
	Prefix               string // key prefix of the images (Keys of them)
	Keys                 int
	Fixed                bool // measure every fixed split at To afterwards
	FixedImages          int
	Out, ProfileDir      string
}

type replanResult struct {
	Done     []float64       `json:"done"`    // completion times, seconds from the start
	Choices  [][2]float64    `json:"choices"` // (time, split) at each change of auto's choice
	SwitchAt float64         `json:"switch_at"`
	Replans  int             `json:"replans"`
	Fixed    map[int]float64 `json:"fixed"` // split -> samples/s at To
	// ProbedMbit is the bandwidth auto's first probe measured (at From).
	ProbedMbit float64 `json:"probed_mbit"`
}

func TestSplitReplan(t *testing.T) {
	full := os.Getenv("FEATUREFS_SPLIT_BENCH") == "full"
	dirs := [][2]int{{1000, 25}}
	before, after := 15*time.Second, 30*time.Second
	if full {
		dirs = [][2]int{{1000, 25}, {25, 1000}}
		before, after = 30*time.Second, 60*time.Second
	}
	// Enough fresh keys for every phase at the fastest split: on an AVX-512
	// EPYC the full run's 90 s read more than 4,000.
	keys := 4000
	if full {
		keys = 12000
	}
	data := t.TempDir()
	var prefixes []string
	for d := range dirs {
		prefixes = append(prefixes, fmt.Sprintf("r%d", d))
	}
	rawBytes := benchImages(t, data, 20, prefixes, keys, func(k int) string { return fmt.Sprintf("%05d.jpg", k) })
	l := newNetLink(t, dirs[0][0])
	sc, tc := splitCPUs(t)
	storage := newCPUSide(t, "storage", sc, 0)
	trainer := newCPUSide(t, "trainer", tc, 0)
	model := "resnet18"
	path := testenv.Model(t, model)
	url := startServeInSide(t, l, storage, data, "--model", model+"="+path, "--batch-size", "4", "--log-level", "info")
	var md strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&md, format, a...) }
	w("## Split execution: --split auto after the link's rate changes mid-epoch\n\n")
	w("The two-host test bed (storage CPUs %s, trainer CPUs %s); %s, freeze layer6; %d concurrent readers of fresh images\n", sc, tc, model, 8)
	w("through one SplitExtractor with --split auto and the default probe period; the link changes rate %s after the start,\n", before)
	w("the readers go on for %s; then every fixed split runs at the new rate. Throughput in 5 s windows; \"back\" is the end of\n", after)
	w("the first window after the change whose throughput is within 10%% of the best fixed split's (target: 30 s).\n\n")
	w("| change | auto before: split, samples/s | auto re-planned after | auto after: split | best fixed after: split, samples/s | back within 10%% after | verdict |\n")
	w("|---|---|---|---|---|---|---|\n")
	var details, probes []string
	for d, rates := range dirs {
		plan := replanPlan{URL: url, ServerNS: l.Server, ClientNS: l.Client, ServerDev: l.serverDev, ClientDev: l.clientDev,
			Model: model, Path: path, Freeze: 6, From: rates[0], To: rates[1], Before: before, After: after,
			Concurrency: 8, Batch: 4, RawBytes: rawBytes, Prefix: fmt.Sprintf("r%d/", d), Keys: keys,
			Fixed: full, FixedImages: 24, Out: filepath.Join(t.TempDir(), "replan.json"), ProfileDir: spec.DefaultProfileDir()}
		l.SetRate(t, rates[0])
		runTrainerHelper(t, trainer, l, "TestSplitReplanHelper", "FFSR_PLAN", plan, 30*time.Minute)
		rb, err := os.ReadFile(plan.Out)
		if err != nil {
			t.Fatal(err)
		}
		var r replanResult
		if err := json.Unmarshal(rb, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Done) < 20 || len(r.Choices) == 0 {
			t.Fatalf("%d -> %d Mbit/s: %d samples, choices %v", rates[0], rates[1], len(r.Done), r.Choices)
		}
		choice := func(at float64) int {
			s := int(r.Choices[0][1])
			for _, c := range r.Choices {
				if c[0] <= at {
					s = int(c[1])
				}
			}
			return s
		}
		rate := func(from, to float64) float64 {
			n := 0
			for _, x := range r.Done {
				if x > from && x <= to {
					n++
				}
			}
			return float64(n) / (to - from)
		}
		replanned := -1.0
		for _, c := range r.Choices {
			if c[0] > r.SwitchAt && int(c[1]) != choice(r.SwitchAt) {
				replanned = c[0] - r.SwitchAt
				break
			}
		}
		end := r.SwitchAt + after.Seconds()
		t.Logf("%d -> %d Mbit/s (probed %.0f): before %s at %.2f/s; choices %v; replans %d; after: %s; fixed %v", rates[0], rates[1], r.ProbedMbit,
			spec.SplitName(choice(r.SwitchAt)), rate(r.SwitchAt-10, r.SwitchAt), r.Choices, r.Replans, spec.SplitName(choice(end)), r.Fixed)
		// The probe measures the link's rate, not its shaper's burst (a
		// 1 MiB probe timed whole read 1731 Mbit/s on 1000). CI checks
		// it at 1000 Mbit/s; the benchmark reports it for both rates
		// (at 25 Mbit/s it read up to 1.4x: open, issue 51).
		probeOK := r.ProbedMbit >= 0.7*float64(rates[0]) && r.ProbedMbit <= 1.3*float64(rates[0])
		probes = append(probes, fmt.Sprintf("%.0f Mbit/s on the %d Mbit/s link (%s)", r.ProbedMbit, rates[0],
			map[bool]string{true: "within 0.7-1.3x", false: "NOT within 0.7-1.3x"}[probeOK]))
		if !full {
			if !probeOK {
				t.Errorf("%d Mbit/s link: auto's first probe measured %.0f Mbit/s", rates[0], r.ProbedMbit)
			}
			// CI: the choice must follow the change (at 25 Mbit/s the
			// planner's choice at 1000 no longer wins), or the planner
			// must at least have re-planned.
			if replanned < 0 && r.Replans == 0 {
				t.Errorf("%d -> %d Mbit/s: auto never re-planned in %s after the change (choices %v)", rates[0], rates[1], after, r.Choices)
			}
			continue
		}
		bestSplit, best := spec.SplitRaw, 0.0
		for s, v := range r.Fixed {
			if v > best {
				bestSplit, best = s, v
			}
		}
		back := -1.0
		for at := r.SwitchAt; at+5 <= end+1e-9; at += 5 {
			if rate(at, at+5) >= 0.9*best {
				back = at + 5 - r.SwitchAt
				break
			}
		}
		rp, bk, verdict := "never", "never", "NOT met"
		if replanned >= 0 {
			rp = fmt.Sprintf("%.1f s", replanned)
		}
		if back >= 0 {
			bk = fmt.Sprintf("%.0f s", back)
			if back <= 30 {
				verdict = "met"
			}
		}
		w("| %d -> %d Mbit/s | %s, %.2f | %s | %s | %s, %.2f | %s | %s |\n", rates[0], rates[1], spec.SplitName(choice(r.SwitchAt)), rate(r.SwitchAt-10, r.SwitchAt),
			rp, spec.SplitName(choice(end)), spec.SplitName(bestSplit), best, bk, verdict)
		var win []string
		for at := r.SwitchAt - 10; at+5 <= end+1e-9; at += 5 {
			win = append(win, fmt.Sprintf("%.1f", rate(at, at+5)))
		}
		var fx []string
		for _, s := range slices.Sorted(maps.Keys(r.Fixed)) {
			fx = append(fx, fmt.Sprintf("%s %.2f", spec.SplitName(s), r.Fixed[s]))
		}
		details = append(details, fmt.Sprintf("%d -> %d Mbit/s: auto's samples/s in 5 s windows from 10 s before the change: %s; fixed splits after: %s.",
			rates[0], rates[1], strings.Join(win, ", "), strings.Join(fx, ", ")))
	}
	details = append(details, "auto's first bandwidth probe: "+strings.Join(probes, "; ")+".")
	for _, d := range details {
		w("\n%s\n", d)
	}
	if p := os.Getenv("FEATUREFS_SPLIT_REPLAN_OUT"); p != "" && full {
		if err := os.WriteFile(p, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSplitReplanHelper is the trainer side of TestSplitReplan when run with
// FFSR_PLAN; otherwise it does nothing.
func TestSplitReplanHelper(t *testing.T) {
	var plan replanPlan
	if !helperPlan(t, "FFSR_PLAN", &plan) {
		return
	}
	ctx := context.Background()
	c, svc := trainerSide(t, plan.URL, plan.Batch, []extractor.ModelSpec{{Name: plan.Model, Path: plan.Path}})
	l := &netLink{Server: plan.ServerNS, Client: plan.ClientNS, serverDev: plan.ServerDev, clientDev: plan.ClientDev}
	open := func(policy string) *remote.SplitExtractor {
		p, err := spec.ParseSplitPolicy(policy)
		if err != nil {
			t.Fatal(err)
		}
		x, err := c.Split(ctx, remote.SplitConfig{Policy: p, Local: svc, ProfileDir: plan.ProfileDir, RawBytes: plan.RawBytes})
		if err != nil {
			t.Fatalf("--split %s: %v", policy, err)
		}
		return x
	}
	next := 0
	key := func() string {
		k := fmt.Sprintf("%s%05d.jpg", plan.Prefix, next)
		next++
		if next > plan.Keys {
			t.Fatalf("more than the %d images", plan.Keys)
		}
		return k
	}
	// read runs readers on fresh keys until stop is closed (or n are read,
	// n > 0), calling done at each completion.
	read := func(x *remote.SplitExtractor, n int, stop <-chan struct{}, done func()) {
		keys := make(chan string)
		var wg sync.WaitGroup
		for range plan.Concurrency {
			wg.Go(func() {
				for k := range keys {
					if _, err := x.Extract(ctx, extractor.Request{Model: plan.Model, Layer: plan.Freeze, Key: k}); err != nil {
						t.Errorf("%s: %v", k, err)
						continue
					}
					done()
				}
			})
		}
	feed:
		for i := 0; n <= 0 || i < n; i++ {
			select {
			case keys <- key():
			case <-stop:
				break feed
			}
		}
		close(keys)
		wg.Wait()
	}

	var res replanResult
	var mu sync.Mutex
	x := open("auto")
	res.ProbedMbit = x.Planner(plan.Model).Stats().PlannedBandwidthBps * 8 / 1e6
	start := time.Now()
	since := func() float64 { return time.Since(start).Seconds() }
	stop := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		last := -2
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range x.Planner(plan.Model).Stats().Plans {
				if p.Freeze == plan.Freeze && p.Split != last {
					last = p.Split
					mu.Lock()
					res.Choices = append(res.Choices, [2]float64{since(), float64(p.Split)})
					mu.Unlock()
					fmt.Printf("splitbench: replan %d -> %d Mbit/s: at %.1f s auto chose %s\n", plan.From, plan.To, since(), spec.SplitName(p.Split))
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	go func() {
		time.Sleep(plan.Before)
		l.SetRate(t, plan.To)
		mu.Lock()
		res.SwitchAt = since()
		mu.Unlock()
		fmt.Printf("splitbench: replan: the link is now %d Mbit/s\n", plan.To)
		time.Sleep(plan.After)
		close(stop)
	}()
	read(x, 0, stop, func() {
		mu.Lock()
		res.Done = append(res.Done, since())
		mu.Unlock()
	})
	<-pollDone
	res.Replans = x.Planner(plan.Model).Stats().Replans
	x.Close()

	if plan.Fixed {
		res.Fixed = map[int]float64{}
		for s := spec.SplitRaw; s <= plan.Freeze; s++ {
			fx := open(spec.SplitName(s))
			read(fx, 8, nil, func() {}) // warm: sessions on both sides
			var n atomic.Int64
			t0 := time.Now()
			read(fx, plan.FixedImages, nil, func() { n.Add(1) })
			res.Fixed[s] = float64(n.Load()) / time.Since(t0).Seconds()
			fx.Close()
			fmt.Printf("splitbench: replan: fixed %s at %d Mbit/s: %.2f samples/s\n", spec.SplitName(s), plan.To, res.Fixed[s])
		}
	}
	rb, _ := json.Marshal(res)
	if err := os.WriteFile(plan.Out, rb, 0o644); err != nil {
		t.Fatal(err)
	}
}
