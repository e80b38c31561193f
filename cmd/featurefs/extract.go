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
	"github.com/featurefs/featurefs/extractor/spec"
)

const extractUsage = `Usage: featurefs extract --model M.onnx --layer K [flags] IMAGE... -o DIR

Writes the output of layer K (an index, "layerK" or an alias) for each image
as a .npy file under DIR, mirroring the images' directories relative to
their common parent directory (or to --relative-to DIR), so that

  featurefs extract ... train/cat/img0.jpg train/dog/img0.jpg -o out

writes out/cat/img0.npy and out/dog/img0.npy. The extension becomes .npy;
when two images in one directory differ only by extension, both keep it
(a.jpg.npy, a.png.npy). Inputs that would still write the same file (the
same image given twice; a.jpg.jpg next to a.jpg and a.png) are refused
before anything is extracted.

Exit codes: 0 every image written; 1 some image was bad or could not be
written (one error line each; the others are still written); 2 bad usage
(flags, colliding output names, an image outside --relative-to); 4 the
model, ONNX Runtime or the asked-for GPU.

Flags:
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
	relTo := fl.String("relative-to", "", "mirror the images' paths relative to this `directory` under -o (default: their common parent)")
	dtype := fl.String("dtype", string(def.DType), "float32 or float16")
	rt := bindRuntimeFlags(fl, def)
	batch := fl.Int("batch-size", 0, "inputs per run (0: chosen automatically)")
	allowCPU := fl.Bool("allow-cpu-fallback", false, "run on the CPU, with a warning, when the GPU that --device cuda[:N] or --tensorrt asks for cannot be had, instead of failing with exit code 4")
	fastDecode := fl.Bool("fast-decode", false, "decode JPEGs at least 2, 4 or 8 times larger than the resize needs at 1/2, 1/4 or 1/8 (libjpeg DCT scaling): faster on large photos, not bit-exact with torchvision")
	logLevel := fl.String("log-level", "warn", "debug, info, warn or error")
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *modelPath == "" || *layerArg == "" || *out == "" || len(pos) == 0 {
		fmt.Fprint(os.Stderr, extractUsage)
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: --log-level %q: %v\n", *logLevel, err)
		return exitUsage
	}
	if err := rt.check(); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", err)
		return exitUsage
	}
	names, err := outputPaths(pos, *relTo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nfeaturefs extract: "))
		return exitUsage
	}
	cfg := def
	rt.apply(&cfg)
	cfg.AllowCPUFallback, cfg.BatchSize = *allowCPU, *batch
	cfg.DType = extractor.DType(*dtype)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	name := strings.TrimSuffix(filepath.Base(*modelPath), filepath.Ext(*modelPath))
	pre := extractor.DefaultPreprocess()
	pre.FastDecode = *fastDecode
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: name, Path: *modelPath, Preprocess: &pre}})
	if errors.Is(err, extractor.ErrNoDevice) {
		fmt.Fprintf(os.Stderr, "featurefs extract: --%v %s\n", err, noDeviceHint(cfg.Device, cfg.TensorRT))
		return exitModel
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", err)
		return exitModel
	}
	defer svc.Close()
	if why := svc.Fallback(); why != "" {
		fmt.Fprintf(os.Stderr, "featurefs extract: warning: --%s (--allow-cpu-fallback)\n", why)
	}
	m, _ := svc.Model(name)
	layer, ok := m.Lookup(*layerArg)
	if !ok {
		if i, err := strconv.Atoi(*layerArg); err == nil {
			layer, ok = m.Lookup(spec.LayerName(i))
		}
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "featurefs extract: model %s has no layer %q (it has %s..%s; see featurefs layers)\n", *modelPath, *layerArg, spec.LayerName(0), spec.LayerName(len(m.Layers)-1))
		return exitUsage
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", err)
		return exitOther
	}

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
				fail(img, err) // the message is the reason; the line names the image
				return
			}
			dst := filepath.Join(*out, names[i])
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				fail(img, err)
				return
			}
			if err := writeFileAtomic(dst, b); err != nil {
				fail(img, err)
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		return exitOther
	}
	return exitOK
}

// outputPaths maps each input image to its .npy path under the output
// directory: its path relative to relTo (default: the inputs' common parent
// directory), with the extension replaced by .npy, or .npy appended when
// another input in the same directory differs only by extension. It fails,
// naming every problem, when an input is outside relTo or two inputs would
// write the same file.
func outputPaths(inputs []string, relTo string) ([]string, error) {
	abs := make([]string, len(inputs))
	for i, p := range inputs {
		a, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		abs[i] = a
	}
	base := ""
	if relTo != "" {
		a, err := filepath.Abs(relTo)
		if err != nil {
			return nil, fmt.Errorf("--relative-to %s: %w", relTo, err)
		}
		base = a
	} else {
		base = filepath.Dir(abs[0])
		for _, a := range abs[1:] {
			for !within(base, a) {
				base = filepath.Dir(base)
			}
		}
	}
	var errs []error
	rels := make([]string, len(inputs))
	for i, a := range abs {
		if !within(base, a) || a == base {
			errs = append(errs, fmt.Errorf("%s is not under --relative-to %s", inputs[i], relTo))
			continue
		}
		rel, err := filepath.Rel(base, a)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", inputs[i], err))
			continue
		}
		rels[i] = rel
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	stem := func(rel string) string { return strings.TrimSuffix(rel, filepath.Ext(rel)) }
	count := map[string]int{}
	for _, rel := range rels {
		count[stem(rel)]++
	}
	names := make([]string, len(inputs))
	owner := map[string]int{}
	for i, rel := range rels {
		n := stem(rel) + ".npy"
		if count[stem(rel)] > 1 {
			n = rel + ".npy"
		}
		if j, dup := owner[n]; dup && abs[i] == abs[j] {
			errs = append(errs, fmt.Errorf("%s is given twice (as %s too): give each image once", inputs[i], inputs[j]))
			continue
		} else if dup {
			errs = append(errs, fmt.Errorf("%s and %s would both write %s: extract them in separate runs, or rename one", inputs[j], inputs[i], n))
			continue
		}
		owner[n] = i
		names[i] = n
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return names, nil
}

// within reports whether path p is dir or below it.
func within(dir, p string) bool {
	if dir == string(filepath.Separator) {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
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
