package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/mountopts"
)

const benchUsage = `Usage: featurefs bench --model M.onnx [flags] DIR

Measures, on the images (jpg, jpeg, png) under DIR, per layer of
--layers, one JSON object per mode and layer on stdout:

  extract  featurefs's extractor: every image through Service.Extract at
           once (decode and preprocess on all cores, batched inference),
           after one warm-up image (session, batch size) and one
           warm-up batch (a GPU's per-shape algorithm search); images/s
  decode   decode and preprocess alone on all cores, no model: the CPU
           ceiling of extract
  ort      bare ONNX Runtime on random input at the batch size extract
           chose (or --batch-size), as many batches at once as extract
           runs: the device ceiling of extract

On a GPU each result also has the GPU's mean utilization and peak memory
(NVML, sampled every 100 ms). scripts/gpu-check.sh runs it. Exit code 0,
1 when a measurement failed, 2 bad usage, 4 model, ONNX Runtime or GPU.

Flags:
`

// benchResult is one measurement.
type benchResult struct {
	Mode         string  `json:"mode"`
	Layer        string  `json:"layer,omitempty"`
	Device       string  `json:"device"`
	Images       int     `json:"images"`
	Seconds      float64 `json:"seconds"`
	ImagesPerSec float64 `json:"images_per_s"`
	Batch        int     `json:"batch,omitempty"`
	InFlight     int     `json:"in_flight,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	// Workers and Threads are the decode workers and ONNX Runtime's
	// intra-op threads it ran with.
	Workers int `json:"workers"`
	Threads int `json:"intra_op_threads"`
	// DecodeSeconds and InferSeconds (extract) are the wall-clock seconds
	// spent decoding and preprocessing (summed over workers) and in
	// ONNX Runtime runs; Batches the runs.
	DecodeSeconds float64 `json:"decode_seconds,omitempty"`
	InferSeconds  float64 `json:"infer_seconds,omitempty"`
	Batches       int64   `json:"batches,omitempty"`
	// GPUUtil is NVML's mean utilization (percent) over the measurement
	// and GPUMemMax the most GPU memory in use, of the first GPU where
	// several run; absent on the CPU.
	GPUUtil   *float64 `json:"gpu_util_percent,omitempty"`
	GPUMemMax *uint64  `json:"gpu_mem_max_bytes,omitempty"`
	// JPEGDecode (extract) says where JPEGs were decoded and why
	// (--decode); GPUDecoded how many images of the measurement were
	// decoded on the GPU (absent without a GPU decoder).
	JPEGDecode string `json:"jpeg_decode,omitempty"`
	GPUDecoded *int64 `json:"gpu_decoded,omitempty"`
}

// runBench implements "featurefs bench".
func runBench(args []string) int {
	fl := flag.NewFlagSet("featurefs bench", flag.ContinueOnError)
	fl.Usage = func() { fmt.Fprint(fl.Output(), benchUsage); fl.PrintDefaults() }
	def := extractor.DefaultConfig()
	model := fl.String("model", "", "model .onnx file")
	layers := fl.String("layers", "layer12,layer18", "comma-separated layers")
	modes := fl.String("modes", "extract,decode,ort", "comma-separated: extract, decode, ort")
	rt := extractorFlags(fl, mountopts.Bench)
	seconds := fl.Duration("ort-time", 5*time.Second, "how long the ort mode runs")
	limit := fl.Int("images", 0, "use at most this many images (0: all)")
	workers := fl.Int("workers", 0, "decode and preprocess workers (0: as a mount chooses)")
	threads := fl.Int("intra-op-threads", 0, "ONNX Runtime intra-op threads (0: as a mount chooses)")
	cpuProfile := fl.String("cpuprofile", "", "write a Go CPU profile of the whole run to this `file` (go tool pprof reads it)")
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *model == "" || len(pos) != 1 {
		fl.Usage()
		return exitUsage
	}
	want := map[string]bool{}
	for m := range strings.SplitSeq(*modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case "extract", "decode", "ort":
			want[m] = true
		default:
			fmt.Fprintf(os.Stderr, "featurefs bench: --modes: %q: want extract, decode or ort\n", m)
			return exitUsage
		}
	}
	imgs, err := readImages(pos[0], *limit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs bench: %v\n", err)
		return exitUsage
	}
	if err := checkExtractor(rt); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs bench: %v\n", err)
		return exitUsage
	}
	cfg := def
	applyExtractor(rt, &cfg)
	cfg.BatchSize = rt.BatchSize
	if *workers > 0 {
		cfg.Workers = *workers
	}
	if *threads > 0 {
		cfg.IntraOpThreads = *threads
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: "m", Path: *model}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs bench: %v\n", err)
		return exitModel
	}
	defer svc.Close()
	if why := noGPUDecode(rt.Decode, svc.Stats()); why != "" {
		// As --device cuda without a GPU: bench has no fallback.
		fmt.Fprintf(os.Stderr, "featurefs bench: %s (--decode cpu or auto decodes on the CPU)\n", why)
		return exitModel
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "featurefs bench: --cpuprofile: %v\n", err)
			return exitUsage
		}
		defer stop()
	}
	m, _ := svc.Model("m")
	enc := json.NewEncoder(os.Stdout)
	b := &bencher{svc: svc, m: m, imgs: imgs, gpu: gpuIndex(svc.Device()), workers: cfg.Workers, threads: cfg.IntraOpThreads}
	if want["decode"] {
		r := b.decode()
		if err := enc.Encode(r); err != nil {
			return exitOther
		}
	}
	for name := range strings.SplitSeq(*layers, ",") {
		l, ok := m.Lookup(strings.TrimSpace(name))
		if !ok {
			fmt.Fprintf(os.Stderr, "featurefs bench: model %s has no layer %q\n", *model, name)
			return exitUsage
		}
		bs := rt.BatchSize
		if want["extract"] {
			r, err := b.extract(l)
			if err != nil {
				fmt.Fprintf(os.Stderr, "featurefs bench: extract %s: %v\n", l.Name, err)
				return exitOther
			}
			bs = r.Batch
			if err := enc.Encode(r); err != nil {
				return exitOther
			}
		}
		if want["ort"] {
			if bs <= 0 {
				bs = 64
			}
			r, err := b.ort(l, bs, *seconds)
			if err != nil {
				fmt.Fprintf(os.Stderr, "featurefs bench: ort %s: %v\n", l.Name, err)
				return exitOther
			}
			if err := enc.Encode(r); err != nil {
				return exitOther
			}
		}
	}
	return exitOK
}

// readImages reads the images under dir (spec.DefaultImageExtensions), in
// path order.
func readImages(dir string, limit int) ([][]byte, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if spec.IsImage(filepath.Base(p), nil) && e.Type().IsRegular() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	if limit > 0 && len(paths) > limit {
		paths = paths[:limit]
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no jpg, jpeg or png image under %s", dir)
	}
	out := make([][]byte, len(paths))
	for i, p := range paths {
		if out[i], err = os.ReadFile(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// gpuIndex returns N of "cuda:N", or of "cuda:N,M,..." (the first GPU:
// the one sampled), or -1.
func gpuIndex(device string) int {
	n, ok := strings.CutPrefix(device, "cuda:")
	if !ok {
		return -1
	}
	n, _, _ = strings.Cut(n, ",")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}

type bencher struct {
	svc  *extractor.Service
	m    *extractor.Model
	imgs [][]byte
	gpu  int // GPU index (the first with several), -1 on the CPU
	// workers and threads are the extractor's decode workers and
	// intra-op threads.
	workers, threads int
}

// cpuTime returns the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs f, timing it and, on a GPU, sampling NVML every 100 ms.
func (b *bencher) measure(r *benchResult, f func() error) error {
	r.Device = b.svc.Device()
	r.Workers, r.Threads = b.workers, b.threads
	var stop chan struct{}
	var wg sync.WaitGroup
	var utilSum, samples float64
	var memMax uint64
	if b.gpu >= 0 {
		if s, err := extractor.NewGPUSampler("", b.gpu); err == nil {
			stop = make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer s.Close()
				t := time.NewTicker(100 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						if u, used, err := s.Sample(); err == nil {
							utilSum += float64(u)
							samples++
							memMax = max(memMax, used)
						}
					}
				}
			}()
		}
	}
	c0, t0 := cpuTime(), time.Now()
	err := f()
	r.Seconds = time.Since(t0).Seconds()
	r.CPUSeconds = (cpuTime() - c0).Seconds()
	if stop != nil {
		close(stop)
		wg.Wait()
		if samples > 0 {
			u := utilSum / samples
			r.GPUUtil, r.GPUMemMax = &u, &memMax
		}
	}
	if r.Seconds > 0 {
		r.ImagesPerSec = float64(r.Images) / r.Seconds
	}
	return err
}

// extract runs every image through the extractor at once.
func (b *bencher) extract(l extractor.Layer) (benchResult, error) {
	ctx := context.Background()
	one := func(id string, img []byte) error {
		_, err := b.svc.Extract(ctx, extractor.Request{Model: "m", Layer: l.Index, Key: id, ID: id, Priority: extractor.Background,
			Fetch: func(context.Context) ([]byte, error) { return img, nil }})
		return err
	}
	if err := one("warmup/"+l.Name, b.imgs[0]); err != nil {
		return benchResult{}, err
	}
	// Then one full batch: on a GPU, cuDNN's algorithm search runs on
	// the first batch of each shape, once per process, and is no part of
	// the rate a long run sees.
	var wg sync.WaitGroup
	var first firstError
	for i := range b.svc.Stats().BatchSizes["m/"+l.Name] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first.set(one(fmt.Sprintf("warmup/%s/%d", l.Name, i), b.imgs[i%len(b.imgs)]))
		}()
	}
	wg.Wait()
	if err := first.get(); err != nil {
		return benchResult{}, err
	}
	r := benchResult{Mode: "extract", Layer: l.Name, Images: len(b.imgs), InFlight: b.svc.InFlight()}
	before := b.svc.Stats()
	err := b.measure(&r, func() error {
		var wg sync.WaitGroup
		var first firstError
		for i, img := range b.imgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := one(fmt.Sprintf("%s/%d", l.Name, i), img); err != nil {
					first.set(err)
				}
			}()
		}
		wg.Wait()
		return first.get()
	})
	after := b.svc.Stats()
	r.Batch = after.BatchSizes["m/"+l.Name]
	r.DecodeSeconds = after.DecodeSeconds - before.DecodeSeconds
	r.InferSeconds = after.InferSeconds - before.InferSeconds
	r.Batches = after.Batches - before.Batches
	r.JPEGDecode = after.JPEGDecode
	if g, g0 := after.GPUDecode, before.GPUDecode; g != nil && g0 != nil {
		n := g.Decoded - g0.Decoded
		r.GPUDecoded = &n
	}
	return r, err
}

// decode decodes and preprocesses every image on all cores.
func (b *bencher) decode() benchResult {
	workers := runtime.NumCPU()
	r := benchResult{Mode: "decode", Images: len(b.imgs), InFlight: workers}
	var failed atomic.Int64
	b.measure(&r, func() error {
		next := make(chan []byte)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]float32, b.m.InputElements())
				for img := range next {
					if err := extractor.ApplyPreprocess(b.m.Preprocess, img, extractor.DefaultMaxPixels, buf); err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		for _, img := range b.imgs {
			next <- img
		}
		close(next)
		wg.Wait()
		return nil
	})
	r.Workers, r.Threads = workers, 0
	r.Images -= int(failed.Load())
	r.ImagesPerSec = float64(r.Images) / r.Seconds
	return r
}

// ort runs batches of bs random inputs through layer l, InFlight at once,
// for d after one warm-up batch per runner.
func (b *bencher) ort(l extractor.Layer, bs int, d time.Duration) (benchResult, error) {
	k := b.svc.InFlight()
	ie, oe := b.m.InputElements(), int(l.Elements())
	type bufs struct {
		in, out []float32
	}
	runners := make([]bufs, k)
	for i := range runners {
		in, freeIn := b.svc.HostBuffer(bs * ie)
		out, freeOut := b.svc.HostBuffer(bs * oe)
		if freeIn != nil {
			defer freeIn()
		}
		if freeOut != nil {
			defer freeOut()
		}
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		for j := range in {
			in[j] = rng.Float32()*4 - 2
		}
		runners[i] = bufs{in, out}
	}
	ctx := context.Background()
	for _, rb := range runners {
		if err := b.svc.RunBatch(ctx, "m", l.Index, bs, rb.in, rb.out); err != nil {
			return benchResult{}, err
		}
	}
	r := benchResult{Mode: "ort", Layer: l.Name, Batch: bs, InFlight: k}
	var done atomic.Int64
	err := b.measure(&r, func() error {
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		var first firstError
		for _, rb := range runners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if err := b.svc.RunBatch(ctx, "m", l.Index, bs, rb.in, rb.out); err != nil {
						first.set(err)
						return
					}
					done.Add(int64(bs))
				}
			}()
		}
		wg.Wait()
		return first.get()
	})
	r.Images = int(done.Load())
	r.ImagesPerSec = float64(r.Images) / r.Seconds
	return r, err
}

// firstError keeps the first error reported to it.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// startCPUProfile writes a Go CPU profile to path (through a temporary
// file renamed into place: never through a link) until stop, which
// reports a failure to keep it on stderr.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := safefile.Create(path, 0o644)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Abort()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Commit(); err != nil {
			fmt.Fprintf(os.Stderr, "featurefs: CPU profile %s: %v\n", path, err)
		}
	}, nil
}
