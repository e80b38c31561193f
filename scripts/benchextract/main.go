// Command benchextract measures featurefs's extraction throughput (images/s)
// on a directory of images for some layers of one model, on the CPU, and
// prints JSON: per layer the images/s, wall seconds, the chosen batch size,
// and the seconds spent decoding+preprocessing (summed over workers) and in
// inference. scripts/bench-extract.sh runs it next to PyTorch.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/extractor"
)

type result struct {
	Layer         string  `json:"layer"`
	Images        int     `json:"images"`
	Seconds       float64 `json:"seconds"`
	ImagesPerSec  float64 `json:"images_per_s"`
	Batch         int     `json:"batch"`
	DecodeSeconds float64 `json:"decode_seconds"`
	InferSeconds  float64 `json:"infer_seconds"`
	Batches       int64   `json:"batches"`
	// CPUSeconds is the process's CPU time (user+system) over the timed
	// extraction: less sensitive than wall time to other load on the
	// machine.
	CPUSeconds float64 `json:"cpu_seconds"`
}

// cpuTime returns the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	model := flag.String("model", "", "model .onnx")
	dir := flag.String("images", "", "directory of images")
	layers := flag.String("layers", "layer12,layer18", "comma-separated layers")
	threads := flag.Int("threads", 0, "intra-op threads (0: cores)")
	batch := flag.Int("batch-size", 0, "batch size (0: measured)")
	ortLib := flag.String("ort-lib", extractor.DefaultORTLib(), "libonnxruntime shared library")
	version := flag.Bool("ort-version", false, "print the --ort-lib library's version and exit")
	flag.Parse()
	if *version {
		info, err := extractor.ProbeORTLib(*ortLib)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchextract:", err)
			os.Exit(1)
		}
		fmt.Println(info.Version)
		return
	}
	if err := run(*ortLib, *model, *dir, strings.Split(*layers, ","), *threads, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "benchextract:", err)
		os.Exit(1)
	}
}

func run(ortLib, model, dir string, layers []string, threads, batch int) error {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if err != nil || len(paths) == 0 {
		return fmt.Errorf("no .jpg in %s", dir)
	}
	sort.Strings(paths)
	imgs := make([][]byte, len(paths))
	for i, p := range paths {
		if imgs[i], err = os.ReadFile(p); err != nil {
			return err
		}
	}
	cfg := extractor.DefaultConfig()
	cfg.Device = "cpu"
	cfg.ORTLib = ortLib
	cfg.IntraOpThreads = threads
	cfg.BatchSize = batch
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: "m", Path: model}})
	if err != nil {
		return err
	}
	defer svc.Close()
	m, _ := svc.Model("m")
	ctx := context.Background()
	var out []result
	for _, name := range layers {
		l, ok := m.Lookup(name)
		if !ok {
			return fmt.Errorf("no layer %s", name)
		}
		extract := func(id string, b []byte) error {
			_, err := svc.Extract(ctx, extractor.Request{Model: "m", Layer: l.Index, Key: id, ID: id,
				Priority: extractor.Background, Fetch: func(context.Context) ([]byte, error) { return b, nil }})
			return err
		}
		// Warm-up: opens the session and measures the batch size.
		if err := extract("warmup-"+name, imgs[0]); err != nil {
			return err
		}
		before := svc.Stats()
		c0 := cpuTime()
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, len(imgs))
		for i, b := range imgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := extract(fmt.Sprintf("%s/%d", name, i), b); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		secs := time.Since(t0).Seconds()
		cpu := (cpuTime() - c0).Seconds()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		after := svc.Stats()
		out = append(out, result{
			Layer: name, Images: len(imgs), Seconds: secs, ImagesPerSec: float64(len(imgs)) / secs,
			Batch:         after.BatchSizes["m/"+l.Name],
			DecodeSeconds: after.DecodeSeconds - before.DecodeSeconds,
			InferSeconds:  after.InferSeconds - before.InferSeconds,
			Batches:       after.Batches - before.Batches,
			CPUSeconds:    cpu,
		})
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
