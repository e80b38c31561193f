package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestDecodeGPUWithoutGPU: on a host without a GPU, an explicit --decode
// gpu is held to --device cuda's rule: featurefs mount exits 4 with one
// line on stderr naming what is missing and the way out, in the
// foreground and daemonizing, as --device cuda does (it used to mount,
// with one WARN in the log file alone); with --allow-cpu-fallback it
// mounts, decoding on the CPU, and says so in one warning on stderr at
// start (before it daemonizes). --decode auto falls back without a word.
func TestDecodeGPUWithoutGPU(t *testing.T) {
	model := testenv.OddModel(t, "tiny")
	ort := testenv.ORTLib(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "train", "cat", "a.jpg"), 64, 48, 1)
	n := 0
	args := func(extra ...string) []string {
		n++
		mnt := filepath.Join(work, "mnt", strings.Repeat("m", n)) // and a cache of its own: a mount that should have failed holds its lock
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		a := []string{"mount", "--model", "tiny=" + model, "--cache-dir", filepath.Join(work, "cache", strings.Repeat("c", n)), "--ort-lib", ort,
			"--device", "auto", "--log-file", filepath.Join(work, "featurefs.log")}
		return append(append(a, extra...), src, mnt)
	}
	for _, c := range []exitCase{
		{name: "--device cuda, daemonizing", code: 4, args: []string{"--device", "cuda"},
			want: []string{"--device cuda", "no usable GPU", "--allow-cpu-fallback"}},
		{name: "--decode gpu, daemonizing", code: 4, args: []string{"--decode", "gpu"},
			want: []string{"--decode gpu needs a GPU", "--allow-cpu-fallback"}},
		// A foreground mount that does not fail serves until killed:
		// the time limit is its failure.
		{name: "--decode gpu, foreground", code: 4, args: []string{"--decode", "gpu", "--foreground"},
			want: []string{"--decode gpu needs a GPU", "--allow-cpu-fallback"}},
	} {
		a := args(c.args...)
		mnt := a[len(a)-1]
		t.Cleanup(func() {
			if isMounted(t, mnt) {
				exec.Command("umount", "-l", mnt).Run()
			}
		})
		r := runCLI(t, time.Minute, nil, a...)
		checkExit(t, "mount", c, r)
		if isMounted(t, mnt) {
			t.Errorf("%s: mounted although it failed", c.name)
		}
	}

	for _, c := range []struct {
		flags []string
		warn  string // "": no warning
	}{
		{[]string{"--decode", "gpu", "--allow-cpu-fallback"}, "--decode gpu needs a GPU and inference runs on the CPU: JPEGs are decoded on the CPU (--allow-cpu-fallback)"},
		{[]string{"--decode", "auto"}, ""},
	} {
		a := args(c.flags...)
		mnt := a[len(a)-1]
		r := runCLI(t, 2*time.Minute, nil, a...)
		if r.Code != 0 {
			t.Fatalf("mount %s: %s", strings.Join(c.flags, " "), r)
		}
		d := daemonOf(t, r, mnt, filepath.Join(work, "featurefs.log"))
		warnings := 0
		for _, l := range lines(r.Stderr) {
			if strings.Contains(l, "warning") {
				warnings++
			}
		}
		switch {
		case c.warn != "" && (warnings != 1 || !strings.Contains(r.Stderr, "featurefs mount: warning: "+c.warn)):
			t.Errorf("mount %s: stderr %q; want one warning line %q", strings.Join(c.flags, " "), r.Stderr, c.warn)
		case c.warn == "" && warnings != 0:
			t.Errorf("mount %s: stderr %q; want no warning", strings.Join(c.flags, " "), r.Stderr)
		}
		if _, err := os.ReadFile(filepath.Join(mnt, "features", "tiny", "layer0", "train", "cat", "a.npy")); err != nil {
			t.Errorf("mount %s: reading a feature: %v", strings.Join(c.flags, " "), err)
		}
		d.Unmount(t)
	}
}

// TestExtractDecodeGPUWithoutGPU: featurefs extract holds an explicit
// --decode gpu to the same rule as mount: exit 4 naming what is missing
// where no GPU decoder can be had (it used to decode on the CPU without a
// word), and with --allow-cpu-fallback one warning and the features.
func TestExtractDecodeGPUWithoutGPU(t *testing.T) {
	model := testenv.OddModel(t, "tiny")
	work := t.TempDir()
	img := filepath.Join(work, "src", "a.jpg")
	writeJPEG(t, img, 64, 48, 1)
	base := []string{"extract", "--model", model, "--layer", "0", "--device", "cpu", "--decode", "gpu", "-o", filepath.Join(work, "out")}
	r := runCLI(t, 2*time.Minute, nil, append(base, img)...)
	if r.Code != 4 || !strings.Contains(r.Stderr, "--decode gpu") || !strings.Contains(r.Stderr, "--allow-cpu-fallback") {
		t.Fatalf("extract --decode gpu without a GPU: %s; want exit 4 naming --decode gpu and the way out", r)
	}
	r = runCLI(t, 2*time.Minute, nil, append(append(base, "--allow-cpu-fallback"), img)...)
	if r.Code != 0 || strings.Count(r.Stderr, "decoded on the CPU") != 1 {
		t.Fatalf("extract --decode gpu --allow-cpu-fallback: %s; want exit 0 and one warning", r)
	}
	if _, err := os.Stat(filepath.Join(work, "out", "a.npy")); err != nil {
		t.Errorf("no feature written: %v", err)
	}
}
