package test

// The split benchmark (HAPI; docs/SPLIT.md, docs/bench/split.md): for each
// storage speed, model, freeze layer and link bandwidth of the two-host
// test bed (netns_test.go's namespaces and shaped link, cpuside_test.go's
// cgroups: the storage side and the trainer side each on its own CPUs, the
// storage side optionally under a CPU quota), the steady-state throughput
// and bytes per sample of `--split auto` and of fixed splits (the raw-image
// baseline, "none" = the freeze layer itself, the cost model's best ranked
// layers and a spread of others) over one long-lived `featurefs serve`,
// the link re-shaped with SetRate between bandwidths and the storage
// side's quota changed between speeds (its profile is measured again: a
// profile is of its CPUs and quota).
//
// The trainer side runs in a helper process (this test binary re-run under
// nsenter in the trainer namespace): a remote.Client and one local
// extractor.Service drive SplitExtractors directly, without FUSE, so that
// one configuration costs only its images. Every configuration reads its own
// object keys (hard links of the same images under c<N>/), so no server cache
// entry of one configuration serves another.
//
// CI runs a short version (ResNet-18, one freeze layer, 200 Mbit/s, the
// whole storage CPU, a few images) that checks the figures are sound and
// that the cost model sees two hosts; FEATUREFS_SPLIT_BENCH=full runs the
// benchmark (scripts/bench-split.sh). FEATUREFS_SPLIT_BENCH_OUT names a
// file for the markdown section; FEATUREFS_SPLIT_BENCH_IMAGES the most
// images a run counts (full: 300, in a 4 s window after 8 warm-up ones),
// FEATUREFS_SPLIT_BENCH_ROUNDS how often each runs, interleaved (full: 3;
// the median counts), and FEATUREFS_SPLIT_BENCH_MODELS, _MBITS and
// _SPEEDS (comma-separated: model names, Mbit/s, storage cores, 0 for its
// whole CPUs), _FREEZE (0 or 1: each model's first or second freeze
// layer only) and _EXTRA (the fixed splits besides raw and none: the cost
// model's choice, its best ranked and a spread) narrow the full sweep.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/test/testenv"
)

// splitBenchPlan is what the parent tells the helper.
type splitBenchPlan struct {
	URL                      string
	ServerNS, ClientNS       string
	ServerDev, ClientDev     string
	Mbits                    []int
	Models                   []splitBenchModel
	Warm, Timed, Concurrency int
	// Window is how long completions are counted once Warm are done (at
	// most Timed of them: the keys a run has).
	Window   time.Duration
	RawBytes float64
	Configs  int // key prefixes c000.. available
	Rounds   int // runs of each configuration; the median counts
	// Speeds are the storage side's CPU quotas, in cores (0: its whole
	// CPUs), run in turn; StorageCgroup and StorageV2 are its cgroup, whose
	// quota the helper sets.
	Speeds                   []float64
	StorageCgroup            []string
	StorageV2                bool
	StorageCPUs, TrainerCPUs string
	// Converge is how many more keys an auto run has (a<N>/ prefixes,
	// AutoConfigs of them), read while its plan converges: the window
	// opens once the planner's calibration by both sides' measured CPU
	// (split.Planner.ObserveCPU) confirmed the plan in use, or after
	// ConvergeLimit.
	Converge, AutoConfigs     int
	ConvergeLimit             time.Duration
	Out                       string
	ProfileDir                string
	IntraOpThreads, BatchSize int
}

type splitBenchModel struct {
	Name    string
	Path    string
	Freezes []int
	// Extra is the number of fixed splits run besides raw and the freeze
	// layer; -1: every layer below the freeze layer.
	Extra int
}

// splitBenchResult is one configuration measured.
type splitBenchResult struct {
	Model        string    `json:"model"`
	Freeze       int       `json:"freeze"`
	Mbit         int       `json:"mbit"`
	ProbedMbit   float64   `json:"probed_mbit"`
	Policy       string    `json:"policy"` // auto, or the fixed split's name
	Split        int       `json:"split"`
	Rank         int       `json:"rank"` // 1 = the cost model's fastest
	Samples      int       `json:"samples"`
	StorageCores float64   `json:"storage_cores"` // the storage side's quota (0: its whole CPUs)
	PerSec       float64   `json:"per_sec"`       // the median of Runs
	Runs         []float64 `json:"runs"`          // samples/s of each round
	Predicted    float64   `json:"predicted_per_sec"`
	PayloadBytes float64   `json:"payload_bytes"` // per sample of the window, as the planner measured
	WireBytes    float64   `json:"wire_bytes"`    // per sample of the run, both directions of the trainer's link
	// RunPayloadBytes is the payload per sample of the whole run (auto's
	// samples before its plan converged included), as the planner measured.
	RunPayloadBytes float64 `json:"run_payload_bytes"`
	WantPayload     float64 `json:"want_payload"` // the .npy size of the split layer, or the mean image
	Shared          bool    `json:"shared_compute"`
	// SettleSeconds is how long the run waited for the previous one's
	// traffic and server work to end (settle).
	SettleSeconds float64 `json:"settle_seconds"`
	// StorageCPU and TrainerCPU are each side's CPU seconds per sample in
	// the window (user, system): the storage side's processes, and the
	// trainer's helper process.
	StorageCPU [2]float64 `json:"storage_cpu"`
	TrainerCPU [2]float64 `json:"trainer_cpu"`
	// Stages are the cost model's per-sample estimates of the chosen
	// split (server, wire, client seconds).
	Stages [3]float64 `json:"stages"`
	// Compressed says the plan sent the split's tensor compressed.
	Compressed bool `json:"compressed"`
	// For auto: ConvergeSeconds is how long after the Warm-th completion
	// the plan was confirmed by a calibration (Converged; false: the
	// window opened at ConvergeLimit without), Calibrations and Switches
	// the planner's, Factors the chosen split's server and client
	// calibration factors.
	ConvergeSeconds float64    `json:"converge_seconds,omitempty"`
	Converged       bool       `json:"converged,omitempty"`
	Calibrations    int        `json:"calibrations,omitempty"`
	Switches        int        `json:"switches,omitempty"`
	Factors         [2]float64 `json:"factors,omitempty"`
	// Converges holds ConvergeSeconds of each round (a negative one: not
	// converged).
	Converges []float64 `json:"converges,omitempty"`
}

func TestSplitBench(t *testing.T) {
	full := os.Getenv("FEATUREFS_SPLIT_BENCH") == "full"
	plan := splitBenchPlan{Warm: 4, Timed: 8, Concurrency: 8, Window: 2 * time.Second, Mbits: []int{200}, BatchSize: 4, Speeds: []float64{0},
		Converge: 600, ConvergeLimit: 20 * time.Second,
		Models: []splitBenchModel{{Name: "resnet18", Freezes: []int{6}, Extra: 1}}}
	if full {
		plan.Warm, plan.Timed, plan.Concurrency, plan.Window = 8, 300, 16, 4*time.Second
		plan.Converge = 1500
		plan.Mbits = []int{25, 100, 400, 1000}
		plan.Speeds = []float64{0, 0.5}
		// Four shapes: ResNet-18 (layer6 = layer3.0, 256x14x14; layer9 =
		// layer4.1, 512x7x7; every split), ResNet-50 (layer12 = layer3.3,
		// 1024x14x14; layer17 = layer4.2, 2048x7x7), MobileNetV3-Large
		// (layer21, 112x14x14; layer29, 960x7x7: small tensors, little
		// compute), ConvNeXt-Tiny (layer17, 384x14x14; layer21, 768x7x7:
		// ResNet-50's compute, larger early tensors). A sample of the
		// other models' splits: their runs cost 2-3x more.
		plan.Models = []splitBenchModel{{Name: "resnet18", Freezes: []int{6, 9}, Extra: -1}, {Name: "resnet50", Freezes: []int{12, 17}, Extra: 4},
			{Name: "mobilenet_v3_large", Freezes: []int{21, 29}, Extra: 4}, {Name: "convnext_tiny", Freezes: []int{17, 21}, Extra: 4}}
		if v := os.Getenv("FEATUREFS_SPLIT_BENCH_MODELS"); v != "" {
			want := strings.Split(v, ",")
			plan.Models = slices.DeleteFunc(plan.Models, func(m splitBenchModel) bool { return !slices.Contains(want, m.Name) })
			if len(plan.Models) == 0 {
				t.Fatalf("FEATUREFS_SPLIT_BENCH_MODELS=%q: none of resnet18, resnet50, mobilenet_v3_large, convnext_tiny", v)
			}
		}
		if v := os.Getenv("FEATUREFS_SPLIT_BENCH_FREEZE"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 || k > 1 {
				t.Fatalf("FEATUREFS_SPLIT_BENCH_FREEZE=%q: want 0 or 1, the first or the second freeze layer of each model", v)
			}
			for i := range plan.Models {
				plan.Models[i].Freezes = plan.Models[i].Freezes[k : k+1]
			}
		}
		if v := os.Getenv("FEATUREFS_SPLIT_BENCH_EXTRA"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 {
				t.Fatalf("FEATUREFS_SPLIT_BENCH_EXTRA=%q: want how many fixed splits to run besides raw and none", v)
			}
			for i := range plan.Models {
				plan.Models[i].Extra = k
			}
		}
		if v := os.Getenv("FEATUREFS_SPLIT_BENCH_MBITS"); v != "" {
			plan.Mbits = nil
			for _, f := range strings.Split(v, ",") {
				n, err := strconv.Atoi(f)
				if err != nil || n < 1 {
					t.Fatalf("FEATUREFS_SPLIT_BENCH_MBITS=%q: want Mbit/s, comma-separated", v)
				}
				plan.Mbits = append(plan.Mbits, n)
			}
		}
		if v := os.Getenv("FEATUREFS_SPLIT_BENCH_SPEEDS"); v != "" {
			plan.Speeds = nil
			for _, f := range strings.Split(v, ",") {
				q, err := strconv.ParseFloat(f, 64)
				if err != nil || q < 0 {
					t.Fatalf("FEATUREFS_SPLIT_BENCH_SPEEDS=%q: want storage cores (0: its whole CPUs), comma-separated", v)
				}
				plan.Speeds = append(plan.Speeds, q)
			}
		}
	}
	if v := os.Getenv("FEATUREFS_SPLIT_BENCH_IMAGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("FEATUREFS_SPLIT_BENCH_IMAGES=%q: want a number >= 2", v)
		}
		plan.Timed = n
	}
	for i := range plan.Models {
		plan.Models[i].Path = testenv.Model(t, plan.Models[i].Name)
	}
	perBW, autoPerBW := 0, 0
	for _, m := range plan.Models {
		autoPerBW += len(m.Freezes)
		for _, f := range m.Freezes {
			if m.Extra < 0 {
				perBW += 2 + f + 1 // auto, raw, 0..f
			} else {
				perBW += 3 + m.Extra // auto, raw, freeze, extras
			}
		}
	}
	plan.Rounds = 1
	if full {
		plan.Rounds = 3
	}
	if v := os.Getenv("FEATUREFS_SPLIT_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FEATUREFS_SPLIT_BENCH_ROUNDS=%q: want a number >= 1", v)
		}
		plan.Rounds = n
	}
	plan.Configs = perBW * len(plan.Mbits) * plan.Rounds * len(plan.Speeds)
	plan.AutoConfigs = autoPerBW * len(plan.Mbits) * plan.Rounds * len(plan.Speeds)

	// Images: ImageNet-like JPEGs (about 500x375, 110 KB), linked under one
	// prefix per configuration (as many keys as a run may read).
	data := t.TempDir()
	n := plan.Warm + plan.Timed + plan.Concurrency
	dirs := make([]string, plan.Configs)
	for c := range dirs {
		dirs[c] = fmt.Sprintf("c%03d", c)
	}
	plan.RawBytes = benchImages(t, data, min(n, 32), dirs, n, func(j int) string { return fmt.Sprintf("%03d.jpg", j) })
	autoDirs := make([]string, plan.AutoConfigs)
	for c := range autoDirs {
		autoDirs[c] = fmt.Sprintf("a%03d", c)
	}
	benchImages(t, data, min(n, 32), autoDirs, n+plan.Converge, func(j int) string { return fmt.Sprintf("%03d.jpg", j) })

	l := newNetLink(t, plan.Mbits[0])
	// Each side on its own CPUs: the cgroups are made before the processes
	// in them start, so that they are removed after those end.
	plan.StorageCPUs, plan.TrainerCPUs = splitCPUs(t)
	storage := newCPUSide(t, "storage", plan.StorageCPUs, plan.Speeds[0])
	trainer := newCPUSide(t, "trainer", plan.TrainerCPUs, 0)
	plan.StorageCgroup, plan.StorageV2 = storage.dirs, storage.v2
	var args []string
	for _, m := range plan.Models {
		if m.Name != modelName {
			args = append(args, "--model", m.Name+"="+m.Path)
		}
	}
	plan.URL = startServeInSide(t, l, storage, data, append(args, "--batch-size", strconv.Itoa(plan.BatchSize), "--log-level", "info")...)
	plan.ServerNS, plan.ClientNS, plan.ServerDev, plan.ClientDev = l.Server, l.Client, l.serverDev, l.clientDev
	plan.Out = filepath.Join(t.TempDir(), "results.json")
	plan.ProfileDir = spec.DefaultProfileDir()
	start := time.Now()
	runTrainerHelper(t, trainer, l, "TestSplitBenchHelper", "FFSB_PLAN", plan, 240*time.Minute)
	took := time.Since(start)
	rb, err := os.ReadFile(plan.Out)
	if err != nil {
		t.Fatalf("split bench helper wrote no results: %v", err)
	}
	var res []splitBenchResult
	if err := json.Unmarshal(rb, &res); err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 {
		t.Fatal("split bench: no configuration measured")
	}

	// The figures are sound: every configuration delivered every sample
	// at a positive rate, carried the payload its split implies (the .npy
	// of the split layer, or the images), and the link carried at least that.
	for _, r := range res {
		// Two hosts: the profiles are of disjoint CPUs, and the cost model
		// takes the slowest stage, not the sum of both sides' compute.
		if r.Shared {
			t.Errorf("%s %s layer%d: the cost model took the sides (CPUs %s and %s) for one host's shared processors", r.Model, r.Policy, r.Freeze, plan.StorageCPUs, plan.TrainerCPUs)
		}
		if r.Samples <= plan.Warm || !(r.PerSec > 0) || !(r.Predicted > 0) {
			t.Errorf("%s %s layer%d %d Mbit/s: %d samples at %.2f/s (predicted %.2f/s)", r.Model, r.Policy, r.Freeze, r.Mbit, r.Samples, r.PerSec, r.Predicted)
		}
		// A tensor may come compressed (--wire-compression): at most its
		// .npy size; an image comes as it is.
		// Images: a run reads as many as its window allows, so their mean
		// size is near, not at, the mean of the images made.
		if r.Split == spec.SplitRaw && math.Abs(r.PayloadBytes-r.WantPayload) > 0.05*r.WantPayload ||
			r.Split != spec.SplitRaw && !(r.PayloadBytes > 0 && r.PayloadBytes <= r.WantPayload+1) {
			t.Errorf("%s %s layer%d: %.0f payload bytes per sample, want %.0f (split %s; at most that for a tensor, which may come compressed)",
				r.Model, r.Policy, r.Freeze, r.PayloadBytes, r.WantPayload, spec.SplitName(r.Split))
		}
		// Auto corrected its cost model by both sides' CPU measured per
		// sample: the storage side's figures reach the trainer across
		// the processes and the link.
		if r.Policy == "auto" && (r.Calibrations < 1 || !(r.Factors[0] > 0) || !(r.Factors[1] > 0)) {
			t.Errorf("%s auto layer%d %d Mbit/s: %d calibrations (factors %v) in a run", r.Model, r.Freeze, r.Mbit, r.Calibrations, r.Factors)
		}
		if r.WireBytes < r.RunPayloadBytes {
			t.Errorf("%s %s layer%d: %.0f bytes per sample on the link, less than the run's %.0f payload", r.Model, r.Policy, r.Freeze, r.WireBytes, r.RunPayloadBytes)
		}
	}
	md := splitBenchMarkdown(plan, res, took, full)
	t.Logf("\n%s", md)
	if p := os.Getenv("FEATUREFS_SPLIT_BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// progressWriter passes the helper's progress lines to the test log.
type progressWriter struct{ t *testing.T }

func (w progressWriter) Write(p []byte) (int, error) {
	for _, ln := range strings.Split(string(p), "\n") {
		if strings.HasPrefix(ln, "splitbench: ") {
			fmt.Fprintln(os.Stderr, ln)
		}
	}
	return len(p), nil
}

// benchJPEG encodes a w x h image of gradients with noise: about 110 KB at
// 500x375 (ImageNet's mean JPEG).
func benchJPEG(w, h, seed int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			n := r.IntN(97) - 48
			c := func(v int) uint8 { return uint8(max(0, min(255, v+n))) }
			img.SetRGBA(x, y, color.RGBA{c(x * 255 / w), c(y * 255 / h), c((x + y + seed*37) % 256), 255})
		}
	}
	var b bytes.Buffer
	_ = jpeg.Encode(&b, img, &jpeg.Options{Quality: 90})
	return b.Bytes()
}

// TestSplitBenchHelper is the trainer side of TestSplitBench when run with
// FFSB_PLAN; otherwise it does nothing.
func TestSplitBenchHelper(t *testing.T) {
	var plan splitBenchPlan
	if !helperPlan(t, "FFSB_PLAN", &plan) {
		return
	}
	ctx := context.Background()
	var specs []extractor.ModelSpec
	for _, m := range plan.Models {
		specs = append(specs, extractor.ModelSpec{Name: m.Name, Path: m.Path})
	}
	c, svc := trainerSide(t, plan.URL, plan.BatchSize, specs)
	l := &netLink{Server: plan.ServerNS, Client: plan.ClientNS, serverDev: plan.ServerDev, clientDev: plan.ClientDev}

	storage := &cpuSide{dirs: plan.StorageCgroup, v2: plan.StorageV2}

	var results []splitBenchResult
	next, nextAuto := 0, 0
	for _, speed := range plan.Speeds {
		storage.SetQuota(t, speed)
		for _, mbit := range plan.Mbits {
			l.SetRate(t, mbit)
			for _, bm := range plan.Models {
				m, ok := svc.Model(bm.Name)
				if !ok {
					t.Fatalf("no model %s", bm.Name)
				}
				for _, freeze := range bm.Freezes {
					// Each run starts on an idle link and server (its
					// bandwidth probe, at the open, included).
					var settled time.Duration
					openSplit := func(policy string) *remote.SplitExtractor {
						settled = settle(t, l, storage)
						p, err := spec.ParseSplitPolicy(policy)
						if err != nil {
							t.Fatal(err)
						}
						x, err := c.Split(ctx, remote.SplitConfig{Policy: p, Local: svc, ProfileDir: plan.ProfileDir, RawBytes: plan.RawBytes, ProbeEvery: time.Hour})
						if err != nil {
							t.Fatalf("--split %s: %v", policy, err)
						}
						return x
					}
					xa := openSplit("auto")
					chosen, cands, err := xa.Planner(m.Name).Candidates(freeze)
					if err != nil {
						t.Fatal(err)
					}
					// Rank the candidates as the cost model does: by predicted
					// time (within 1% is a tie), then by bytes on the wire.
					// Fixed splits: raw, the freeze layer (none), then every
					// layer, or the auto choice, the best ranked and a spread of
					// the others.
					ranked := slices.Clone(cands)
					q := func(k split.Candidate) int {
						return int(math.Floor(math.Log(k.SecondsPerSample) / math.Log(1.01)))
					}
					sort.SliceStable(ranked, func(i, j int) bool {
						if qi, qj := q(ranked[i]), q(ranked[j]); qi != qj {
							return qi < qj
						}
						return ranked[i].WireBytes < ranked[j].WireBytes
					})
					rank := map[int]int{}
					for i, k := range ranked {
						rank[k.Split] = i + 1
					}
					fixed := []int{spec.SplitRaw, freeze}
					extra := bm.Extra
					if extra < 0 {
						extra = freeze
					}
					add := func(s int) bool {
						if slices.Contains(fixed, s) || len(fixed) >= 2+extra {
							return false
						}
						fixed = append(fixed, s)
						return true
					}
					add(chosen.Split)
					for _, k := range ranked {
						if len(fixed) >= 2+(extra+1)/2 {
							break
						}
						add(k.Split)
					}
					for i := 1; i <= extra; i++ {
						add(freeze * i / (extra + 1))
					}
					for s := 0; s < freeze && len(fixed) < 2+extra; s++ {
						add(s)
					}
					want := func(s int) float64 {
						if s == spec.SplitRaw {
							return plan.RawBytes
						}
						return float64(api.NPYSize(m.Layers[s].Shape, c.Info().DType))
					}
					slot := map[string]int{} // policy -> index in results
					run := func(x *remote.SplitExtractor, policy string) {
						if next >= plan.Configs {
							t.Fatalf("more configurations than the %d key prefixes", plan.Configs)
						}
						prefix, keys := fmt.Sprintf("c%03d", next), plan.Warm+plan.Timed+plan.Concurrency
						if policy == "auto" {
							if nextAuto >= plan.AutoConfigs {
								t.Fatalf("more auto runs than the %d key prefixes", plan.AutoConfigs)
							}
							prefix, keys = fmt.Sprintf("a%03d", nextAuto), keys+plan.Converge
							nextAuto++
						}
						r := splitBenchRun(t, l, storage, x, m, freeze, plan, prefix, keys, policy == "auto")
						r.SettleSeconds = settled.Seconds()
						next++
						r.Mbit, r.Policy, r.WantPayload, r.Rank, r.StorageCores = mbit, policy, want(r.Split), rank[r.Split], speed
						cs := r.ConvergeSeconds
						if !r.Converged {
							cs = -cs
						}
						if i, ok := slot[policy]; !ok {
							slot[policy] = len(results)
							r.Runs = []float64{r.PerSec}
							if policy == "auto" {
								r.Converges = []float64{cs}
							}
							results = append(results, r)
						} else {
							if r.Split != results[i].Split {
								fmt.Printf("splitbench: %s layer%d %d Mbit/s %s: chose %s in this round, %s in the first\n",
									m.Name, freeze, mbit, policy, spec.SplitName(r.Split), spec.SplitName(results[i].Split))
							}
							results[i].Runs = append(results[i].Runs, r.PerSec)
							if policy == "auto" {
								results[i].Converges = append(results[i].Converges, cs)
							}
							results[i].PerSec = median(results[i].Runs)
						}
						conv := ""
						if policy == "auto" {
							conv = fmt.Sprintf("; converged %v after %.1f s (%d calibrations, %d switches, factors server %.2f client %.2f)", r.Converged, r.ConvergeSeconds, r.Calibrations, r.Switches, r.Factors[0], r.Factors[1])
						}
						fmt.Printf("splitbench: storage %s cores, %s layer%d %d Mbit/s (probed %.0f) %s: split %s, %.2f samples/s (predicted %.2f), %.0f payload and %.0f link bytes per sample, settled in %.1f s; ms per sample: storage CPU %.1f+%.1f, trainer CPU %.1f+%.1f (user+system), predicted server %.1f wire %.1f client %.1f; tensor %s%s\n",
							coresName(speed), m.Name, freeze, mbit, r.ProbedMbit, policy, spec.SplitName(r.Split), r.PerSec, r.Predicted, r.PayloadBytes, r.WireBytes, r.SettleSeconds,
							1e3*r.StorageCPU[0], 1e3*r.StorageCPU[1], 1e3*r.TrainerCPU[0], 1e3*r.TrainerCPU[1], 1e3*r.Stages[0], 1e3*r.Stages[1], 1e3*r.Stages[2], tensorName(r), conv)
					}
					// Rounds run every configuration in turn again (fresh keys):
					// a burst of other load on the machine hits one run of a
					// configuration, not all of them; the median counts.
					for round := range plan.Rounds {
						if round > 0 {
							xa = openSplit("auto")
						}
						run(xa, "auto")
						xa.Close()
						for _, s := range fixed {
							x := openSplit(spec.SplitName(s))
							run(x, spec.SplitName(s))
							x.Close()
						}
					}
				}
			}
		}
	}
	rb, _ := json.Marshal(results)
	if err := os.WriteFile(plan.Out, rb, 0o644); err != nil {
		t.Fatal(err)
	}
}

// median returns the median of v (the mean of the middle two for an even
// count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// tensorName says how the run's split went on the wire: the image, or
// the tensor compressed or plain.
func tensorName(r splitBenchResult) string {
	switch {
	case r.Split == spec.SplitRaw:
		return "none (the image)"
	case r.Compressed:
		return "compressed"
	}
	return "plain"
}

// coresName names a storage speed: "all" for its whole CPUs.
func coresName(q float64) string {
	if q <= 0 {
		return "all"
	}
	return strconv.FormatFloat(q, 'f', -1, 64)
}

// splitBenchRun reads the nKeys images of key prefix prefix as layer
// freeze through x with plan.Concurrency readers: the first plan.Warm
// (sessions are opened on both sides) and, for auto, those read until its
// plan converged (a calibration confirmed it, at most
// plan.ConvergeLimit), then the completions in plan.Window, at most
// plan.Timed.
func splitBenchRun(t *testing.T, l *netLink, storage *cpuSide, x *remote.SplitExtractor, m *extractor.Model, freeze int, plan splitBenchPlan, prefix string, nKeys int, auto bool) splitBenchResult {
	t.Helper()
	size := api.NPYSize(m.Layers[freeze].Shape, x.DType())
	keys, stop, warmed, warm := make(chan string), make(chan struct{}), make(chan struct{}), make(chan struct{})
	// Once the window closes, the requests still in flight are cancelled:
	// on a slow link they would take seconds to drain.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var done []time.Time // GUARDED_BY(mu)
	go func() {
		defer close(keys)
		for j := range nKeys {
			select {
			case keys <- fmt.Sprintf("%s/%03d.jpg", prefix, j):
			case <-stop:
				return
			}
		}
	}()
	before := linkBytes(t, l)
	var wg sync.WaitGroup
	for range plan.Concurrency {
		wg.Go(func() {
			for k := range keys {
				data, err := x.Extract(ctx, extractor.Request{Model: m.Name, Layer: freeze, Key: k})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s: %v", k, err)
					}
					continue
				}
				if int64(len(data)) != size {
					t.Errorf("%s: %d bytes, want the %d of layer%d", k, len(data), size, freeze)
				}
				mu.Lock()
				done = append(done, time.Now())
				if len(done) == plan.Warm {
					close(warmed)
				}
				mu.Unlock()
			}
		})
	}
	// Steady state: the readers never wait for a new key, so the pipeline
	// stays full; the rate is the completions in a window that opens at
	// the Warm-th completion (sessions open on both sides, every stage
	// busy), at most Timed of them.
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	// The window opens at the Warm-th completion, or for auto once its
	// plan converged after it.
	var warmAt time.Time
	var conv struct {
		seconds   float64
		converged bool
	}
	convDone := make(chan struct{})
	go func() {
		defer close(convDone)
		select {
		case <-warmed:
		case <-ended:
			return
		}
		t0 := time.Now()
		if auto {
			p := x.Planner(m.Name)
			switches, since := -1, 0
			for time.Since(t0) < plan.ConvergeLimit && !conv.converged {
				st := p.Stats()
				cals := 0
				for _, ps := range st.Plans {
					if ps.Freeze == freeze {
						cals = ps.Calibrations
					}
				}
				if st.Switches != switches {
					// A switch, or the first look: the plan in use must
					// be confirmed by a calibration after it.
					switches, since = st.Switches, cals
					if st.Switches == 0 {
						since = 0
					}
				}
				if cals > since {
					conv.converged = true
					break
				}
				select {
				case <-time.After(50 * time.Millisecond):
				case <-ended:
					return
				}
			}
			conv.seconds = time.Since(t0).Seconds()
		}
		mu.Lock()
		warmAt = time.Now()
		mu.Unlock()
		close(warm)
	}()
	// Each side's CPU time over the window: what the stages cost, to set
	// against the cost model's estimates.
	// And the payload the planner counted: the window's, not that of the
	// samples auto read by another split before its plan converged.
	type cpuAt struct{ su, ss, tu, ts, payload, samples float64 }
	cpuNow := func() (c cpuAt) {
		c.su, c.ss = storage.CPUTimes(t)
		c.tu, c.ts, _ = procCPUTimes("self")
		for _, p := range x.Planner(m.Name).Stats().Plans {
			if p.Freeze == freeze {
				c.payload, c.samples = p.MeasuredWireBytes*float64(p.Samples), float64(p.Samples)
			}
		}
		return c
	}
	var cpu0, cpu1 cpuAt
	exhausted := false
	select {
	case <-warm:
		cpu0 = cpuNow()
		select {
		case <-time.After(plan.Window):
		case <-ended:
			exhausted = true
		}
		cpu1 = cpuNow()
	case <-ended:
		exhausted = true
	}
	close(stop)
	cancel()
	<-ended
	<-convDone
	wire := linkBytes(t, l) - before
	if t.Failed() {
		t.FailNow()
	}
	mu.Lock()
	n := len(done)
	slices.SortFunc(done, func(a, b time.Time) int { return a.Compare(b) })
	var perSec float64
	var cpuSample cpuAt
	if n > plan.Warm && !warmAt.IsZero() {
		t0, from := done[plan.Warm-1], plan.Warm
		if auto {
			t0 = warmAt
			for from < n && !done[from].After(t0) {
				from++
			}
		}
		end := t0.Add(plan.Window)
		in, last := 0, t0
		for _, d := range done[from:] {
			if !d.After(end) {
				in++
				last = d
			}
		}
		span := plan.Window
		if exhausted {
			span = last.Sub(t0) // the keys ran out before the window closed
		}
		perSec = float64(in) / span.Seconds()
		if in > 0 {
			cpuSample = cpuAt{su: (cpu1.su - cpu0.su) / float64(in), ss: (cpu1.ss - cpu0.ss) / float64(in), tu: (cpu1.tu - cpu0.tu) / float64(in), ts: (cpu1.ts - cpu0.ts) / float64(in)}
			if d := cpu1.samples - cpu0.samples; d > 0 {
				cpuSample.payload = (cpu1.payload - cpu0.payload) / d
			}
		}
	}
	mu.Unlock()
	st := x.Planner(m.Name).Stats()
	r := splitBenchResult{Model: m.Name, Freeze: freeze, Samples: n, ProbedMbit: st.PlannedBandwidthBps * 8 / 1e6, Shared: st.SharedCompute,
		WireBytes: float64(wire) / float64(n), PerSec: perSec,
		StorageCPU: [2]float64{cpuSample.su, cpuSample.ss}, TrainerCPU: [2]float64{cpuSample.tu, cpuSample.ts}}
	for _, p := range st.Plans {
		if p.Freeze == freeze {
			r.Split, r.Predicted, r.PayloadBytes, r.RunPayloadBytes = p.Split, p.PredictedPerSec, cpuSample.payload, p.MeasuredWireBytes
			r.Stages = [3]float64{p.ServerSeconds, p.WireSeconds, p.ClientSeconds}
			r.Compressed = p.Compressed
			if auto {
				r.Calibrations, r.Factors = p.Calibrations, [2]float64{p.ServerFactor, p.ClientFactor}
			}
		}
	}
	if auto {
		r.ConvergeSeconds, r.Converged, r.Switches = conv.seconds, conv.converged, st.Switches
	}
	return r
}

// settle waits until the link and both sides are idle: what a run left
// behind (responses on the wire, batches the server still computes after
// their requests were cancelled, the trainer finishing responses it had)
// slowed the next run and its bandwidth probe (auto, first in each round,
// probed 6-32 Mbit/s on 25 and 100 Mbit/s links and carried up to 4x its
// payload). Idle is two 250 ms intervals in a row with under 4 KB on the
// link and under a tenth of a core used by the storage side and by this
// process; after 30 s it gives up and says so. It returns how long it
// waited.
func settle(t *testing.T, l *netLink, storage *cpuSide) time.Duration {
	t.Helper()
	const every, limit = 250 * time.Millisecond, 30 * time.Second
	start := time.Now()
	busy := func() (int64, float64, float64) {
		u, k, _ := procCPUTimes("self")
		return linkBytes(t, l), storage.CPUSeconds(t), u + k
	}
	b, c, s := busy()
	quiet := 0
	for quiet < 2 {
		if time.Since(start) > limit {
			fmt.Printf("splitbench: the link or a side still busy after %s; measuring anyway\n", limit)
			break
		}
		time.Sleep(every)
		b2, c2, s2 := busy()
		if b2-b < 4<<10 && c2-c < 0.1*every.Seconds() && s2-s < 0.1*every.Seconds() {
			quiet++
		} else {
			quiet = 0
		}
		b, c, s = b2, c2, s2
	}
	return time.Since(start)
}

// linkBytes returns the bytes received plus sent by the trainer's end of l.
func linkBytes(t *testing.T, l *netLink) int64 {
	t.Helper()
	out, err := exec.Command("ip", "-n", l.Client, "-s", "-j", "link", "show", "dev", l.clientDev).Output()
	if err != nil {
		t.Fatalf("ip -n %s -s link show %s: %v", l.Client, l.clientDev, err)
	}
	var links []struct {
		Stats struct {
			RX, TX struct {
				Bytes int64 `json:"bytes"`
			}
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -s -j link show: %v: %s", err, out)
	}
	return links[0].Stats.RX.Bytes + links[0].Stats.TX.Bytes
}

// splitBenchMarkdown renders the results as the benchmark's section.
func splitBenchMarkdown(plan splitBenchPlan, res []splitBenchResult, took time.Duration, full bool) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Split execution (HAPI) on the two-host test bed: --split auto vs every fixed split\n\n")
	cmdline := "scripts/bench-split.sh   (FEATUREFS_SPLIT_BENCH=full go test -run '^TestSplitBench$' ./test)"
	if !full {
		cmdline = "go test -run '^TestSplitBench$' ./test   (the short CI version)"
	}
	w("    %s\n\n", cmdline)
	w("The two-host test bed (test/netns_test.go, test/cpuside_test.go): the storage side, one `featurefs serve` (CPU, batch %d)\n", plan.BatchSize)
	w("over a local directory, in its own network namespace and cgroup, on CPUs %s; the trainer side (remote.Client +\n", plan.StorageCPUs)
	w("SplitExtractor + a local extractor.Service, batch %d, no FUSE) in another namespace and cgroup, on CPUs %s. A veth pair\n", plan.BatchSize, plan.TrainerCPUs)
	w("shaped with tc tbf joins them, re-shaped between bandwidths; the storage side's CPU quota is set between storage speeds\n")
	w("(\"all\": its whole CPUs; 0.5: half a core, a weaker storage host), and its compute profile measured again for each\n")
	w("(a profile is of its process's CPUs and quota). The cost model sees two hosts (the profiles' CPU lists are disjoint:\n")
	w("time(S) = max(server, wire, client)); the test fails if it does not. Per run: %d concurrent readers of fresh images (about\n", plan.Concurrency)
	w("%.0f KB, ImageNet-like JPEGs) that never wait for a key, so the pipeline stays full; throughput = the completions in the\n", plan.RawBytes/1000)
	w("%s after the %d-th (sessions open on both sides, every stage busy), at most %d; for auto, the window opens once its plan\n", plan.Window, plan.Warm, plan.Timed)
	w("converged after that: the planner corrects its cost model by the CPU both sides measured per sample (every 250 ms, over\n")
	w("windows of at least 1 s and 16 samples, split.Calibration) and may move to another split; converged = a calibration that\n")
	w("kept the plan in use, at most %s (auto reads up to %d more keys meanwhile). Each configuration ran %d time(s), interleaved with the\n", plan.ConvergeLimit, plan.Converge, plan.Rounds)
	w("others (every policy of a configuration in turn, then again), each run on object keys of its own (no server cache entry\n")
	w("of one run serves another); a figure is the median of its runs. Took %s.\n\n", took.Round(time.Second))
	if full {
		w("**Fixed splits.** Per configuration the fixed splits run are raw, the freeze layer itself (`none`: the server computes\n")
		w("everything) and ")
		for i, m := range plan.Models {
			if i > 0 {
				w("; ")
			}
			if m.Extra < 0 {
				w("for %s every other layer", m.Name)
			} else {
				w("for %s a sample of %d other layers: the cost model's choice, its best ranked candidates and a spread of the rest", m.Name, m.Extra)
			}
		}
		w(". \"Best fixed\" is the best of those measured.\n\n")
	}

	type group struct {
		cores  float64
		model  string
		freeze int
		mbit   int
	}
	var groups []group
	by := map[group][]splitBenchResult{}
	for _, r := range res {
		g := group{r.StorageCores, r.Model, r.Freeze, r.Mbit}
		if _, ok := by[g]; !ok {
			groups = append(groups, g)
		}
		by[g] = append(by[g], r)
	}
	w("| storage cores | model | freeze | link | auto: split, samples/s | best fixed: split, samples/s | auto ÷ best | raw samples/s | auto ÷ raw | predicted: auto, best fixed's split | auto converged after, s (runs; - not) |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	within, total := 0, 0
	picked, pickedWithin := 0, 0
	worst := math.Inf(1)
	for _, g := range groups {
		var auto, raw, best splitBenchResult
		for _, r := range by[g] {
			switch {
			case r.Policy == "auto":
				auto = r
			default:
				if r.Split == spec.SplitRaw {
					raw = r
				}
				if r.PerSec > best.PerSec {
					best = r
				}
			}
		}
		ratio := auto.PerSec / best.PerSec
		for _, r := range by[g] {
			if r.Policy != "auto" && r.Split == auto.Split {
				picked++
				if r.PerSec >= 0.95*best.PerSec {
					pickedWithin++
				}
				break
			}
		}
		total++
		if ratio >= 0.95 {
			within++
		}
		worst = min(worst, ratio)
		convs := make([]string, len(auto.Converges))
		for i, c := range auto.Converges {
			convs[i] = fmt.Sprintf("%.1f", c)
			if c < 0 {
				convs[i] = fmt.Sprintf("- (%.1f)", -c)
			}
		}
		w("| %s | %s | layer%d | %d Mbit/s | %s, %.2f | %s, %.2f | %.2f | %.2f | %.2fx | %.2f, %.2f | %s |\n", coresName(g.cores), g.model, g.freeze, g.mbit,
			spec.SplitName(auto.Split), auto.PerSec, spec.SplitName(best.Split), best.PerSec, ratio, raw.PerSec, auto.PerSec/raw.PerSec,
			auto.Predicted, best.Predicted, strings.Join(convs, ", "))
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(1, total)) }
	okWithin, okWorst := float64(within) >= 0.9*float64(total), worst >= 0.8
	// One line per target, in the form make bench's summary reads.
	w("\n**Targets.**\n\n")
	w("auto within 5%% of the best fixed split: %d of %d configurations (%.0f%%; target 90%%: %s).\n", within, total, pct(within), metOrNot(okWithin))
	w("auto's worst ratio to the best fixed split: %.2f (target >= 0.8: %s).\n", worst, metOrNot(okWorst))
	w("auto's choice, by its own fixed runs, within 5%% of the best fixed split: %d of %d configurations (not a target: it sets the choice apart from the spread between auto's runs and the same split's fixed runs).\n", pickedWithin, picked)
	w("\nPredicted samples/s are the cost model's, from the compute profiles in ~/.cache/featurefs/profiles (one per model digest,\n")
	w("device, thread count, batch size, CPU list and quota: the storage side's and the trainer's are measured apart) and\n")
	w("the bandwidth the planner probed (the rate of the probe's second half, so that a shaper's burst does not count).\n")
	w("\nEvery configuration (rank = the cost model's order by predicted time at the probed bandwidth; none = the freeze layer;\n")
	w("samples/s: the median, then each run; payload bytes: the window's samples', of the first round; link bytes: the whole run's, auto's\n")
	w("samples before its plan converged included):\n\n")
	w("| storage cores | model | freeze | link (probed) | policy | split | rank | samples/s (runs) | predicted/s | payload bytes/sample | link bytes/sample |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range groups {
		for _, r := range by[g] {
			pol := r.Policy
			if r.Policy != "auto" && r.Split == r.Freeze {
				pol = "none (" + r.Policy + ")"
			}
			runs := make([]string, len(r.Runs))
			for i, x := range r.Runs {
				runs[i] = fmt.Sprintf("%.2f", x)
			}
			w("| %s | %s | layer%d | %d (%.0f) Mbit/s | %s | %s | %d | %.2f (%s) | %.2f | %.0f | %.0f |\n", coresName(r.StorageCores), r.Model, r.Freeze, r.Mbit, r.ProbedMbit, pol,
				spec.SplitName(r.Split), r.Rank, r.PerSec, strings.Join(runs, ", "), r.Predicted, r.PayloadBytes, r.WireBytes)
		}
	}
	return b.String()
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
