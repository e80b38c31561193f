package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/mountopts"
)

// warmPredictions writes the predictions of every image under prefix (of
// the shard) to w.predictions, one JSON line each, without a mount. It
// resumes: the keys already predicted in the file are skipped; its error
// lines (tried again) and a last line cut short are dropped first.
func warmPredictions(ctx context.Context, o mountopts.Options, w warmArgs, shard spec.Shard, prefix string, prog *progress) (warmOutcome, error) {
	start := time.Now()
	if err := safefile.RefuseSymlink(w.predictions); err != nil {
		return warmOutcome{}, failf(exitUsage, "--predictions %w", err)
	}
	// OUT first: a file that is not one (a device, a FIFO, another file)
	// is refused before the model is loaded.
	done, err := resumePredictions(ctx, w.predictions, resumeMaxLine(o.PredictionsTop))
	if err != nil && ctx.Err() != nil {
		return warmOutcome{}, err
	}
	if err != nil {
		return warmOutcome{}, failf(exitUsage, "--predictions %s: %w", w.predictions, err)
	}
	opts := features.PredictOptions{
		Model: o.Models[0].Name, Prefix: prefix, TopK: o.PredictionsTop, Shard: shard, Archives: o.ArchiveFormats(),
		MaxFailures: maxListedFailures,
		Skip:        func(key string) bool { _, ok := done[key]; return ok },
		Progress:    func(p features.WarmProgress) { prog.set(p.Done, p.Total, p.Failed, p.Listing) },
	}
	// A rerun with every image in OUT: listed before the model is loaded,
	// and then it is not (a rerun that predicts nothing costs the listing).
	var left int64 = -1
	until := func(ctx context.Context, s *stack) bool {
		if len(done) == 0 {
			return false
		}
		n, nothing, err := features.NothingToPredict(ctx, s.source, o.ImageExtensions, opts)
		if ctx.Err() != nil {
			return true // interrupted: stop here (below), loading nothing
		}
		if err != nil {
			s.log.Debug("featurefs: warm --predictions: listing ahead failed; predicting as usual", slog.Any("err", err))
			return false
		}
		if nothing {
			left = n
		}
		return nothing
	}
	st, closeAll, err := openWarmStack(ctx, o, w.source, "--predictions", "read MOUNT/predictions/... instead", until)
	if err != nil {
		return warmOutcome{}, err
	}
	defer closeAll()
	if st.pipe == nil { // nothing left (or an interrupt): no model was loaded
		if err := ctx.Err(); err != nil {
			return warmOutcome{}, err
		}
		st.log.Info("featurefs: warm --predictions: every image is in the output already; the model was not loaded", slog.Int64("images", left))
		return warmOutcome{total: left, done: left, elapsed: time.Since(start), shard: shard.String(),
			store: fmt.Sprintf("%d predicted now, %d already in %s", 0, left, w.predictions)}, nil
	}
	name := o.Models[0].Name
	m, _ := st.ex.Model(name)
	layout := features.NewPredictionLayout(m, st.pipe.Labels(name), o.PredictionsTop)

	f, err := safefile.OpenAppend(w.predictions, 0o644)
	if err != nil {
		return warmOutcome{}, failf(exitUsage, "--predictions: %w", err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 64<<10) // the lines of a run cut short: at most this much is lost, and predicted again
	var line []byte
	res, err := st.pipe.PredictTree(ctx, opts, func(pr features.Prediction) error {
		line = layout.Append(line[:0], pr, false)
		_, err := bw.Write(line)
		return err
	})
	if ferr := bw.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	out := warmOutcome{total: res.Total, done: res.Done, failed: res.Failed, elapsed: time.Since(start), shard: shard.String(),
		store: fmt.Sprintf("%d predicted now, %d already in %s", res.Extracted, res.Cached, w.predictions)}
	for _, fl := range res.Failures {
		out.failures = append(out.failures, warmFailure{key: fl.Key, reason: fl.Reason})
	}
	return out, err
}

// resumePredictions reads a predictions file written before, if there is
// one, and returns the keys it has predictions for. Error lines, lines
// with a key but no top classes, lines over the cap (maxLine: damaged)
// and a last line without its newline (a run cut short) are dropped from
// the file, so that a rerun tries those images again and appends one line
// each. It holds one key per predicted image; the file is read as a
// stream, maxLine bytes at a time at most, and only a regular file is
// read (a device, FIFO or directory is refused). ctx stops it.
func resumePredictions(ctx context.Context, path string, maxLine int) (map[string]struct{}, error) {
	done := map[string]struct{}{}
	f, _, err := openRegular(path)
	if errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dropped := 0
	lr := newLineReader(ctx, f, '\n', maxLine)
	for {
		line, kind, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		key, keep, err := resumeLine(line, kind, lr.line(), maxLine)
		if err != nil {
			return nil, err
		}
		if !keep {
			dropped++
			continue
		}
		done[key] = struct{}{}
	}
	if dropped == 0 {
		return done, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return done, rewriteResume(path, func(w io.Writer) error { return keptLines(ctx, f, w, maxLine) })
}

// keptLines copies the lines of a predictions file that resumeLine keeps
// from r to w, each with its newline.
func keptLines(ctx context.Context, r io.Reader, w io.Writer, maxLine int) error {
	lr := newLineReader(ctx, r, '\n', maxLine)
	for {
		line, kind, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, keep, err := resumeLine(line, kind, lr.line(), maxLine); err != nil || !keep {
			continue // the file changed since it was read: what is kept was checked now
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
}

// resumeLine says whether line n of a predictions file (of kind, from
// lineReader) is a prediction to keep, and its key. A line that is not
// JSON (or, over maxLine, does not start like a JSON object) is an error:
// the file is not a predictions file, and is left alone.
func resumeLine(line []byte, kind lineKind, n, maxLine int) (key string, keep bool, err error) {
	switch kind {
	case lineLast:
		return "", false, nil // cut short
	case lineTooLong:
		if t := bytes.TrimLeft(line, " \t"); len(t) > 0 && t[0] == '{' {
			return "", false, nil // damaged: predicted again
		}
		return "", false, fmt.Errorf("line %d is over %d bytes and not a prediction: not a predictions file?", n, maxLine)
	}
	var pl features.PredictionLine
	if err := json.Unmarshal(line, &pl); err != nil {
		return "", false, fmt.Errorf("line %d is not a prediction (%v): not a predictions file?", n, err)
	}
	if _, _, ok := pl.Top1(); !ok || pl.Key == "" {
		return "", false, nil // an error line, or no top classes: not done
	}
	return pl.Key, true, nil
}

// resumeMaxLine is the longest line of a predictions file read on resume
// for top classes a line: room for a key, and top names of the longest
// label escaped (6 bytes a byte at most) with their scores; at least
// 1 MiB, at most 64 MiB.
func resumeMaxLine(top int) int {
	per := 6*spec.MaxLabelBytes + 64
	if top > (64<<20)/per {
		return 64 << 20
	}
	return 1<<20 + top*per
}

// rewriteResume replaces the predictions file path with what write
// writes: a temporary file of its own (O_EXCL) in path's directory,
// renamed over path; never a link planted at a fixed name such as
// OUT.tmp (issue 36, item 3).
func rewriteResume(path string, write func(io.Writer) error) error {
	f, err := safefile.Create(path, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

const diffUsage = `Usage: featurefs diff-predictions [--list N] A.jsonl B.jsonl

Compares two predictions files (featurefs warm --predictions, or
MOUNT/predictions/MODEL/.../predictions.jsonl), typically a model's
previous version (A) and its new one (B): counts the images in both, those
whose top-1 class changed, and those only in one or with an error line in
either, and lists the changed ones (the first --list, in key order) as
KEY: A-CLASS (NAME) -> B-CLASS (NAME). The files are named by their base
names, or as A and B (after a line saying which path each is) when those
are the same, as two mount paths' predictions.jsonl are. Exit code 0 when
the comparison ran (whatever it found), 2 for bad usage or an unreadable
file.

Flags:
`

// runDiffPredictions is featurefs diff-predictions.
func runDiffPredictions(args []string) int {
	fl := flag.NewFlagSet("diff-predictions", flag.ContinueOnError)
	list := fl.Int("list", 20, "changed images listed (0: none, -1: all)")
	fl.SetOutput(io.Discard)
	pos, err := parseInterspersed(fl, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stderr, diffUsage)
		fl.SetOutput(os.Stderr)
		fl.PrintDefaults()
		return exitOK
	}
	if err == nil && len(pos) != 2 {
		err = fmt.Errorf("want two predictions files A and B, got %d arguments", len(pos))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs diff-predictions: %v\nRun 'featurefs diff-predictions -h' for the flags.\n", err)
		return exitUsage
	}
	d, err := diffPredictions(pos[0], pos[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs diff-predictions: %v\n", err)
		return exitUsage
	}
	d.print(os.Stdout, *list)
	return exitOK
}

// top1 is one image's top class in a predictions file.
type top1 struct {
	class int
	name  string
	ok    bool // false: an error line
}

// predDiff is what diffPredictions found.
type predDiff struct {
	a, b               string
	both, same         int
	onlyA, onlyB, errs int
	changed            []predChange
}

// predChange is one image whose top-1 class changed.
type predChange struct {
	key      string
	from, to top1
}

// readTop1 reads a predictions file's top-1 classes by key (a later line
// of a key wins).
func readTop1(path string) (map[string]top1, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]top1{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var pl features.PredictionLine
		if err := json.Unmarshal(sc.Bytes(), &pl); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		c, name, ok := pl.Top1()
		out[pl.Key] = top1{class: c, name: name, ok: ok}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// diffPredictions compares the top-1 classes of two predictions files.
func diffPredictions(a, b string) (*predDiff, error) {
	ta, err := readTop1(a)
	if err != nil {
		return nil, err
	}
	tb, err := readTop1(b)
	if err != nil {
		return nil, err
	}
	d := &predDiff{a: a, b: b}
	for k, pa := range ta {
		pb, ok := tb[k]
		switch {
		case !ok:
			d.onlyA++
		case !pa.ok || !pb.ok:
			d.errs++
		case pa.class == pb.class:
			d.both++
			d.same++
		default:
			d.both++
			d.changed = append(d.changed, predChange{key: k, from: pa, to: pb})
		}
	}
	for k := range tb {
		if _, ok := ta[k]; !ok {
			d.onlyB++
		}
	}
	sort.Slice(d.changed, func(i, j int) bool { return d.changed[i].key < d.changed[j].key })
	return d, nil
}

// names are what print calls the two files: their base names, or "A" and
// "B" when those are the same (two mount paths end in predictions.jsonl
// alike: at 1942f8f that printed "0 only in predictions.jsonl, 0 only in
// predictions.jsonl"), print then saying which path each is.
func (d *predDiff) names() (string, string) {
	a, b := filepath.Base(d.a), filepath.Base(d.b)
	if a == b {
		return "A", "B"
	}
	return a, b
}

// print writes the counts and the first list changed images.
func (d *predDiff) print(w io.Writer, list int) {
	pct := 0.0
	if d.both > 0 {
		pct = 100 * float64(len(d.changed)) / float64(d.both)
	}
	nameA, nameB := d.names()
	if nameA == "A" {
		fmt.Fprintf(w, "A = %s\nB = %s\n", d.a, d.b)
	}
	fmt.Fprintf(w, "%d images in both: %d top-1 changed (%.2f%%), %d unchanged\n", d.both, len(d.changed), pct, d.same)
	fmt.Fprintf(w, "%d only in %s, %d only in %s, %d with an error line in either\n", d.onlyA, nameA, d.onlyB, nameB, d.errs)
	for i, c := range d.changed {
		if list >= 0 && i >= list {
			fmt.Fprintf(w, "... and %d more\n", len(d.changed)-i)
			break
		}
		fmt.Fprintf(w, "%s: %s -> %s\n", c.key, c.from, c.to)
	}
}

// String is "CLASS (NAME)", or CLASS without a name.
func (t top1) String() string {
	if t.name == "" {
		return fmt.Sprint(t.class)
	}
	return fmt.Sprintf("%d (%s)", t.class, t.name)
}
