package test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// exitCase is one failure a command must end with a given exit code for,
// its message naming what is wrong.
type exitCase struct {
	name string
	code int
	args []string // flags added after the working ones (a later flag wins)
	// source and mnt replace the working SOURCE and MOUNTPOINT when set.
	source, mnt string
	want        []string // substrings of stderr
}

// checkExit checks a failed command's result: its exit code, one line on
// stderr for codes 3 to 6 (the problem, not a page of usage), and the
// substrings that name the problem.
func checkExit(t *testing.T, what string, c exitCase, r cliResult) {
	t.Helper()
	if r.Code != c.code {
		t.Errorf("%s: %s: exit %d, want %d\n%s", what, c.name, r.Code, c.code, r)
		return
	}
	if l := lines(r.Stderr); c.code >= 3 && len(l) != 1 {
		t.Errorf("%s: %s: %d lines on stderr, want one saying what is wrong:\n%s", what, c.name, len(l), r.Stderr)
	}
	for _, w := range c.want {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("%s: %s: stderr lacks %q:\n%s", what, c.name, w, r.Stderr)
		}
	}
}

// TestMountExitCodes: each exit code of featurefs mount as the README lists
// them, through the real binary, both in the foreground and daemonizing (the
// parent passes on the child's code and one-line message): 2 bad options,
// 3 mount point (missing; not empty without --allow-nonempty), 4 model
// file, ONNX Runtime library or asked-for GPU (a missing --model file and
// --ort-lib used to exit 2; --device cuda on a machine without a GPU used to
// run on the CPU), 5 source, 6 cache directory, 1 other (the server dying
// before it mounts), and 0: a mount over a non-empty directory with
// --allow-nonempty, hiding its files until unmounted, with --device auto
// falling back to the CPU in one INFO log line and no warning.
func TestMountExitCodes(t *testing.T) {
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "train", "cat", "a.jpg"), 64, 48, 1)
	notDir := filepath.Join(work, "a-file")
	full := filepath.Join(work, "full")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := func(kind string) string {
		p, err := os.MkdirTemp(work, kind+"-")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []exitCase{
		{name: "bad option", code: 2, args: []string{"--cache-size", "lots"}, want: []string{"cache-size", "lots"}},
		{name: "bad device name", code: 2, args: []string{"--device", "tpu"}, want: []string{"--device \"tpu\""}},
		{name: "missing mount point", code: 3, mnt: filepath.Join(work, "nope"), want: []string{"does not exist", "mkdir -p"}},
		{name: "non-empty mount point", code: 3, mnt: full, want: []string{full, "not empty", "--allow-nonempty"}},
		{name: "missing model file", code: 4, args: []string{"--model", modelName + "=/nonexistent/m.onnx"}, want: []string{"/nonexistent/m.onnx", "does not exist"}},
		{name: "missing ONNX Runtime", code: 4, args: []string{"--ort-lib", "/nonexistent/libonnxruntime.so.1"}, want: []string{"--ort-lib /nonexistent/libonnxruntime.so.1"}},
		{name: "cuda without a GPU", code: 4, args: []string{"--device", "cuda"}, want: []string{"--device cuda", "no usable GPU", "--allow-cpu-fallback"}},
		{name: "cuda:3 and TensorRT without a GPU", code: 4, args: []string{"--device", "cuda:3", "--tensorrt"}, want: []string{"cuda:3 with TensorRT", "no usable GPU"}},
		{name: "source", code: 5, source: filepath.Join(work, "no-such-dir"), want: []string{"no-such-dir"}},
		{name: "cache directory", code: 6, args: []string{"--cache-dir", notDir}, want: []string{"--cache-dir", notDir}},
	}
	for _, fg := range []bool{true, false} {
		what := "mount --foreground"
		if !fg {
			what = "mount (daemonizing)"
		}
		for _, c := range cases {
			mnt := c.mnt
			if mnt == "" {
				mnt = fresh("mnt")
			}
			source := c.source
			if source == "" {
				source = src
			}
			args := []string{"mount", "--model", modelName + "=" + model, "--cache-dir", filepath.Join(work, "cache"), "--ort-lib", ort,
				"--device", "cpu", "--log-file", filepath.Join(work, "featurefs.log")}
			if fg {
				args = append(args, "--foreground")
			}
			args = append(append(args, c.args...), source, mnt)
			r := runCLI(t, 2*time.Minute, nil, args...)
			checkExit(t, what, c, r)
			if isMounted(t, mnt) {
				exec.Command("umount", "-l", mnt).Run()
				t.Errorf("%s: %s: mounted although it failed", what, c.name)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep.txt")); err != nil || string(b) != "mine" {
		t.Errorf("the refused mount point's file: %q, %v", b, err)
	}

	// 1: the background server dies before it mounts (killed while it
	// waits on a store that accepts connections and never answers).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	mnt := fresh("mnt")
	cmd := exec.Command(featurefsBin(t), "mount", "--model", modelName+"="+model, "--cache-dir", filepath.Join(work, "cache"),
		"--ort-lib", ort, "--device", "cpu", "--log-file", filepath.Join(work, "stalled.log"),
		"--endpoint-url", "http://"+ln.Addr().String(), "s3://stalled/prefix", mnt)
	cmd.Env = cliEnv(t, "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := processServing(t, 30*time.Second, mnt, "--foreground")
	time.Sleep(200 * time.Millisecond) // inside the store's probe
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	cmd.Wait()
	checkExit(t, "mount (daemonizing)", exitCase{name: "server killed before mounting", code: 1,
		want: []string{"exited before mounting", filepath.Join(work, "stalled.log")}}, cliResult{Stderr: out.String(), Code: cmd.ProcessState.ExitCode()})

	// 0: over a non-empty directory with --allow-nonempty, --device auto.
	logFile := filepath.Join(work, "ok.log")
	r := runCLI(t, 3*time.Minute, nil, "mount", "--model", modelName+"="+model, "--cache-dir", filepath.Join(work, "cache"),
		"--ort-lib", ort, "--device", "auto", "--log-file", logFile, "--allow-nonempty", src, full)
	if r.Code != 0 {
		t.Fatalf("mount --allow-nonempty over %s: %s", full, r)
	}
	d := daemonOf(t, r, full, logFile)
	if strings.Contains(r.Stderr, "warning") {
		t.Errorf("--device auto without a GPU warned on stderr (it may only log one INFO line):\n%s", r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(full, "features", modelName, testLayer, "train", "cat", "a.npy")); err != nil {
		t.Errorf("the mount over a non-empty directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, "keep.txt")); err == nil {
		t.Errorf("keep.txt shows through the mount")
	}
	d.Unmount(t)
	if b, err := os.ReadFile(filepath.Join(full, "keep.txt")); err != nil || string(b) != "mine" {
		t.Errorf("keep.txt after unmounting: %q, %v", b, err)
	}
	if l := logLines(t, logFile, "GPU unavailable: "); len(l) != 1 || !strings.Contains(l[0], "level=INFO") || !strings.Contains(l[0], "; running on the CPU") {
		t.Errorf("--device auto without a GPU: log lines about it %q, want one INFO line \"GPU unavailable: WHY; running on the CPU\"", l)
	}
	if l := logLines(t, logFile, "level=WARN", "GPU"); len(l) != 0 {
		t.Errorf("--device auto warned about the GPU in the log: %q", l)
	}
}

// TestServeExitCodes: featurefs serve ends with the codes featurefs mount
// uses: 2 bad options, 4 model file, ONNX Runtime library or asked-for GPU,
// 5 source, 6 cache directory, 1 the address in use, and 0 after SIGTERM;
// with --allow-cpu-fallback, --device cuda on a machine without a GPU
// serves on the CPU after one warning line on stderr, and an empty source
// directory gets a warning line too.
func TestServeExitCodes(t *testing.T) {
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	notDir := filepath.Join(work, "a-file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	base := func(source string, extra ...string) []string {
		args := []string{"serve", "--no-auth", "--listen", "127.0.0.1:0", "--model", modelName + "=" + model,
			"--cache-dir", filepath.Join(work, "cache"), "--ort-lib", ort, "--device", "cpu", "--log-file", filepath.Join(work, "serve.log")}
		return append(append(args, extra...), source)
	}
	for _, c := range []exitCase{
		{name: "bad option", code: 2, args: []string{"--listen", "nowhere"}, want: []string{"--listen"}},
		{name: "missing model file", code: 4, args: []string{"--model", modelName + "=/nonexistent/m.onnx"}, want: []string{"/nonexistent/m.onnx"}},
		{name: "missing ONNX Runtime", code: 4, args: []string{"--ort-lib", "/nonexistent/libonnxruntime.so.1"}, want: []string{"--ort-lib"}},
		{name: "cuda without a GPU", code: 4, args: []string{"--device", "cuda:0"}, want: []string{"--device cuda:0", "no usable GPU"}},
		{name: "source", code: 5, source: filepath.Join(work, "no-such-dir"), want: []string{"no-such-dir"}},
		{name: "cache directory", code: 6, args: []string{"--cache-dir", notDir}, want: []string{notDir}},
		{name: "address in use", code: 1, args: []string{"--listen", taken.Addr().String()}, want: []string{"--listen " + taken.Addr().String()}},
	} {
		source := c.source
		if source == "" {
			source = src
		}
		checkExit(t, "serve", c, runCLI(t, 3*time.Minute, nil, base(source, c.args...)...))
	}

	// 0, over an empty directory, with --device cuda --allow-cpu-fallback.
	empty := filepath.Join(work, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(featurefsBin(t), base(empty, "--device", "cuda", "--allow-cpu-fallback")...)
	cmd.Env = cliEnv(t)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var got []string
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			got = append(got, sc.Text())
			if strings.HasPrefix(sc.Text(), "featurefs serve: listening on ") {
				listening <- true
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("serve --device cuda --allow-cpu-fallback exited (%v):\n%s", err, strings.Join(got, "\n"))
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("serve not listening after 3m")
	}
	if code := stopServe(t, cmd, done); code != 0 {
		t.Errorf("serve after SIGTERM: exit %d, want 0", code)
	}
	text := strings.Join(got, "\n")
	var gpuWarn, emptyWarn int
	for _, l := range got {
		if strings.HasPrefix(l, "featurefs serve: warning: --device cuda") && strings.Contains(l, "running on the CPU") {
			gpuWarn++
		}
		if strings.HasPrefix(l, "featurefs serve: warning: source "+empty+" holds no object") {
			emptyWarn++
		}
	}
	if gpuWarn != 1 || emptyWarn != 1 {
		t.Errorf("serve --device cuda --allow-cpu-fallback over an empty directory: %d GPU and %d empty-source warning lines, want one each:\n%s", gpuWarn, emptyWarn, text)
	}
}

// TestWarmSourceExitCodes: featurefs warm --source ends with mount's codes
// (2 bad usage, 4 model file, ONNX Runtime library or asked-for GPU,
// 5 source, 6 cache directory) and with 1 when an object failed, 0 when all
// were extracted; a usage error prints no "0 of 0 done" summary, and the
// failure list names each object once (it used to read
// "bad.jpg: bad.jpg: cannot use as image ...").
func TestWarmSourceExitCodes(t *testing.T) {
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)
	work := t.TempDir()
	good := filepath.Join(work, "good")
	writeJPEG(t, filepath.Join(good, "cat", "a.jpg"), 64, 48, 1)
	mixed := filepath.Join(work, "mixed")
	writeJPEG(t, filepath.Join(mixed, "cat", "a.jpg"), 64, 48, 2)
	if err := os.WriteFile(filepath.Join(mixed, "cat", "bad.jpg"), []byte("not an image at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(work, "a-file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := func(source string, extra ...string) []string {
		args := []string{"warm", "--source", source, "--model", modelName + "=" + model, "--layer", "layer0",
			"--cache-dir", filepath.Join(work, "cache"), "--ort-lib", ort, "--device", "cpu", "--progress-interval", "1h"}
		return append(args, extra...)
	}
	for _, c := range []exitCase{
		{name: "no layer", code: 2, args: []string{"--layer", ""}, want: []string{"--layer"}},
		{name: "unknown layer", code: 2, args: []string{"--layer", "layer99"}, want: []string{"layer99"}},
		{name: "missing model file", code: 4, args: []string{"--model", modelName + "=/nonexistent/m.onnx"}, want: []string{"/nonexistent/m.onnx"}},
		{name: "missing ONNX Runtime", code: 4, args: []string{"--ort-lib", "/nonexistent/libonnxruntime.so.1"}, want: []string{"--ort-lib"}},
		{name: "TensorRT without a GPU", code: 4, args: []string{"--device", "auto", "--tensorrt"}, want: []string{"TensorRT", "no usable GPU"}},
		{name: "source", code: 5, source: filepath.Join(work, "no-such-dir"), want: []string{"no-such-dir"}},
		{name: "cache directory", code: 6, args: []string{"--cache-dir", notDir}, want: []string{notDir}},
	} {
		source := c.source
		if source == "" {
			source = good
		}
		r := runCLI(t, 3*time.Minute, nil, base(source, c.args...)...)
		checkExit(t, "warm --source", c, r)
		if r.Stdout != "" {
			t.Errorf("warm --source: %s: printed a summary after an error that walked nothing:\n%s", c.name, r.Stdout)
		}
	}

	r := runCLI(t, 3*time.Minute, nil, base(mixed)...)
	if r.Code != 1 || !strings.Contains(r.Stdout, "1 of 2 done") || !strings.Contains(r.Stdout, "  cat/bad.jpg: ") {
		t.Errorf("warm --source over one good and one bad image: want exit 1, 1 of 2 done and cat/bad.jpg listed:\n%s", r)
	}
	for _, l := range lines(r.Stdout) {
		if strings.Count(l, "bad.jpg") > 1 {
			t.Errorf("failure line names the object more than once: %q", l)
		}
	}
	r = runCLI(t, 3*time.Minute, nil, base(good)...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "1 of 1 done") {
		t.Errorf("warm --source over one good image: want exit 0 and 1 of 1 done:\n%s", r)
	}
}
