package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// runWarm runs featurefs warm with args (stdout a pipe: not a terminal) and
// returns its output and exit code.
func runWarm(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(featurefsBin(t), append([]string{"warm"}, args...)...)
	cmd.Env = append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("featurefs warm %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}

// progressLine is a plain progress line: time, done/total, rate, ETA.
var progressLine = regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d warm: \d+/\d+\+? [0-9.]+/s ETA \S+`)

// TestWarmCommand: featurefs warm without a mount fills the cache, exits 1
// and lists the bad objects with their reasons; a mount over that cache
// serves every feature without extracting. Through a mount on a fresh
// cache, warming train/ (all good) exits 0 and extracts exactly train's
// images; warming the whole layer exits 1 and lists the bad files with the
// reasons the mount recorded.
func TestWarmCommand(t *testing.T) {
	d := genDataset(t, "--bad", "--classes", "2", "--train", "2", "--val", "1")
	model := testenv.Model(t, modelName)
	names := featureNames(d.keys(t))
	images, bad := d.images(""), d.bad()
	cacheDir := filepath.Join(t.TempDir(), "cache")

	out, code := runWarm(t, "--source", d.Dir, "--model", modelName+"="+model, "--layer", testLayer,
		"--cache-dir", cacheDir, "--device", "cpu", "--progress-interval", "100ms")
	t.Logf("featurefs warm --source:\n%s", out)
	if code != 1 {
		t.Errorf("warm --source over %d bad objects exited %d, want 1", len(bad), code)
	}
	if want := fmt.Sprintf("%d of %d done", len(images), len(images)+len(bad)); !strings.Contains(out, want) {
		t.Errorf("summary: want %q", want)
	}
	if want := fmt.Sprintf("failed objects (%d):", len(bad)); !strings.Contains(out, want) {
		t.Errorf("want %q", want)
	}
	for _, o := range bad {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(o.Key) + `: \S`).MatchString(out) {
			t.Errorf("failure list lacks %s with a reason", o.Key)
		}
	}
	if !progressLine.MatchString(out) {
		t.Errorf("no plain progress line (stdout is not a terminal)")
	}

	// Everything good is cached: a mount extracts nothing to serve it.
	m := testMount(t, mountConfig{Source: d.Dir, CacheDir: cacheDir, Args: []string{"--prefetch", "off"}})
	for _, o := range images {
		if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[o.Key]))); err != nil {
			t.Fatalf("read %s: %v", names[o.Key], err)
		}
	}
	if n := extractionCount(t, mountStats(t, m)); n != 0 {
		t.Errorf("mount over the warmed cache extracted %d times, want 0", n)
	}
	m.Unmount(t)

	// Through a mount, on a fresh cache.
	m2 := testMount(t, mountConfig{Source: d.Dir, Args: []string{"--prefetch", "off"}})
	out, code = runWarm(t, filepath.Join(m2.Layer(testLayer), "train"))
	t.Logf("featurefs warm MOUNT/.../train:\n%s", out)
	train := d.images("train/")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d of %d done", len(train), len(train))) {
		t.Errorf("warm of train/ (all good): exit %d, want 0 and %d of %d done", code, len(train), len(train))
	}
	if n := extractionCount(t, mountStats(t, m2)); n != int64(len(train)) {
		t.Errorf("warming train/ extracted %d times, want %d", n, len(train))
	}
	out, code = runWarm(t, "--jobs", "4", m2.Layer(testLayer))
	t.Logf("featurefs warm MOUNT/.../%s:\n%s", testLayer, out)
	if code != 1 {
		t.Errorf("warm of the layer with %d bad objects exited %d, want 1", len(bad), code)
	}
	for _, o := range bad {
		// The mount recorded the object: it is listed under its key, once,
		// with the mount's reason (not the reader's errno).
		line := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(o.Key) + `: (.*)$`).FindStringSubmatch(out)
		if line == nil {
			t.Errorf("failure list lacks %s (the object behind %s)", o.Key, names[o.Key])
		} else if strings.Contains(line[1], o.Key) || line[1] == "input/output error" {
			t.Errorf("failure %s: reason %q repeats the key or is not the mount's record of it", o.Key, line[1])
		}
	}
	if n := extractionCount(t, mountStats(t, m2)); n != int64(len(images)+len(bad)) {
		t.Errorf("after warming everything: %d extractions, want %d (each image once, each bad object once)", n, len(images)+len(bad))
	}
}

// TestPrefetchMount: with the default --prefetch tree, reading one feature
// file of a layer directory extracts every other image under it in the
// background, in batches; reading them all afterwards extracts nothing more.
func TestPrefetchMount(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "4", "--val", "2")
	images := d.images("")
	names := featureNames(d.keys(t))
	m := testMount(t, mountConfig{Source: d.Dir, Args: []string{"--batch-size", "8"}})
	if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[images[0].Key]))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	var st map[string]any
	for {
		st = mountStats(t, m)
		if statsField(t, st, "prefetch.walks_done") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prefetch did not finish in 3 minutes: %v", st["prefetch"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("prefetch: %v; extraction: %v", st["prefetch"], st["extraction"])
	if n, c := statsField(t, st, "prefetch.extracted"), statsField(t, st, "prefetch.cached"); n != int64(len(images)-1) || c != 1 {
		t.Errorf("prefetch extracted %d and found %d cached, want %d and 1 (the file read)", n, c, len(images)-1)
	}
	if b, items := statsField(t, st, "extraction.batches"), statsField(t, st, "extraction.batched_items"); b == 0 || items/b < 2 {
		t.Errorf("%d batches for %d items: prefetch did not batch", b, items)
	}
	before := extractionCount(t, st)
	for _, o := range images {
		if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[o.Key]))); err != nil {
			t.Fatalf("read %s: %v", names[o.Key], err)
		}
	}
	if n := extractionCount(t, mountStats(t, m)) - before; n != 0 {
		t.Errorf("reading after prefetch extracted %d times, want 0", n)
	}
}
