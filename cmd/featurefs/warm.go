package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/mountopts"
)

const warmUsage = `Usage: featurefs warm [--jobs N] PATH
       featurefs warm --source SOURCE --model NAME=PATH.onnx --layer LAYER [--shard K/N] [flags] [PREFIX]
       featurefs warm --source SOURCE --model NAME=PATH.onnx --predictions OUT.jsonl [--labels NAME=FILE] [--shard K/N] [PREFIX]

Extracts every feature under a feature directory into the cache, showing
progress (done/total, rate, ETA; plain log lines when stdout is not a
terminal), and lists the objects that failed, with the reasons, at the end.
It is resumable: what is cached already is skipped.

PATH is a directory inside a running mount, e.g. MOUNT/features/resnet50/
layer12/train: every .npy file under it is read (--jobs at a time), so the
mount extracts it in full batches and caches it.

Without a mount, --source (s3://BUCKET[/PREFIX] or a directory) with
--model and --layer opens the bucket, the models and the cache (--cache-dir;
not in use by a mount) directly, and extracts everything under PREFIX
(default: the whole source). The mount flags of the source, the models,
the cache and the feature store apply (--endpoint-url, --device,
--batch-size, --cache-size, --config, ...); those of a mount alone
(--remote and --remote-*, --split, --allow-other, --allow-nonempty,
--foreground, --metrics-addr, --prefetch, --prefetch-limit,
--show-empty-dirs) are refused (exit 2): warm through such a mount's PATH.

--shard K/N (with --source) extracts only the K-th of N disjoint parts of
the objects, the same on every host (a hash of each object's key, FNV-1a
64 with a finalizer, mod N; an archive goes whole to one part): N hosts,
or the pods of a Kubernetes Indexed Job (--shard $(JOB_COMPLETION_INDEX)/N),
sharing one --feature-store fill it once, and a rerun of a part skips what
the store has (docs/FEATURE-STORE.md, docs/KUBERNETES.md). Progress,
summary and failures name the part.

--predictions OUT.jsonl (with --source) writes, instead of a layer, each
image's top classes (--predictions-top, softmax of the model's last layer,
named with --labels) as one JSON line, {"key": ..., "top": [[class, name,
score], ...]}, or {"key": ..., "error": ...} for an image that failed
(also in the failure list). A rerun appends only the keys OUT lacks: its
error lines are dropped and tried again; with none left it lists the
source and loads no model (docs/MODELS.md).

Exit codes: 0 everything extracted, 1 some objects failed (or another
error), 2 bad usage (nothing is walked, no summary is printed); without a
mount also 4 model/ONNX Runtime/asked-for GPU, 5 source, 6 cache directory.

Flags:
`

// rejectMountOnly returns an error naming the mount-only flags among args
// (mountOnly), or nil. The config file may hold them: it is shared
// with mount.
func rejectMountOnly(args []string) error {
	o := mountopts.Default()
	var w warmArgs
	fl := warmFlags(&o, &w)
	if _, err := parseInterspersed(fl, args); err != nil {
		return nil // parseWarm reports it
	}
	var bad []string
	fl.Visit(func(f *flag.Flag) {
		if mountOnly(f.Name) {
			bad = append(bad, "--"+f.Name)
		}
	})
	if len(bad) == 0 {
		return nil
	}
	what := "a flag of featurefs mount only"
	if len(bad) > 1 {
		what = "flags of featurefs mount only"
	}
	return fmt.Errorf("%s: %s, which warm does not use (to warm a --remote mount, or one mounted with such flags, give warm a PATH inside it: featurefs warm MOUNT/features/MODEL/LAYER)",
		strings.Join(bad, ", "), what)
}

// warmArgs are warm's own flags.
type warmArgs struct {
	source, layer string
	predictions   string
	jobs          int
	interval      time.Duration
}

// warmFlags binds warm's flags and every mount flag (those of mount only
// to reject them: rejectMountOnly).
func warmFlags(o *mountopts.Options, w *warmArgs) *flag.FlagSet {
	fl := mountFlags(o)
	bindWarmOnly(fl, o)
	fl.StringVar(&w.source, "source", w.source, "without a mount: the `SOURCE` to read (s3://BUCKET[/PREFIX] or a directory)")
	fl.StringVar(&w.layer, "layer", w.layer, "without a mount: the layer directory name, e.g. layer12 or an alias")
	fl.StringVar(&w.predictions, "predictions", w.predictions, "without a mount: write the top classes (--predictions-top) of every image to this JSON-lines `file` instead of extracting a layer; a rerun skips the keys it has")
	fl.IntVar(&w.jobs, "jobs", w.jobs, "files read at once through a mount")
	fl.DurationVar(&w.interval, "progress-interval", w.interval, "how often a progress line is printed when stdout is not a terminal")
	return fl
}

// warmOptions are warm's options: the mount flags (for --source) and its
// own.
type warmOptions struct {
	o mountopts.Options
	w warmArgs
}

// parseWarm builds warm's options (parseWithConfig).
func parseWarm(args []string) (mountopts.Options, warmArgs, []string, error) {
	v, pos, err := parseWithConfig(args,
		func() warmOptions {
			o := mountopts.Default()
			o.LogLevel = "warn" // the progress display owns the terminal
			return warmOptions{o, warmArgs{jobs: 32, interval: 5 * time.Second}}
		},
		func(v *warmOptions) *mountopts.Options { return &v.o },
		func(v *warmOptions) *flag.FlagSet { return warmFlags(&v.o, &v.w) })
	return v.o, v.w, pos, err
}

func runWarm(args []string) int {
	o, w, pos, err := parseWarm(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stderr, warmUsage)
		help := flag.NewFlagSet("warm", flag.ContinueOnError)
		warmFlags(&o, &w).VisitAll(func(f *flag.Flag) {
			if !mountOnly(f.Name) {
				help.Var(f.Value, f.Name, f.Usage)
			}
		})
		help.SetOutput(os.Stderr)
		help.PrintDefaults()
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs warm: %v\nRun 'featurefs warm -h' for the flags.\n", err)
		return exitUsage
	}
	if err := rejectMountOnly(args); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs warm: %v\n", err)
		return exitUsage
	}
	if w.jobs < 1 {
		fmt.Fprintf(os.Stderr, "featurefs warm: --jobs %d: must be at least 1\n", w.jobs)
		return exitUsage
	}
	var shard spec.Shard
	if w.predictions != "" && w.source == "" {
		fmt.Fprintf(os.Stderr, "featurefs warm: --predictions needs --source (through a mount, read MOUNT/predictions/MODEL/.../%s)\n", featurefs.PredictionsFile)
		return exitUsage
	}
	if o.Shard != "" {
		if w.source == "" {
			fmt.Fprintf(os.Stderr, "featurefs warm: --shard %s needs --source: a part is a set of the source's objects, which a mount's PATH does not name\n", o.Shard)
			return exitUsage
		}
		if shard, err = spec.ParseShard(o.Shard); err != nil {
			fmt.Fprintf(os.Stderr, "featurefs warm: --shard %q: %v\n", o.Shard, err)
			return exitUsage
		}
	}
	ctx, stop := interruptContext("warm")
	defer stop()
	label := "warm"
	if shard.Count > 0 {
		label = "warm shard " + shard.String()
	}
	prog := newProgressFor(os.Stdout, w.interval, label)
	var res warmOutcome
	if w.source != "" {
		if len(pos) > 1 {
			fmt.Fprintf(os.Stderr, "featurefs warm: with --source, want at most one PREFIX, got %d arguments\n", len(pos))
			return exitUsage
		}
		prefix := ""
		if len(pos) == 1 {
			prefix = pos[0]
		}
		res, err = warmSource(ctx, o, w, shard, prefix, prog)
	} else {
		if len(pos) != 1 {
			fmt.Fprintf(os.Stderr, "featurefs warm: want one PATH inside a mount (or --source), got %d arguments\n\n%s", len(pos), warmUsage)
			return exitUsage
		}
		res, err = warmMount(ctx, pos[0], w.jobs, prog)
	}
	// A usage or setup error stops warm before it walks anything: the
	// error says why, and a "0 of 0 done" summary would only confuse.
	walked := err == nil || ctx.Err() != nil || exitCode(err) == exitOther || res.total > 0
	prog.finish(walked)
	if walked {
		res.print(os.Stdout)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "featurefs %s: interrupted after %d of %d; run it again to resume\n", label, res.done, res.total)
		return exitOther
	case err != nil:
		fmt.Fprintf(os.Stderr, "featurefs warm: %v\n", err)
		return exitCode(err)
	case res.failed > 0:
		return exitOther
	}
	return exitOK
}

// warmFailure is one object that failed.
type warmFailure struct {
	key, reason string
}

// warmOutcome is what a warm-up did.
type warmOutcome struct {
	total, done, failed int64
	failures            []warmFailure
	elapsed             time.Duration
	store               string // the feature store's line, if there is one
	decode              string // where the images were decoded (--decode gpu), if it says more than "the CPU"
	// Without a mount: the part warmed ("" for all), and how many
	// objects were extracted now, found (cached or in the feature store)
	// and left to other parts.
	shard                    string
	counted                  bool // extracted, found and others are known
	extracted, found, others int64
}

// print writes the summary and the failures.
func (r warmOutcome) print(w io.Writer) { r.printAs(w, "warm") }

// printAs writes the summary and the failures as command cmd (warm,
// extract).
func (r warmOutcome) printAs(w io.Writer, cmd string) {
	of := ""
	if r.shard != "" {
		cmd += " shard " + r.shard
		of = " of shard " + r.shard
	}
	fmt.Fprintf(w, "featurefs %s: %d of %d done in %v, %d failed\n", cmd, r.done-r.failed, r.total, r.elapsed.Round(time.Millisecond), r.failed)
	if r.counted {
		line := fmt.Sprintf("%d extracted, %d found cached or in the feature store", r.extracted, r.found)
		if r.shard != "" {
			line += fmt.Sprintf("; %d objects left to the other shards", r.others)
		}
		fmt.Fprintf(w, "featurefs %s: %s\n", cmd, line)
	}
	if r.store != "" {
		fmt.Fprintf(w, "featurefs %s: %s\n", cmd, r.store)
	}
	if r.decode != "" {
		fmt.Fprintf(w, "featurefs %s: %s\n", cmd, r.decode)
	}
	if r.failed == 0 {
		return
	}
	fmt.Fprintf(w, "failed objects%s (%d):\n", of, r.failed)
	for _, f := range r.failures {
		fmt.Fprintf(w, "  %s: %s\n", f.key, f.reason)
	}
	if n := r.failed - int64(len(r.failures)); n > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", n)
	}
}

// addFailures counts n objects that failed before the work (extract's
// over-long --files-from entries), of which fs are listed, and lists
// them first, up to maxListedFailures in all.
func (r *warmOutcome) addFailures(fs []warmFailure, n int64) {
	if n == 0 {
		return
	}
	r.total += n
	r.done += n
	r.failed += n
	r.failures = append(append([]warmFailure(nil), fs...), r.failures...)
	if len(r.failures) > maxListedFailures {
		r.failures = r.failures[:maxListedFailures]
	}
}

// maxListedFailures bounds the failures kept for the final list.
const maxListedFailures = 1000

// warmSource extracts without a mount: the stack opened here (no FUSE
// tree), the work done by features.Pipeline.Warm.
func warmSource(ctx context.Context, o mountopts.Options, w warmArgs, shard spec.Shard, prefix string, prog *progress) (warmOutcome, error) {
	if w.predictions != "" {
		if w.layer != "" {
			return warmOutcome{}, failf(exitUsage, "--predictions reads the model's last layer: give no --layer")
		}
		return warmPredictions(ctx, o, w, shard, prefix, prog)
	}
	start := time.Now()
	if w.layer == "" {
		return warmOutcome{}, failf(exitUsage, "--source needs --layer (e.g. layer12; see featurefs layers MODEL.onnx)")
	}
	// Warm fills the feature store: Close waits for its queued writes
	// (Ctrl-C ends the wait), below once the walk is over, on return if it
	// never starts.
	st, closeAll, err := openWarmStack(ctx, o, w.source, "--source", "warm through the mount instead, featurefs warm MOUNT/features/...", nil)
	if err != nil {
		return warmOutcome{}, err
	}
	defer closeAll()
	res, err := st.pipe.Warm(ctx, features.WarmOptions{
		Model: o.Models[0].Name, Layer: w.layer, Prefix: prefix, MaxFailures: maxListedFailures, Shard: shard,
		Archives: o.ArchiveFormats(),
		Progress: func(p features.WarmProgress) { prog.set(p.Done, p.Total, p.Failed, p.Listing) },
	})
	out := warmOutcome{total: res.Total, done: res.Done, failed: res.Failed, elapsed: time.Since(start),
		shard: shard.String(), counted: true, extracted: res.Extracted, found: res.Cached, others: res.OtherShards}
	if fst := st.store; fst != nil {
		st.closeTo("the feature store") // nothing more is queued for the store: wait for what is
		sst := fst.Stats()
		out.store = fmt.Sprintf("feature store %s: %d features found there, %d written (%d failed, %d dropped)",
			fst.Identity(), sst.Hits, sst.Puts, sst.PutErrors, sst.Dropped)
	}
	for _, f := range res.Failures {
		out.failures = append(out.failures, warmFailure{key: f.Key, reason: f.Reason})
	}
	if errors.Is(err, extractor.ErrUnknownLayer) {
		err = failf(exitUsage, "--layer: %w", err)
	}
	return out, err
}

// openWarmStack opens what a warm without a mount works on (warm
// --source, warm --predictions): the options checked, exactly one model
// (flagName says who needs it), the log and the stack over source. A
// cache a mount holds is refused with lockedHint, what to do instead.
// closeAll closes the stack, then the log. until, if not nil, is
// stackOptions.untilExtractor.
func openWarmStack(ctx context.Context, o mountopts.Options, source, flagName, lockedHint string, until func(context.Context, *stack) bool) (st *stack, closeAll func(), err error) {
	if err := o.Validate(); err != nil {
		return nil, nil, failf(validateCode(err), "%w", err)
	}
	if len(o.Models) != 1 {
		return nil, nil, failf(exitUsage, "%s needs exactly one --model NAME=PATH.onnx, got %d", flagName, len(o.Models))
	}
	log, logc, err := newLogger(o)
	if err != nil {
		return nil, nil, err
	}
	warn := func(msg string) { fmt.Fprintf(os.Stderr, "featurefs warm: warning: %s\n", oneLine(msg)) }
	st, err = openStack(ctx, o, stackOptions{source: source, log: log, warn: warn,
		readTimeout: o.ReadTimeout, storeWait: time.Hour, untilExtractor: until})
	if err != nil {
		logc.Close()
		if errors.Is(err, cache.ErrLocked) {
			return nil, nil, failf(exitCache, "%w (a mount is using it: %s)", err, lockedHint)
		}
		return nil, nil, err
	}
	return st, func() { st.Close(); logc.Close() }, nil
}

// warmMount reads every .npy file under dir, a directory inside a mount,
// jobs at a time.
func warmMount(ctx context.Context, dir string, jobs int, prog *progress) (warmOutcome, error) {
	start := time.Now()
	dir, err := filepath.Abs(dir)
	if err != nil {
		return warmOutcome{}, failf(exitUsage, "%w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return warmOutcome{}, failf(exitUsage, "%w", err)
	}
	if !st.IsDir() {
		return warmOutcome{}, failf(exitUsage, "%s is not a directory", dir)
	}
	root, layerDir, err := mountOf(dir)
	if err != nil {
		return warmOutcome{}, failf(exitUsage, "%w", err)
	}

	var total, done, failed atomic.Int64
	listing := atomic.Bool{}
	listing.Store(true)
	update := func() { prog.set(done.Load(), total.Load(), failed.Load(), listing.Load()) }
	var mu sync.Mutex
	var failures []warmFailure

	paths := make(chan string, jobs)
	var wg sync.WaitGroup
	for range jobs {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for p := range paths {
				if err := readSome(p, buf); err != nil {
					failed.Add(1)
					mu.Lock()
					if len(failures) < maxListedFailures {
						failures = append(failures, warmFailure{key: p, reason: errReason(err)})
					}
					mu.Unlock()
				}
				done.Add(1)
				update()
			}
		})
	}
	// A directory under dir that cannot be listed (a bad archive: EIO) is
	// skipped and counted as a failure, as warm --source counts a bad
	// archive; only dir itself failing stops warm.
	failDir := func(d string, err error) {
		total.Add(1)
		done.Add(1)
		failed.Add(1)
		mu.Lock()
		if len(failures) < maxListedFailures {
			failures = append(failures, warmFailure{key: d, reason: "listing: " + errReason(err)})
		}
		mu.Unlock()
		update()
	}
	var walkErr error
	var walk func(d string) error
	walk = func(d string) error {
		f, err := os.Open(d)
		if err != nil {
			if d != dir && ctx.Err() == nil {
				failDir(d, err)
				return nil
			}
			return err
		}
		defer f.Close()
		for {
			des, err := f.ReadDir(1024) // a page at a time: directories may be huge
			for _, de := range des {
				p := filepath.Join(d, de.Name())
				switch {
				case de.IsDir():
					if err := walk(p); err != nil {
						return err
					}
				case strings.HasSuffix(de.Name(), ".npy"):
					total.Add(1)
					update()
					select {
					case paths <- p:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}
			if errors.Is(err, io.EOF) || (err == nil && len(des) == 0) {
				return nil
			}
			if err != nil && d != dir && ctx.Err() == nil {
				failDir(d, err)
				return nil
			}
			if err != nil {
				return fmt.Errorf("listing %s: %w", d, err)
			}
		}
	}
	walkErr = walk(dir)
	listing.Store(false)
	close(paths)
	wg.Wait()
	update()
	waitCacheWrites(ctx, root, maxCacheWriteWait)

	// Reasons: the mount lists each feature file whose read failed, with
	// the object it stands for and why (.featurefs/failures). A failure is
	// listed under its object's key, once, with the mount's reason; a file
	// the mount no longer lists (more failures than it keeps) under its
	// path with the errno.
	known := failedFiles(root)
	for i, f := range failures {
		rel, err := filepath.Rel(layerDir, f.key)
		if err != nil {
			continue
		}
		rel = filepath.ToSlash(rel)
		failures[i].key = rel
		if ff, ok := known[rel]; ok {
			failures[i].key, failures[i].reason = ff.Key, ff.Error
		}
	}
	sort.Slice(failures, func(i, j int) bool { return failures[i].key < failures[j].key })
	return warmOutcome{total: total.Load(), done: done.Load(), failed: failed.Load(), failures: failures, elapsed: time.Since(start)}, walkErr
}

// maxCacheWriteWait bounds warm's wait for the mount's queued cache writes.
const maxCacheWriteWait = 2 * time.Minute

// waitCacheWrites waits until the mount at root has no feature queued for
// its cache write (the stats file's fs.cache_write_queued is 0), so that
// what warm read is in the cache when it returns; at most limit, or until
// ctx ends. A mount whose stats lack the field (an older one) writes
// before it answers: nothing to wait for.
func waitCacheWrites(ctx context.Context, root string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		data, err := os.ReadFile(filepath.Join(root, ".featurefs", "stats"))
		if err != nil {
			return
		}
		var s struct {
			FS struct {
				Queued *int `json:"cache_write_queued"`
			} `json:"fs"`
		}
		if json.Unmarshal(bytes.TrimSpace(data), &s) != nil || s.FS.Queued == nil || *s.FS.Queued == 0 || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readSome opens p and reads its first bytes: the mount computes (or finds
// in the cache) the whole feature on the first read.
func readSome(p string, buf []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Read(buf); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// errReason is a short reason for a failed read.
func errReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// mountOf finds the mount root above dir (the directory holding
// .featurefs/stats) and the layer directory (root/features/MODEL/LAYER)
// dir is in.
func mountOf(dir string) (root, layerDir string, err error) {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, ".featurefs", "stats")); err == nil && st.Mode().IsRegular() {
			rel, err := filepath.Rel(d, dir)
			if err != nil {
				return "", "", err
			}
			parts := strings.Split(filepath.ToSlash(rel), "/")
			if len(parts) < 3 || parts[0] != "features" {
				return "", "", fmt.Errorf("%s: not inside a layer directory: want MOUNT/features/MODEL/LAYER[/...]", dir)
			}
			return d, filepath.Join(d, "features", parts[1], parts[2]), nil
		}
		if filepath.Dir(d) == d {
			return "", "", fmt.Errorf("%s is not inside a featurefs mount (no .featurefs/stats above it); without a mount use --source, --model and --layer", dir)
		}
	}
}

// failedFiles reads the mount's list of feature files whose last read
// failed (.featurefs/failures), by path under the layer directory.
func failedFiles(root string) map[string]namespace.FailedFile {
	b, err := os.ReadFile(filepath.Join(root, ".featurefs", featurefs.FailuresFile))
	if err != nil {
		return nil
	}
	var fl namespace.Failures
	if json.Unmarshal(b, &fl) != nil {
		return nil
	}
	out := make(map[string]namespace.FailedFile, len(fl.Files))
	for _, f := range fl.Files {
		out[f.File] = f
	}
	return out
}

// progress shows done/total, rate and ETA: a bar redrawn in place on a
// terminal, a plain line every interval otherwise.
type progress struct {
	w        io.Writer
	label    string // the command a plain line names
	tty      bool
	interval time.Duration
	start    time.Time

	mu      sync.Mutex
	done    int64            // GUARDED_BY(mu)
	total   int64            // GUARDED_BY(mu)
	failed  int64            // GUARDED_BY(mu)
	listing bool             // GUARDED_BY(mu)
	samples []progressSample // GUARDED_BY(mu)
	drawn   bool             // GUARDED_BY(mu): a line was drawn

	stop chan struct{}
	wg   sync.WaitGroup
}

// progressSample is done at a time, for the rate.
type progressSample struct {
	t    time.Time
	done int64
}

// progressRateWindow is the span the displayed rate is measured over.
const progressRateWindow = 10 * time.Second

func newProgress(w *os.File, interval time.Duration) *progress {
	return newProgressFor(w, interval, "warm")
}

// newProgressFor is newProgress for command label (warm, extract).
func newProgressFor(w *os.File, interval time.Duration, label string) *progress {
	p := &progress{w: w, label: label, interval: interval, start: time.Now(), listing: true, stop: make(chan struct{})}
	if st, err := w.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		p.tty = true
	}
	tick := p.interval
	if p.tty {
		tick = 200 * time.Millisecond
	}
	p.wg.Go(func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw(false)
			}
		}
	})
	return p
}

// set records the figures.
func (p *progress) set(done, total, failed int64, listing bool) {
	p.mu.Lock()
	p.done, p.total, p.failed, p.listing = done, total, failed, listing
	p.mu.Unlock()
}

// finish stops the display, drawing the last state and ending the line
// when draw (warm walked something).
func (p *progress) finish(draw bool) {
	close(p.stop)
	p.wg.Wait()
	if draw {
		p.draw(true)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K") // clear the bar drawn in place
	}
}

// line renders the figures.
func (p *progress) line(now time.Time) string {
	p.samples = append(p.samples, progressSample{t: now, done: p.done})
	for len(p.samples) > 2 && now.Sub(p.samples[1].t) >= progressRateWindow {
		p.samples = p.samples[1:]
	}
	rate := 0.0
	if first := p.samples[0]; now.Sub(first.t) > 0 {
		rate = float64(p.done-first.done) / now.Sub(first.t).Seconds()
	}
	if len(p.samples) == 1 && now.Sub(p.start) > 0 {
		rate = float64(p.done) / now.Sub(p.start).Seconds()
	}
	total := fmt.Sprint(p.total)
	if p.listing {
		total += "+"
	}
	eta := "?"
	if rate > 0 && !p.listing {
		eta = time.Duration(float64(p.total-p.done) / rate * float64(time.Second)).Round(time.Second).String()
	} else if !p.listing && p.done == p.total {
		eta = "0s"
	}
	s := fmt.Sprintf("%d/%s %.1f/s ETA %s", p.done, total, rate, eta)
	if p.failed > 0 {
		s += fmt.Sprintf(" (%d failed)", p.failed)
	}
	if p.tty {
		const width = 30
		filled := 0
		if p.total > 0 {
			filled = int(float64(width) * float64(p.done) / float64(p.total))
		}
		s = "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "] " + s
	}
	return s
}

// draw shows the current figures.
func (p *progress) draw(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	l := p.line(now)
	p.drawn = true
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", l)
		if final {
			fmt.Fprintln(p.w)
		}
		return
	}
	fmt.Fprintf(p.w, "%s %s: %s\n", now.Format("15:04:05"), p.label, l)
}
