package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// cliResult is what one featurefs command did.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

// String shows the result in a test message.
func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// cliEnv is the environment of a featurefs command in these tests: this
// process's without $FEATUREFS_TOKEN, with the test ONNX Runtime, plus env.
func cliEnv(t testing.TB, env ...string) []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "FEATUREFS_TOKEN=") {
			out = append(out, e)
		}
	}
	return append(append(out, "FEATUREFS_ORT_LIB="+testenv.ORTLib(t)), env...)
}

// runCLI runs `featurefs ARGS` with env added to cliEnv and returns its
// output and exit code; it fails the test past timeout.
func runCLI(t testing.TB, timeout time.Duration, env []string, args ...string) cliResult {
	t.Helper()
	return runCLIWith(t, timeout, cliRun{env: env}, args...)
}

// cliRun says how runCLIWith runs a command: env added to cliEnv, the
// working directory ("": this process's) and the standard input ("": none).
type cliRun struct {
	env   []string
	dir   string
	stdin string
}

// runCLIWith is runCLI with a working directory and standard input.
func runCLIWith(t testing.TB, timeout time.Duration, c cliRun, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, featurefsBin(t), args...)
	cmd.Env = cliEnv(t, c.env...)
	cmd.Dir = c.dir
	if c.stdin != "" {
		cmd.Stdin = strings.NewReader(c.stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("featurefs %s: still running after %v\n%s", strings.Join(args, " "), timeout, r)
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("featurefs %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// writeJPEG writes a w x h JPEG image of a gradient (seeded by seed) to p,
// creating its directory.
func writeJPEG(t testing.TB, p string, w, h, seed int) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x*3 + seed), uint8(y*5 + 2*seed), uint8((x + y + seed) % 256), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// daemonOf returns the background server of a `featurefs mount` that
// returned 0 (from the pid line it printed), unmounted when the test ends.
func daemonOf(t testing.TB, r cliResult, dir, logFile string) *daemonMount {
	t.Helper()
	mm := pidLine.FindStringSubmatch(r.Stderr)
	if mm == nil {
		t.Fatalf("featurefs mount printed no pid line:\n%s", r)
	}
	pid, _ := strconv.Atoi(mm[1])
	d := &daemonMount{Dir: dir, Log: logFile, PID: pid}
	t.Cleanup(func() { d.unmountIfMounted(t) })
	return d
}

// processServing returns the pid of a featurefs process whose command line
// holds every one of args (e.g. the mount point and --foreground), waiting
// up to timeout for it to appear.
func processServing(t testing.TB, timeout time.Duration, args ...string) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Contains(b, []byte("featurefs")) {
				continue
			}
			all := true
			for _, a := range args {
				all = all && bytes.Contains(b, append([]byte(a), 0))
			}
			if all {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no featurefs process with %q after %v", args, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopServe sends SIGTERM to a `featurefs serve` started with cmd and
// returns its exit code.
func stopServe(t testing.TB, cmd *exec.Cmd, done <-chan error) int {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("featurefs serve: %v", err)
		}
		return 0
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("featurefs serve did not stop 30s after SIGTERM")
	}
	return -1
}
