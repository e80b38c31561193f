package test

// Helpers of the reliability tests (reliability_*_test.go): soak knobs, a
// stalling TCP proxy, page-cache dropping, process figures from /proc, a
// daemon-mode mount on a chosen mount point, and secret scanning.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// soakIter returns FEATUREFS_SOAK_ITER, else def (the CI value).
func soakIter(t testing.TB, def int) int {
	t.Helper()
	s := os.Getenv("FEATUREFS_SOAK_ITER")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FEATUREFS_SOAK_ITER=%q: want a positive integer", s)
	}
	return n
}

// soakDuration returns FEATUREFS_SOAK_DURATION, else def (the CI value).
func soakDuration(t testing.TB, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv("FEATUREFS_SOAK_DURATION")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("FEATUREFS_SOAK_DURATION=%q: want a positive duration such as 5m", s)
	}
	return d
}

// dropPageCache reads nothing but tells the kernel to forget the cached
// pages of an open file (posix_fadvise DONTNEED), so that the next read of
// it reaches featurefs instead of the page cache.
func dropPageCache(f *os.File) error {
	const fadvDontNeed = 4
	_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// readUncached opens p, reads it whole and drops its pages from the page
// cache, so the next read asks featurefs again.
func readUncached(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := dropPageCache(f); err != nil {
		return nil, fmt.Errorf("fadvise %s: %w", p, err)
	}
	b, err := io.ReadAll(f)
	if err == nil {
		err = dropPageCache(f)
	}
	return b, err
}

// fdCount returns the number of open file descriptors of a process.
func fdCount(t testing.TB, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// fdKinds counts a process's open file descriptors by what they point to
// (socket, anon_inode, /dev/..., or file).
func fdKinds(t testing.TB, pid int) map[string]int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range es {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		kind := "file"
		switch {
		case strings.HasPrefix(target, "socket:"):
			kind = "socket"
		case strings.HasPrefix(target, "anon_inode:"):
			kind = target
		case strings.HasPrefix(target, "pipe:"):
			kind = "pipe"
		case strings.HasPrefix(target, "/dev/"):
			kind = target
		}
		out[kind]++
	}
	return out
}

// stallProxy is a TCP proxy on 127.0.0.1 in front of a server. While
// stalled, it forwards nothing in either direction on any connection (the
// server seems to hang, neither failing nor answering); un-stalled, bytes
// flow again.
type stallProxy struct {
	Addr    string
	target  string
	ln      net.Listener
	stalled atomic.Bool
	closed  chan struct{}

	mu    sync.Mutex
	conns []net.Conn // GUARDED_BY(mu)
}

// startStallProxy starts a proxy to target (host:port); t.Cleanup closes it.
func startStallProxy(t testing.TB, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{Addr: ln.Addr().String(), target: target, ln: ln, closed: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Stall stops (true) or resumes (false) all traffic.
func (p *stallProxy) Stall(on bool) { p.stalled.Store(on) }

func (p *stallProxy) close() {
	select {
	case <-p.closed:
		return
	default:
	}
	close(p.closed)
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst chunk by chunk, holding each chunk while stalled.
func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 && p.stalled.Load() {
			select {
			case <-p.closed:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// daemonMount is a `featurefs mount` started as a user would (no
// --foreground: it daemonizes and returns once mounted) on a chosen mount
// point, so that tests can kill it and mount again on the same directory.
type daemonMount struct {
	Dir, CacheDir, Log string
	PID                int
}

// pidLine is what `featurefs mount` prints once the daemon is mounted.
var pidLine = regexp.MustCompile(`\(pid (\d+), log `)

// mountDaemon runs `featurefs mount` (daemonizing) on dir with the test
// model. It fails the test if the command fails. The caller unmounts (or
// kills) it; t.Cleanup unmounts it if it is still mounted.
func mountDaemon(t testing.TB, dir, cacheDir, logFile, source string, env []string, args ...string) *daemonMount {
	t.Helper()
	bin := featurefsBin(t)
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)
	all := []string{"mount", "--model", modelName + "=" + model, "--cache-dir", cacheDir, "--ort-lib", ort,
		"--device", "cpu", "--log-file", logFile}
	all = append(append(all, args...), source, dir)
	cmd := exec.Command(bin, all...)
	cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+ort), env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("featurefs %s: %v\n%s\nlog:\n%s", strings.Join(all, " "), err, stderr.String(), tail(logFile, 4000))
		}
	case <-ctx.Done():
		cmd.Process.Kill()
		t.Fatalf("featurefs mount did not return within 3m:\n%s", stderr.String())
	}
	mm := pidLine.FindStringSubmatch(stderr.String())
	if mm == nil {
		t.Fatalf("featurefs mount printed no pid: %q", stderr.String())
	}
	pid, _ := strconv.Atoi(mm[1])
	d := &daemonMount{Dir: dir, CacheDir: cacheDir, Log: logFile, PID: pid}
	// The pid must be the featurefs process serving dir.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(dir)) || !bytes.Contains(cmdline, []byte("--foreground")) {
		t.Fatalf("pid %d from %q is not the featurefs server of %s (cmdline %q, %v)", pid, stderr.String(), dir, cmdline, err)
	}
	t.Cleanup(func() { d.unmountIfMounted(t) })
	return d
}

// Path joins elems under the mount point.
func (d *daemonMount) Path(elems ...string) string {
	return filepath.Join(append([]string{d.Dir}, elems...)...)
}

// Layer returns the directory of the test model's layer.
func (d *daemonMount) Layer(layer string) string { return d.Path("features", modelName, layer) }

// alive reports whether the server process still exists (and is not a zombie).
func (d *daemonMount) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.PID))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// waitExit waits up to timeout for the server process to be gone.
func (d *daemonMount) waitExit(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for d.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Kill sends SIGKILL to the server and waits for it to die.
func (d *daemonMount) Kill(t testing.TB) {
	t.Helper()
	if err := syscall.Kill(d.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", d.PID, err)
	}
	if !d.waitExit(10 * time.Second) {
		t.Fatalf("featurefs pid %d still alive 10s after SIGKILL", d.PID)
	}
}

// Unmount runs umount(8) and waits for the server to exit.
func (d *daemonMount) Unmount(t testing.TB) {
	t.Helper()
	if b, err := exec.Command("umount", d.Dir).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v: %s", d.Dir, err, b)
		syscall.Kill(d.PID, syscall.SIGTERM)
	}
	if !d.waitExit(30 * time.Second) {
		t.Errorf("featurefs pid %d did not exit within 30s of umount; killing it", d.PID)
		syscall.Kill(d.PID, syscall.SIGKILL)
		d.waitExit(10 * time.Second)
	}
}

func (d *daemonMount) unmountIfMounted(t testing.TB) {
	if isMounted(t, d.Dir) {
		if d.alive() {
			d.Unmount(t)
		} else {
			exec.Command("umount", "-l", d.Dir).Run()
		}
	} else if d.alive() {
		syscall.Kill(d.PID, syscall.SIGTERM)
		if !d.waitExit(15 * time.Second) {
			syscall.Kill(d.PID, syscall.SIGKILL)
		}
	}
	if t.Failed() {
		t.Logf("featurefs log %s:\n%s", d.Log, tail(d.Log, 4000))
	}
}

// assertNoSecrets fails if any of the secrets appears in the given files
// or strings (logs, stats).
func assertNoSecrets(t testing.TB, secrets []string, files []string, texts map[string]string) {
	t.Helper()
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			continue
		}
		if len(b) == 0 {
			t.Errorf("%s is empty: nothing was checked", p)
		}
		texts[p] = string(b)
	}
	for name, s := range texts {
		for _, sec := range secrets {
			if sec != "" && strings.Contains(s, sec) {
				t.Errorf("%s contains a credential (%d chars starting %q)", name, len(sec), sec[:3])
			}
		}
	}
}

// shuffled returns a shuffled copy of s.
func shuffled[T any](r *rand.Rand, s []T) []T {
	out := append([]T(nil), s...)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// isErrno reports whether err is one of the errnos.
func isErrno(err error, errnos ...syscall.Errno) bool {
	for _, e := range errnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// logLines returns the lines of a log file that contain every one of subs.
func logLines(t testing.TB, p string, subs ...string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return linesWith(string(b), subs...)
}

// linesWith returns the lines of text that hold every one of subs.
func linesWith(text string, subs ...string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
