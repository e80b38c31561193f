package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/mountopts"
)

const extractUsage = `Usage: featurefs extract --model M.onnx --layer K [flags] IMAGE|DIR... -o DIR
       featurefs extract --model M.onnx --layer K [flags] --files-from FILE|- -o DIR

Writes the output of layer K (an index, "layerK" or an alias) for each image
as a .npy file under DIR, mirroring the images' directories relative to
their common parent directory (or to --relative-to DIR), so that

  featurefs extract ... train/cat/img0.jpg train/dog/img0.jpg -o out

writes out/cat/img0.npy and out/dog/img0.npy. A directory stands for every
image under it (recursively, by --image-extensions; symbolic links to
directories are not followed), laid out relative to the directory itself:

  featurefs extract ... train -o out

writes out/cat/img0.npy, out/dog/img0.npy, ... --files-from names one
image or directory per line (NUL-separated with --null; "-" reads stdin),
so a dataset of any size needs no arguments:

  find /data/train -name '*.jpg' | featurefs extract ... --files-from - --relative-to /data -o out

The extension becomes .npy; when two images in one directory differ only
by extension, both keep it (a.jpg.npy, a.png.npy). Inputs that would still
write the same file (the same image given twice; a.jpg.jpg next to a.jpg
and a.png) are refused before anything is extracted. The list of inputs
(every path and its output path) is held in memory.

With --augment K, extract writes K augmented views of every image
instead: view k (0 <= k < K) to DIR/k/ under the same paths, torchvision's
RandomResizedCrop(224) and RandomHorizontalFlip with random numbers drawn
from the image's path under -o, its size and mtime, k and --augment-seed
(docs/AUGMENT.md), so that DatasetFolder(DIR/<epoch % K>) trains on one
view per epoch. Each view's parameters (the crop box in the image's
pixels, the flip, the size, the seed and k) are its extended attribute
user.featurefs.augment and a line of the augment.jsonl in its directory.

Progress (done/total, rate, ETA) goes to stderr: a bar redrawn in place on
a terminal, a plain line every --progress-interval otherwise; then a
summary and the images that failed, with the reasons (the first 1000).

Exit codes: 0 every image written; 1 some image was bad or could not be
written (listed at the end; the others are still written), or a directory
could not be listed, or an interrupt; 2 bad usage (flags, no image found,
colliding output names, an image outside --relative-to); 4 the model, ONNX
Runtime or the asked-for GPU.

Flags:
`

// extractArgs are extract's own flags.
type extractArgs struct {
	model, layer, out, relTo, logLevel string
	filesFrom, imageExts               string
	null                               bool
	interval                           time.Duration
	aug                                augmentArgs
}

// runExtract implements "featurefs extract".
func runExtract(args []string) int {
	a, rt, pos, level, err := parseExtract(args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return reportExtract(err)
	}
	// An interrupt stops extract whatever it does: listing, loading the
	// model, extracting (interruptContext).
	ctx, stop := interruptContext("extract")
	defer stop()
	images, names, in, err := extractImages(ctx, a, pos)
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "featurefs extract: interrupted while listing the inputs; nothing was extracted")
		return exitOther
	}
	if err != nil {
		return reportExtract(err)
	}
	svc, name, layer, err := openExtractModel(a, rt, level)
	if err != nil {
		return reportExtract(err)
	}
	defer svc.Close()
	if err := os.MkdirAll(a.out, 0o755); err != nil {
		return reportExtract(failf(exitOther, "%v", err))
	}

	prog := newProgressFor(os.Stderr, a.interval, "extract")
	var res warmOutcome
	if a.aug.views > 0 {
		res = extractViews(ctx, svc, name, layer, a.aug, images, names, a.out, prog, rt.MaxObjectSize)
	} else {
		res = extractAll(ctx, images, names, a.out, prog, func(ctx context.Context, img string) ([]byte, error) {
			return svc.Extract(ctx, extractor.Request{
				Model: name, Layer: layer.Index, Key: img, Priority: extractor.Foreground,
				Fetch: func(context.Context) ([]byte, error) { return readRegular(img, rt.MaxObjectSize) },
			})
		})
	}
	prog.finish(true)
	res.addFailures(in.bad, in.badN)
	res.decode = decodeLine(svc.Stats(), res.done)
	res.printAs(os.Stderr, "extract")
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "featurefs extract: interrupted after %d of %d; the .npy files written are complete\n", res.done, res.total)
		return exitOther
	case res.failed > 0:
		return exitOther
	}
	return exitOK
}

// errExtractFlags is a command line the flag package refused, and has
// said why.
var errExtractFlags = failf(exitUsage, "bad flags")

// reportExtract prints err as extract's message and returns its exit code.
func reportExtract(err error) int {
	switch err {
	case errExtractFlags:
	default:
		fmt.Fprintf(os.Stderr, "featurefs extract: %v\n", err)
	}
	return exitCode(err)
}

// parseExtract parses extract's command line and checks its values;
// flag.ErrHelp when -h was asked (the flag package printed the help).
func parseExtract(args []string) (a extractArgs, rt *mountopts.Options, pos []string, level slog.Level, err error) {
	fl := flag.NewFlagSet("featurefs extract", flag.ContinueOnError)
	fl.Usage = func() { fmt.Fprint(fl.Output(), extractUsage); fl.PrintDefaults() }
	fl.StringVar(&a.model, "model", "", "model .onnx file")
	fl.StringVar(&a.layer, "layer", "", "layer: index, layerK or alias")
	fl.StringVar(&a.out, "o", "", "output directory")
	fl.StringVar(&a.out, "out", "", "output directory (same as -o)")
	fl.StringVar(&a.relTo, "relative-to", "", "mirror the images' paths relative to this `directory` under -o (default: their common parent; a directory argument counts as its own parent)")
	fl.StringVar(&a.filesFrom, "files-from", "", "read images and directories from this `file`, one per line (\"-\": stdin), besides the arguments")
	fl.BoolVar(&a.null, "null", false, "--files-from entries end with NUL bytes (find -print0), not newlines")
	fl.StringVar(&a.imageExts, "image-extensions", strings.Join(spec.DefaultImageExtensions(), ","), "the files a directory argument stands for, by extension, comma-separated")
	rt = extractorFlags(fl, mountopts.Extract)
	addAugmentFlags(fl, &a.aug)
	fl.DurationVar(&a.interval, "progress-interval", 5*time.Second, "how often a progress line is printed when stderr is not a terminal")
	fl.StringVar(&a.logLevel, "log-level", "warn", "debug, info, warn or error")
	pos, err = parseInterspersed(fl, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return a, rt, pos, level, err
		}
		return a, rt, pos, level, errExtractFlags
	}
	if missing := extractMissing(a, pos); missing != "" {
		// One line naming what is missing, then the flags (not the
		// whole help, whose flags section used to come out empty).
		var flags strings.Builder
		fl.SetOutput(&flags)
		fl.PrintDefaults()
		return a, rt, pos, level, failf(exitUsage, "%s\nFlags (featurefs extract -h for the whole help):\n%s", missing, strings.TrimRight(flags.String(), "\n"))
	}
	if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
		return a, rt, pos, level, failf(exitUsage, "--log-level %q: %v", a.logLevel, err)
	}
	if err := checkExtractor(rt); err != nil {
		return a, rt, pos, level, failf(exitUsage, "%v", err)
	}
	if a.interval <= 0 {
		return a, rt, pos, level, failf(exitUsage, "--progress-interval %v: must be positive", a.interval)
	}
	if err := a.aug.check(); err != nil {
		return a, rt, pos, level, failf(exitUsage, "%v", err)
	}
	return a, rt, pos, level, nil
}

// extractMissing names what extract's command line lacks of what it
// needs (--model, --layer, -o, an image), "" when nothing.
func extractMissing(a extractArgs, pos []string) string {
	var flags []string
	if a.model == "" {
		flags = append(flags, "--model M.onnx")
	}
	if a.layer == "" {
		flags = append(flags, "--layer K")
	}
	if a.out == "" {
		flags = append(flags, "-o DIR")
	}
	if len(flags) > 0 {
		return "missing " + strings.Join(flags, ", ")
	}
	if len(pos) == 0 && a.filesFrom == "" {
		return "missing the images: give IMAGE|DIR arguments or --files-from FILE|-"
	}
	return ""
}

// extractImages returns the images the arguments and --files-from name
// (a directory: its files with an image extension) and their output
// paths under -o.
// A --files-from entry over maxListLine fails alone (in.bad): listed
// with the failures at the end.
func extractImages(ctx context.Context, a extractArgs, pos []string) (images, names []string, in extractInputs, err error) {
	var eo mountopts.Options
	if err := eo.SetImageExtensions(a.imageExts); err != nil {
		return nil, nil, in, failf(exitUsage, "%v", err)
	}
	in, err = collectInputs(ctx, pos, a.filesFrom, a.null, os.Stdin, eo.ImageExtensions)
	if err != nil {
		return nil, nil, in, err
	}
	for _, d := range in.empty {
		fmt.Fprintf(os.Stderr, "featurefs extract: warning: %s holds no image (%s)\n", d, strings.Join(eo.ImageExtensions, ", "))
	}
	if len(in.images) == 0 {
		return nil, nil, in, failf(exitUsage, "no image to extract (a directory stands for its files ending in %s)", strings.Join(eo.ImageExtensions, ", "))
	}
	names, err = outputPathsUnder(in.images, in.dirs, a.relTo)
	if err != nil {
		return nil, nil, in, failf(exitUsage, "%s", strings.ReplaceAll(err.Error(), "\n", "\nfeaturefs extract: "))
	}
	return in.images, names, in, nil
}

// openExtractModel starts the extractor with --model (named after its file)
// and finds --layer in it (an index, layerK or an alias).
func openExtractModel(a extractArgs, rt *mountopts.Options, level slog.Level) (*extractor.Service, string, extractor.Layer, error) {
	cfg := extractor.DefaultConfig()
	applyExtractor(rt, &cfg)
	cfg.AllowCPUFallback, cfg.BatchSize = rt.AllowCPUFallback, rt.BatchSize
	cfg.DType = rt.DType
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	name := strings.TrimSuffix(filepath.Base(a.model), filepath.Ext(a.model))
	pre := extractor.DefaultPreprocess()
	pre.FastDecode = rt.FastDecode
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: name, Path: a.model, Preprocess: &pre}})
	if errors.Is(err, extractor.ErrNoDevice) {
		return nil, "", extractor.Layer{}, failf(exitModel, "--%v %s", err, noDeviceHint(cfg.Device, cfg.TensorRT))
	}
	if err != nil {
		return nil, "", extractor.Layer{}, failf(exitModel, "%v", err)
	}
	if why := svc.Fallback(); why != "" {
		fmt.Fprintf(os.Stderr, "featurefs extract: warning: --%s (--allow-cpu-fallback)\n", why)
	}
	if why := noGPUDecode(rt.Decode, svc.Stats()); why != "" {
		// --device cuda's rule, as mount, serve and warm (newExtractor).
		if !rt.AllowCPUFallback {
			svc.Close()
			return nil, "", extractor.Layer{}, failf(exitModel, "%s %s", why, noGPUDecodeHint)
		}
		fmt.Fprintf(os.Stderr, "featurefs extract: warning: %s: JPEGs are decoded on the CPU (--allow-cpu-fallback)\n", why)
	}
	m, _ := svc.Model(name)
	layer, ok := m.Lookup(a.layer)
	if !ok {
		if i, err := strconv.Atoi(a.layer); err == nil {
			layer, ok = m.Lookup(spec.LayerName(i))
		}
	}
	if !ok {
		svc.Close()
		return nil, "", extractor.Layer{}, failf(exitUsage, "model %s has no layer %q (it has %s..%s; see featurefs layers)", a.model, a.layer, spec.LayerName(0), spec.LayerName(len(m.Layers)-1))
	}
	return svc, name, layer, nil
}

// extractAll extracts images[i] to out/names[i], extractFanOut at a time
// (the service batches them), until ctx ends, showing progress. It returns
// the counts and the first maxListedFailures failures, by image. Nothing
// is written outside out (os.Root), and a symbolic link at an output's
// path fails that image alone (cache/safefile).
func extractAll(ctx context.Context, images, names []string, out string, prog *progress, extract func(context.Context, string) ([]byte, error)) warmOutcome {
	return extractEach(ctx, images, names, out, prog, func(ctx context.Context, j int) ([]byte, error) { return extract(ctx, images[j]) }, nil)
}

// extractEach is extractAll with the work named by index: extract(ctx, j)
// computes out/names[j] (of images[j]), and after, if not nil, is called
// once it is written, with the root of out (an error fails that image).
func extractEach(ctx context.Context, images, names []string, out string, prog *progress, extract func(context.Context, int) ([]byte, error), after func(root *os.Root, j int) error) warmOutcome {
	start := time.Now()
	total := int64(len(images))
	var done, failed atomic.Int64
	var mu sync.Mutex
	var failures []warmFailure
	update := func() { prog.set(done.Load(), total, failed.Load(), false) }
	fail := func(img string, err error) {
		failed.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < maxListedFailures {
			failures = append(failures, warmFailure{key: img, reason: err.Error()}) // the reason; the key names the image
		}
	}
	update()
	root, rerr := os.OpenRoot(out)
	if rerr == nil {
		defer root.Close()
	}
	sem := make(chan struct{}, extractFanOut)
	var wg sync.WaitGroup
loop:
	for i, img := range images {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Go(func() {
			defer func() { <-sem }()
			err := rerr
			var b []byte
			if err == nil {
				b, err = extract(ctx, i)
			}
			if err == nil {
				if dir := filepath.Dir(names[i]); dir != "." {
					err = root.MkdirAll(dir, 0o755)
				}
				if err == nil {
					err = safefile.WriteFileIn(root, names[i], b, 0o644)
				}
				if err == nil && after != nil {
					err = after(root, i)
				}
			}
			switch {
			case err != nil && ctx.Err() != nil:
				return // interrupted: neither done nor failed
			case err != nil:
				fail(img, err)
			}
			done.Add(1)
			update()
		})
	}
	wg.Wait()
	update()
	sort.Slice(failures, func(i, j int) bool { return failures[i].key < failures[j].key })
	return warmOutcome{total: total, done: done.Load(), failed: failed.Load(), failures: failures, elapsed: time.Since(start)}
}

// extractFanOut bounds the images extract has in flight: read, queued in
// the service (which batches them) or being written.
const extractFanOut = 64

// extractInputs are the images extract was given.
type extractInputs struct {
	images []string      // files named and files found under directories, in order
	dirs   []string      // the directory arguments: each counts as a parent of its images
	empty  []string      // directory arguments that hold no image
	bad    []warmFailure // --files-from entries over maxListLine, by line (the first maxListedFailures): each fails alone
	badN   int64         // how many there were
}

// maxListLine bounds one --files-from entry (PATH_MAX is 4096 on Linux):
// a longer one fails alone, with its line number.
const maxListLine = 64 << 10

// collectInputs expands the arguments and the --files-from list (from
// stdin when it is "-"; NUL-separated when null) into images: a directory
// stands for the files under it whose extension is one of exts (lower
// case, without dots), in lexical order, without following symbolic links
// to directories; anything else (a file, a name that does not exist, a
// FIFO or a device: refused when read, readRegular) is an image, whose
// failure to read is reported with the others. Relative paths are taken
// from the working directory. A directory that cannot be listed fails it,
// as does a list that cannot be read; a list entry over maxListLine bytes
// fails alone (in.bad, by line number) and the list goes on. ctx stops it.
func collectInputs(ctx context.Context, args []string, filesFrom string, null bool, stdin io.Reader, exts []string) (extractInputs, error) {
	var in extractInputs
	add := func(p string) error {
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			in.images = append(in.images, p)
			return nil
		}
		in.dirs = append(in.dirs, p)
		n := len(in.images)
		err = filepath.WalkDir(p, func(q string, d iofs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("listing %s: %w", q, err)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !d.IsDir() && spec.IsImage(d.Name(), exts) {
				in.images = append(in.images, q)
			}
			return nil
		})
		if err != nil {
			return failf(exitOther, "%w", err)
		}
		if len(in.images) == n {
			in.empty = append(in.empty, p)
		}
		return nil
	}
	for _, p := range args {
		if err := add(p); err != nil {
			return in, err
		}
	}
	if filesFrom == "" {
		return in, nil
	}
	var r io.Reader = stdin
	what := "stdin"
	if filesFrom != "-" {
		f, err := openList(filesFrom)
		if err != nil {
			return in, failf(exitUsage, "--files-from: %w", err)
		}
		defer f.Close()
		r, what = f, filesFrom
	}
	bad, badN, err := readList(ctx, r, what, null, add)
	in.bad, in.badN = bad, badN
	return in, err
}

// readList reads a list of inputs (--files-from, named what) from r, one
// entry a line (NUL-terminated when null; a CR before the newline is
// dropped, empty entries are skipped), and calls add with each. An entry
// over maxListLine bytes fails alone: it is returned in bad (the first
// maxListedFailures, by line number; badN counts them all) and the list
// goes on. Memory is maxListLine whatever the list holds; ctx stops it.
func readList(ctx context.Context, r io.Reader, what string, null bool, add func(string) error) (bad []warmFailure, badN int64, err error) {
	delim := byte('\n')
	if null {
		delim = 0
	}
	lr := newLineReader(ctx, r, delim, maxListLine)
	for {
		line, kind, err := lr.next()
		if errors.Is(err, io.EOF) {
			return bad, badN, nil
		}
		if err != nil {
			return bad, badN, failf(exitOther, "--files-from %s: %w", what, err)
		}
		if kind == lineTooLong {
			badN++
			if len(bad) < maxListedFailures {
				bad = append(bad, warmFailure{key: fmt.Sprintf("--files-from %s line %d", what, lr.line()),
					reason: fmt.Sprintf("entry over %d bytes (starts %q): skipped", maxListLine, line)})
			}
			continue
		}
		p := string(line)
		if !null {
			p = strings.TrimSuffix(p, "\r")
		}
		if p == "" {
			continue
		}
		if err := add(p); err != nil {
			return bad, badN, err
		}
	}
}

// outputPaths maps each input image to its .npy path under the output
// directory: its path relative to relTo (default: the inputs' common parent
// directory), with the extension replaced by .npy, or .npy appended when
// another input in the same directory differs only by extension. It fails,
// naming every problem, when an input is outside relTo or two inputs would
// write the same file.
func outputPaths(inputs []string, relTo string) ([]string, error) {
	return outputPathsUnder(inputs, nil, relTo)
}

// outputPathsUnder is outputPaths where each of dirs (the directory
// arguments) also counts as a parent directory of the inputs, so that
// the images under a directory argument are laid out relative to it.
func outputPathsUnder(inputs, dirs []string, relTo string) ([]string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	absOf := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(cwd, p)
	}
	abs := make([]string, len(inputs))
	for i, p := range inputs {
		abs[i] = absOf(p)
	}
	base := ""
	if relTo != "" {
		base = absOf(relTo)
	} else {
		base = filepath.Dir(abs[0])
		widen := func(a string) {
			for !within(base, a) {
				base = filepath.Dir(base)
			}
		}
		for _, a := range abs[1:] {
			widen(filepath.Dir(a))
		}
		for _, d := range dirs {
			widen(absOf(d))
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

// decodeLine says where the images of a run of n were decoded when a GPU
// decoded some (--decode gpu), else "": "N decoded on the GPU, M decoded
// on the CPU (K by their kind, R refused and F failed by the GPU decoder)".
func decodeLine(st extractor.Stats, n int64) string {
	g := st.GPUDecode
	if g == nil {
		return ""
	}
	return fmt.Sprintf("%d decoded on the GPU, %d decoded on the CPU (%d by their kind, %d refused and %d failed by the GPU decoder)",
		g.Decoded, max(0, n-g.Decoded), g.KeptOnCPU, g.Refused, g.Failed)
}
