package test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// served is a running `featurefs serve`.
type served struct {
	URL       string
	TokenFile string
	Token     string
	cmd       *exec.Cmd
	mu        sync.Mutex
	log       bytes.Buffer // GUARDED_BY(mu)
	exited    chan struct{}
}

// Log returns what the server wrote so far.
func (s *served) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// PID is the server process's id.
func (s *served) PID() int { return s.cmd.Process.Pid }

// startServe runs `featurefs serve` with the test model over source on a
// free loopback port, with a fresh token file, and stops it when the test
// ends. It returns once the server listens.
func startServe(t *testing.T, source string, env []string, args ...string) *served {
	t.Helper()
	return startServeNoFile(t, 0, source, env, args...)
}

// startServeNoFile is startServe with the process's descriptor limit
// (RLIMIT_NOFILE, soft and hard) set to nofile (0: inherited).
func startServeNoFile(t *testing.T, nofile int, source string, env []string, args ...string) *served {
	t.Helper()
	bin := featurefsBin(t)
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)
	work := t.TempDir()
	s := &served{TokenFile: filepath.Join(work, "token"), Token: "tok-" + filepath.Base(work) + "-never-logged", exited: make(chan struct{})}
	if err := os.WriteFile(s.TokenFile, []byte(s.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := []string{"serve", "--listen", "127.0.0.1:0", "--token-file", s.TokenFile,
		"--cache-dir", filepath.Join(work, "cache"), "--ort-lib", ort, "--device", "cpu", "--log-level", "debug"}
	if !slices.Contains(args, "--model") { // the test model, unless args name one
		full = append(full, "--model", modelName+"="+model)
	}
	full = append(full, args...)
	full = append(full, source)
	s.cmd = commandNoFile(nofile, bin, full...)
	s.cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+ort), env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		defer close(s.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			if u, ok := strings.CutPrefix(line, "featurefs serve: listening on "); ok {
				urls <- u
			}
		}
		s.cmd.Wait()
	}()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("featurefs serve did not stop 20s after SIGTERM")
			s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("featurefs serve log:\n%s", lastBytes(s.Log(), 6000))
		}
	})
	select {
	case s.URL = <-urls:
	case <-s.exited:
		t.Fatalf("featurefs serve exited before listening:\n%s", s.Log())
	case <-time.After(3 * time.Minute):
		t.Fatalf("featurefs serve: not listening after 3m:\n%s", s.Log())
	}
	return s
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// remoteArgs are the mount flags of a remote mount of s.
func (s *served) remoteArgs(extra ...string) []string {
	return append([]string{"--remote", s.URL, "--remote-token-file", s.TokenFile}, extra...)
}

// TestRemoteMountDataLoader: `featurefs serve` over a MinIO bucket and
// `featurefs mount --remote` pass the DataLoader test of the embedded mount
// (classes, counts, every sample once, values equal to featurefs extract),
// with the reads gathered into fewer batch requests than features. The
// mount has no --model: the models come from the server.
func TestRemoteMountDataLoader(t *testing.T) {
	d := genDataset(t, "--bad", "--classes", "3", "--train", "3", "--val", "2")
	srv, env := minioBucket(t, "remote-data", "imagenet/", d.Dir)
	s := startServe(t, "s3://remote-data/imagenet", env, "--endpoint-url", srv.Endpoint, "--batch-size", "4")
	m := testMount(t, mountConfig{Args: s.remoteArgs(), NoModel: true})
	checkDataLoader(t, d, m)

	st := mountStats(t, m)
	ex, _ := st["extractor"].(map[string]any)
	reqs, _ := ex["requests"].(float64)
	batches, _ := ex["batches"].(float64)
	images := len(d.images("train/")) + len(d.images("val/"))
	// Requests include the bad objects and prefetch's; each image at least once.
	if int(reqs) < images || batches <= 0 || batches >= reqs {
		t.Errorf("remote mount: %v feature requests in %v batches for %d images; want every image, in fewer batches", reqs, batches, images)
	}
	t.Logf("remote mount: %v feature requests in %v batch requests", reqs, batches)
	if strings.Contains(s.Log(), s.Token) {
		t.Errorf("the server's log shows the token")
	}
}

// TestRemoteMountAuthAndSilentServer: a mount with a wrong token fails with
// exit code 5 naming the 401 (and the token is not logged); with the right
// token, once the server stops answering (SIGSTOP), a read of an uncached
// feature fails with EIO after --remote-timeout while a read feature is
// still served from the mount's cache; after SIGCONT reads work again.
func TestRemoteMountAuthAndSilentServer(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "3", "--val", "0", "--formats", "jpg")
	// Heartbeats well inside the 2s --remote-timeout below (the default 2s
	// races it while the first features are computed).
	s := startServe(t, d.Dir, nil, "--heartbeat", "500ms")

	// Wrong token.
	bad := filepath.Join(t.TempDir(), "bad-token")
	os.WriteFile(bad, []byte("not-the-token"), 0o600)
	mnt := t.TempDir()
	cmd := exec.Command(featurefsBin(t), "mount", "--foreground", "--remote", s.URL, "--remote-token-file", bad,
		"--cache-dir", filepath.Join(t.TempDir(), "c"), "--ort-lib", testenv.ORTLib(t), mnt)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(string(out), "401") {
		t.Errorf("mount with a wrong token: %v, want exit 5 naming 401:\n%s", err, out)
	}
	if strings.Contains(string(out), "not-the-token") || strings.Contains(s.Log(), "not-the-token") || strings.Contains(s.Log(), s.Token) {
		t.Errorf("a token was logged")
	}

	const timeout = 2 * time.Second
	// With --model (the default --split none needs no profile: a mount with
	// a short timeout used to fail on GET /v1/profile).
	m := testMount(t, mountConfig{Args: s.remoteArgs("--remote-timeout", timeout.String(), "--prefetch", "off")})
	// The layers table is the server's (its header names the model input).
	table, err := os.ReadFile(m.Path("features", modelName, "layers"))
	if err != nil || !strings.Contains(string(table), "input input 3x224x224") || !strings.Contains(string(table), "1024x14x14") {
		t.Errorf("layers table of the remote mount (%v):\n%s", err, table)
	}
	names := featureNames(d.keys(t))
	imgs := d.images("train/")
	first := m.Path("features", modelName, testLayer, names[imgs[0].Key])
	want, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	// List the directory (the mount caches the listing) before stopping.
	if _, err := os.ReadDir(filepath.Dir(first)); err != nil {
		t.Fatal(err)
	}

	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			s.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// The cached feature, its kernel pages dropped: served by the mount
	// itself, from its cache or from the recent features it keeps in
	// memory (a cache hit or a recent read in the stats).
	hits := fsStat(t, m, "cache_hits") + fsStat(t, m, "recent_reads")
	dropPages(t, first)
	got, err := os.ReadFile(first)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("cached feature with the server stopped: %v", err)
	}
	if h := fsStat(t, m, "cache_hits") + fsStat(t, m, "recent_reads"); h < hits+1 {
		t.Errorf("cache hits + recent reads %v -> %v reading the cached feature: not served by the mount", hits, h)
	}
	second := m.Path("features", modelName, testLayer, names[imgs[1].Key])
	start := time.Now()
	_, err = os.ReadFile(second)
	took := time.Since(start)
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("uncached feature with the server stopped: %v, want EIO", err)
	}
	if took < timeout || took > 3*timeout {
		t.Errorf("uncached feature with the server stopped failed after %v, want about %v", took, timeout)
	}
	if ioe := fsStat(t, m, "io_errors"); ioe < 1 {
		t.Errorf("mount stats count %v I/O errors, want at least 1", ioe)
	}

	s.cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	if _, err := os.ReadFile(second); err != nil {
		t.Errorf("after SIGCONT: %v", err)
	}
}

// fsStat returns one figure of the stats file's "fs" section.
func fsStat(t *testing.T, m *mounted, name string) float64 {
	t.Helper()
	// The kernel keeps the stats file's attributes, and so its pages, for
	// one of its clock ticks (fs/statsfile.go): a read of it within a tick
	// of the one before can return that read's figures. Wait past a tick.
	time.Sleep(20 * time.Millisecond)
	fsStats, _ := mountStats(t, m)["fs"].(map[string]any)
	v, ok := fsStats[name].(float64)
	if !ok {
		t.Fatalf("stats file: no fs.%s", name)
	}
	return v
}

// dropPages asks the kernel to drop a file's cached pages
// (posix_fadvise POSIX_FADV_DONTNEED), so the next read reaches the mount.
func dropPages(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const fadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); e != 0 {
		t.Fatalf("fadvise %s: %v", p, e)
	}
}
