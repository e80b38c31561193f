package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/featurefs/featurefs/extractor"
)

const extractUsage = `Usage: featurefs extract --model M.onnx --layer K IMAGE... -o DIR

Writes DIR/<image name without extension>.npy for each image: the output of
layer K (an index, "layerK" or an alias) as a .npy file. When two images
differ only by extension, both keep it (a.jpg.npy, a.png.npy). A bad image
prints one error line naming it; the others are still written; the exit
status is then 1.
`

// runExtract implements "featurefs extract".
func runExtract(args []string) int {
	fl := flag.NewFlagSet("featurefs extract", flag.ContinueOnError)
	fl.Usage = func() { fmt.Fprint(fl.Output(), extractUsage); fl.PrintDefaults() }
	def := extractor.DefaultConfig()
	modelPath := fl.String("model", "", "model .onnx file")
	layerArg := fl.String("layer", "", "layer: index, layerK or alias")
	out := fl.String("o", "", "output directory")
	fl.StringVar(out, "out", "", "output directory (same as -o)")
	dtype := fl.String("dtype", string(def.DType), "float32 or float16")
	device := fl.String("device", def.Device, "auto, cpu, cuda or cuda:N")
	ortLib := fl.String("ort-lib", def.ORTLib, "libonnxruntime shared library (or $FEATUREFS_ORT_LIB)")
	batch := fl.Int("batch-size", 0, "inputs per run (0: chosen automatically)")
	tensorRT := fl.Bool("tensorrt", false, "use ONNX Runtime's TensorRT provider on a GPU")
	logLevel := fl.String("log-level", "warn", "debug, info, warn or error")
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *modelPath == "" || *layerArg == "" || *out == "" || len(pos) == 0 {
		fmt.Fprint(os.Stderr, extractUsage)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: --log-level %q: %v\n", *logLevel, err)
		return 2
	}
	cfg := def
	cfg.ORTLib, cfg.Device, cfg.TensorRT, cfg.BatchSize = *ortLib, *device, *tensorRT, *batch
	cfg.DType = extractor.DType(*dtype)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	name := strings.TrimSuffix(filepath.Base(*modelPath), filepath.Ext(*modelPath))
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: name, Path: *modelPath}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", err)
		return 1
	}
	defer svc.Close()
	m, _ := svc.Model(name)
	layer, ok := m.Lookup(*layerArg)
	if !ok {
		if i, err := strconv.Atoi(*layerArg); err == nil {
			layer, ok = m.Lookup("layer" + strconv.Itoa(i))
		}
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "featurefs extract: model %s has no layer %q (it has layer0..layer%d; see featurefs layers)\n", *modelPath, *layerArg, len(m.Layers)-1)
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", err)
		return 1
	}
	names := outputNames(pos)

	ctx := context.Background()
	sem := make(chan struct{}, 64) // bounded fan-out; the service batches
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	fail := func(img string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed++
		fmt.Fprintf(os.Stderr, "featurefs extract: %s: %v\n", img, err)
	}
	for i, img := range pos {
		if names[i] == "" {
			fail(img, fmt.Errorf("output name collides with another input's"))
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b, err := svc.Extract(ctx, extractor.Request{
				Model: name, Layer: layer.Index, Key: img, Priority: extractor.Foreground,
				Fetch: func(context.Context) ([]byte, error) { return os.ReadFile(img) },
			})
			if err != nil {
				var ie *extractor.ImageError
				if errors.As(err, &ie) {
					// The path is already in the line; say only why.
					err = errors.New(ie.Reason)
					if ie.Err != nil {
						err = fmt.Errorf("%s: %w", ie.Reason, ie.Err)
					}
				}
				fail(img, err)
				return
			}
			if err := writeFileAtomic(filepath.Join(*out, names[i]), b); err != nil {
				fail(img, err)
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		return 1
	}
	return 0
}

// outputNames maps each input to its .npy name; "" marks a collision.
func outputNames(paths []string) []string {
	stem := func(p string) string { b := filepath.Base(p); return strings.TrimSuffix(b, filepath.Ext(b)) }
	count := map[string]int{}
	for _, p := range paths {
		count[stem(p)]++
	}
	names := make([]string, len(paths))
	used := map[string]bool{}
	for i, p := range paths {
		n := stem(p) + ".npy"
		if count[stem(p)] > 1 {
			n = filepath.Base(p) + ".npy"
		}
		if used[n] {
			continue
		}
		used[n] = true
		names[i] = n
	}
	return names
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
