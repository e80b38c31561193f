package test

import (
	"bytes"
	"fmt"
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

// TestWarmPredictionsOutMustBeAFile: warm --predictions OUT refuses an
// OUT that is not a regular file (a FIFO without a writer, /dev/zero, a
// directory; a symbolic link to /dev/zero as a link) with exit 2 and one
// line naming it,
// before the model loads, reading nothing. At ca82ffd a FIFO hung warm
// forever and /dev/zero grew RSS by 150 MB/s until the OOM killer.
func TestWarmPredictionsOutMustBeAFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero.jsonl")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	model := testenv.OddModel(t, "tiny")
	for _, out := range []string{fifo, link, "/dev/zero", dir} {
		r := runCLI(t, 30*time.Second, nil, "warm", "--source", src, "--model", "tiny="+model, "--device", "cpu",
			"--cache-dir", filepath.Join(dir, "cache"), "--predictions", out)
		// A link is refused as a link (nothing is written through one,
		// issue 36 item 3), before it is read; the rest as not regular.
		why := "not a regular file"
		if out == link {
			why = "is a symbolic link"
		}
		if r.Code != 2 || len(lines(r.Stderr)) != 1 || !strings.Contains(r.Stderr, why) || !strings.Contains(r.Stderr, out) {
			t.Errorf("--predictions %s: want exit 2 and one line naming it, %s; got\n%s", out, why, r)
		}
	}
}

// TestWarmInterruptStopsWithinASecond: SIGTERM stops warm --predictions
// while it reads a huge OUT (a 64 GiB sparse file, one line that never
// ends) within a second, with exit 1 and one line, its memory bounded by
// the line cap all along. At ca82ffd warm read OUT whole (RSS up to the
// file's size) and SIGTERM did not stop it.
func TestWarmInterruptStopsWithinASecond(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	out := filepath.Join(dir, "out.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"key": "`); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(featurefsBin(t), "warm", "--source", src, "--model", "tiny="+testenv.OddModel(t, "tiny"), "--device", "cpu",
		"--cache-dir", filepath.Join(dir, "cache"), "--predictions", out)
	cmd.Env = cliEnv(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	const maxRSS = 300 << 20 // the line cap is 1 MiB; the rest is the Go runtime
	hwm := func() int64 { return procStatusBytes(pid, "VmHWM") }
	// Wait until it has read 512 MiB of OUT, its peak RSS checked meanwhile.
	deadline := time.Now().Add(60 * time.Second)
	for procIOBytes(pid, "rchar") < 512<<20 {
		if h := hwm(); h > maxRSS {
			cmd.Process.Kill()
			t.Fatalf("peak RSS %d MiB while reading OUT, want under %d MiB (OUT read whole?)", h>>20, maxRSS>>20)
		}
		select {
		case err := <-exited:
			t.Fatalf("warm exited (%v) before it read 512 MiB of OUT:\n%s\n%s", err, stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("warm read %d bytes of OUT in 60 s", procIOBytes(pid, "rchar"))
		}
	}
	peak := hwm()
	sent := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	var took time.Duration
	select {
	case err := <-exited:
		took = time.Since(sent)
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 1 || !strings.Contains(stderr.String(), "interrupted") {
			t.Errorf("after SIGTERM: exit %d (%v), want 1 saying interrupted; stderr:\n%s", code, err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("warm still running 10 s after SIGTERM (peak RSS %d MiB)", hwm()>>20)
	}
	// Within a second, plus room for a loaded machine (2 shared cores).
	if took > 3*time.Second {
		t.Errorf("warm stopped %v after SIGTERM, want about a second at most", took)
	}
	if peak > maxRSS {
		t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, maxRSS>>20)
	}
	t.Logf("SIGTERM after %d MiB read: stopped in %v; peak RSS %d MiB", 512, took.Round(time.Millisecond), peak>>20)
}

// procStatusBytes is field (kB) of /proc/PID/status, in bytes; 0 if unread.
func procStatusBytes(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}

// procIOBytes is field of /proc/PID/io; 0 if unread.
func procIOBytes(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
