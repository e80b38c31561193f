package test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// modelName is the model directory every test mounts.
const modelName = "resnet50"

// testLayer is the layer the tests read: ResNet-50's layer3.3 (1024x14x14).
const testLayer = "layer12"

// testLayerShape is testLayer's per-sample shape (docs/LAYERS.md, resnet50).
var testLayerShape = []int64{1024, 14, 14}

// imageExts are the default image extensions of a mount.
var imageExts = map[string]bool{"jpg": true, "jpeg": true, "png": true}

// built holds the featurefs binary built once for all tests.
var built struct {
	once sync.Once
	path string
	err  error
	dir  string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// featurefsBin returns the featurefs binary: $FEATUREFS_BIN, else one built
// from this checkout once per test process.
func featurefsBin(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if p := os.Getenv("FEATUREFS_BIN"); p != "" {
			built.path, built.err = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "featurefs-test-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out := filepath.Join(dir, "featurefs")
		cmd := exec.Command(gobin, "build", "-o", out, "./cmd/featurefs")
		cmd.Dir = testenv.RepoRoot(t)
		if b, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/featurefs: %w\n%s", err, b)
			return
		}
		built.path = out
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// manifest is DIR/manifest.json written by scripts/gen_dataset.py.
type manifest struct {
	Classes []string         `json:"classes"`
	Objects []manifestObject `json:"objects"`
}

// manifestObject is one generated object.
type manifestObject struct {
	Key    string `json:"key"`
	Kind   string `json:"kind"` // image, bad or other
	Split  string `json:"split"`
	Class  string `json:"class"`
	Format string `json:"format"`
	Mode   string `json:"mode"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Bytes  int64  `json:"bytes"`
}

// dataset is a generated image tree on local disk.
type dataset struct {
	Dir string
	manifest
}

// images returns the image objects, optionally only those under prefix.
func (d *dataset) images(prefix string) []manifestObject {
	var out []manifestObject
	for _, o := range d.Objects {
		if o.Kind == "image" && strings.HasPrefix(o.Key, prefix) {
			out = append(out, o)
		}
	}
	return out
}

// bad returns the objects gen_dataset.py made unreadable as images.
func (d *dataset) bad() []manifestObject {
	var out []manifestObject
	for _, o := range d.Objects {
		if o.Kind == "bad" {
			out = append(out, o)
		}
	}
	return out
}

// keys returns every object key of the tree, manifest.json included.
func (d *dataset) keys(t testing.TB) []string {
	t.Helper()
	var keys []string
	err := filepath.WalkDir(d.Dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(d.Dir, p)
		keys = append(keys, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

// genDataset runs scripts/gen_dataset.py into a fresh directory.
func genDataset(t testing.TB, args ...string) *dataset {
	t.Helper()
	py := testenv.RequireTorch(t)
	dir := filepath.Join(t.TempDir(), "data")
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "gen_dataset.py")
	cmd := exec.Command(py, append([]string{script, "--out", dir}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen_dataset.py: %v\n%s", err, b)
	}
	d := &dataset{Dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d.manifest); err != nil {
		t.Fatal(err)
	}
	return d
}

// featureNames maps every image key among keys to its path under a layer
// directory, following README's naming rule ("Paths"): the extension
// becomes .npy, unless another image in the same directory differs only by
// extension, in which case .npy is appended to the whole name. Non-image
// keys are left out.
func featureNames(keys []string) map[string]string {
	stems := map[string]int{}
	isImage := func(k string) (string, bool) {
		ext := strings.TrimPrefix(path.Ext(k), ".")
		return strings.TrimSuffix(k, path.Ext(k)), ext != "" && imageExts[strings.ToLower(ext)]
	}
	for _, k := range keys {
		if stem, ok := isImage(k); ok {
			stems[stem]++
		}
	}
	out := map[string]string{}
	for _, k := range keys {
		stem, ok := isImage(k)
		switch {
		case !ok:
		case stems[stem] > 1:
			out[k] = k + ".npy"
		default:
			out[k] = stem + ".npy"
		}
	}
	return out
}

// mountConfig says what to mount and how.
type mountConfig struct {
	// Source is s3://BUCKET[/PREFIX] or a directory; empty for a mount
	// of feature servers (--remote in Args).
	Source string
	// Env is added to the process's environment (credentials).
	Env []string
	// CacheDir is the feature cache; empty means a fresh directory.
	CacheDir string
	// Args are extra flags.
	Args []string
	// NoModel leaves out --model (a --remote mount takes the servers').
	NoModel bool
	// Model is the ONNX file mounted as modelName; empty means the test
	// model (testenv.Model).
	Model string
	// NoFile, if not 0, is the mount process's descriptor limit
	// (RLIMIT_NOFILE, soft and hard).
	NoFile int
}

// mounted is a running `featurefs mount --foreground`.
type mounted struct {
	Dir      string
	CacheDir string
	Log      string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	unmount  sync.Once
	ready    bool // set once mounted, before any other goroutine reads it
}

// testMount mounts cfg.Source through the kernel with the test model and
// unmounts it when the test ends. It returns once the mount answers.
func testMount(t testing.TB, cfg mountConfig) *mounted {
	t.Helper()
	bin := featurefsBin(t)
	model := cfg.Model
	if model == "" {
		model = testenv.Model(t, modelName)
	}
	ort := testenv.ORTLib(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse: %v (install fuse3; the tests need root and a FUSE-capable kernel)", err)
	}
	work := t.TempDir()
	m := &mounted{Dir: filepath.Join(work, "mnt"), CacheDir: cfg.CacheDir, Log: filepath.Join(work, "featurefs.log"), exited: make(chan struct{})}
	if m.CacheDir == "" {
		m.CacheDir = filepath.Join(work, "cache")
	}
	if err := os.Mkdir(m.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"mount", "--foreground", "--model", modelName + "=" + model,
		"--cache-dir", m.CacheDir, "--ort-lib", ort, "--device", "cpu", "--log-level", "debug"}
	if cfg.NoModel {
		args = append(args[:2], args[4:]...)
	}
	args = append(args, cfg.Args...)
	if cfg.Source != "" { // empty with --remote
		args = append(args, cfg.Source)
	}
	args = append(args, m.Dir)
	logf, err := os.Create(m.Log)
	if err != nil {
		t.Fatal(err)
	}
	m.cmd = commandNoFile(cfg.NoFile, bin, args...)
	m.cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+ort), cfg.Env...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		logf.Close()
		close(m.exited)
	}()
	t.Cleanup(func() {
		m.Unmount(t)
		if t.Failed() {
			t.Logf("featurefs %s log:\n%s", strings.Join(args, " "), tail(m.Log, 6000))
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !isMounted(t, m.Dir) {
		select {
		case <-m.exited:
			t.Fatalf("featurefs mount exited before mounting (%v):\n%s", m.waitErr, tail(m.Log, 6000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("featurefs mount: %s not mounted after 3m:\n%s", m.Dir, tail(m.Log, 6000))
		}
	}
	m.ready = true
	return m
}

// commandNoFile is exec.Command(bin, args...) run with its descriptor
// limit (soft and hard) set to nofile by the shell's ulimit, which then
// execs bin (same process id); 0: inherited.
func commandNoFile(nofile int, bin string, args ...string) *exec.Cmd {
	if nofile <= 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), bin}, args...)...)
}

// PID is the mount process's id.
func (m *mounted) PID() int { return m.cmd.Process.Pid }

// Path joins elems under the mount point.
func (m *mounted) Path(elems ...string) string {
	return filepath.Join(append([]string{m.Dir}, elems...)...)
}

// Layer returns the directory of the test model's layer.
func (m *mounted) Layer(layer string) string { return m.Path("features", modelName, layer) }

// Unmount unmounts with umount(8), as a user would, and waits for the
// process to exit; it escalates to SIGTERM, SIGKILL and a lazy unmount.
func (m *mounted) Unmount(t testing.TB) {
	t.Helper()
	m.unmount.Do(func() {
		select {
		case <-m.exited:
			if !m.ready {
				return // testMount already reported why it never mounted.
			}
		default:
		}
		if b, err := exec.Command("umount", m.Dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", m.Dir, err, b)
			m.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("featurefs mount did not exit within 30s of umount; killing it")
			m.cmd.Process.Kill()
			<-m.exited
		}
		if isMounted(t, m.Dir) {
			exec.Command("umount", "-l", m.Dir).Run()
			t.Errorf("%s still mounted after the process exited", m.Dir)
		}
		var ee *exec.ExitError
		if m.waitErr != nil && !errors.As(m.waitErr, &ee) {
			t.Errorf("featurefs mount: %v", m.waitErr)
		} else if ee != nil && ee.ExitCode() != 0 {
			t.Errorf("featurefs mount exited with %v after umount:\n%s", m.waitErr, tail(m.Log, 4000))
		}
	})
}

// isMounted reports whether dir is a FUSE mount point.
func isMounted(t testing.TB, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superopts
		fields := strings.Fields(s.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "fuse") {
				return true
			}
		}
	}
	return false
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tail returns the last n bytes of a file.
func tail(p string, n int) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// minioBucket starts MinIO, creates bucket and uploads every file of dir
// under prefix. It returns the server and the environment a mount needs.
func minioBucket(t testing.TB, bucket, prefix, dir string) (*testenv.MinIO, []string) {
	t.Helper()
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, bucket)
	if dir != "" {
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m.Put(t, bucket, prefix+filepath.ToSlash(rel), b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return m, minioEnv(m)
}

// minioEnv is the environment that gives featurefs MinIO's credentials.
func minioEnv(m *testenv.MinIO) []string {
	return append(m.Env(), "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent")
}

// npyFile is a decoded .npy file.
type npyFile struct {
	Shape []int64
	DType extractor.DType
	Data  []float32
	// Raw is the data section: the array's bytes as np.load sees them.
	Raw []byte
}

// parseNPY decodes b with api.DecodeNPY and also returns the raw data
// section, located from the header length fields of format 1.0 / 2.0.
func parseNPY(b []byte) (npyFile, error) {
	shape, dt, data, err := api.DecodeNPY(b)
	if err != nil {
		return npyFile{}, err
	}
	if len(b) < 12 || string(b[:6]) != "\x93NUMPY" {
		return npyFile{}, fmt.Errorf("no .npy magic")
	}
	var off int
	switch b[6] {
	case 1:
		off = 10 + int(binary.LittleEndian.Uint16(b[8:10]))
	case 2, 3:
		off = 12 + int(binary.LittleEndian.Uint32(b[8:12]))
	default:
		return npyFile{}, fmt.Errorf(".npy version %d", b[6])
	}
	if off > len(b) {
		return npyFile{}, fmt.Errorf(".npy header length %d past the end (%d bytes)", off, len(b))
	}
	return npyFile{Shape: shape, DType: dt, Data: data, Raw: b[off:]}, nil
}

// readNPY reads and decodes a .npy file.
func readNPY(t testing.TB, p string) npyFile {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	f, err := parseNPY(b)
	if err != nil {
		t.Fatalf("decode %s: %v", p, err)
	}
	return f
}

// closeEnough compares two tensors with a tolerance for float reordering
// between batch sizes: |a-b| <= 1e-3 + 1e-3*|b| elementwise. It returns the
// largest absolute difference.
func closeEnough(a, b []float32) (float64, bool) {
	if len(a) != len(b) {
		return math.Inf(1), false
	}
	worst, ok := 0.0, true
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.NaN(), false
		}
		worst = math.Max(worst, d)
		if d > 1e-3+1e-3*math.Abs(float64(b[i])) {
			ok = false
		}
	}
	return worst, ok
}

// extractRef runs `featurefs extract` on local image files and returns each
// one's decoded output, keyed like images. It is the reference the mount's
// features are compared with.
func extractRef(t testing.TB, layer string, images map[string]string) map[string]npyFile {
	t.Helper()
	bin := featurefsBin(t)
	model := testenv.Model(t, modelName)
	in, out := t.TempDir(), t.TempDir()
	names := make([]string, 0, len(images))
	for name := range images {
		names = append(names, name)
	}
	sort.Strings(names)
	// Copy each image under a unique base name, so outputs cannot collide.
	args := []string{"extract", "--model", model, "--layer", layer, "-o", out}
	flat := map[string]string{}
	for i, name := range names {
		ext := path.Ext(images[name])
		base := fmt.Sprintf("img%04d", i)
		b, err := os.ReadFile(images[name])
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(in, base+ext)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		flat[name] = base
		args = append(args, p)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("featurefs %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	res := map[string]npyFile{}
	for name, base := range flat {
		ext := path.Ext(images[name])
		var found string
		for _, cand := range []string{base + ".npy", base + ext + ".npy"} {
			if _, err := os.Stat(filepath.Join(out, cand)); err == nil {
				found = cand
				break
			}
		}
		if found == "" {
			entries, _ := os.ReadDir(out)
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			t.Fatalf("featurefs extract wrote no %s.npy for %s; -o dir holds %v", base, images[name], got)
		}
		res[name] = readNPY(t, filepath.Join(out, found))
	}
	return res
}

// rssBytes returns a process's resident set size from /proc/PID/status.
func rssBytes(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n * 1024
				}
			}
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// mountStats reads MOUNT/.featurefs/stats.
func mountStats(t testing.TB, m *mounted) map[string]any {
	t.Helper()
	b, err := os.ReadFile(m.Path(".featurefs", "stats"))
	if err != nil {
		t.Fatalf("read stats: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(b), &v); err != nil {
		t.Fatalf("stats is not JSON: %v\n%s", err, b)
	}
	return v
}

// fsExtractions is the stats file's fs.extractions of m: the features it
// had the extractor compute.
func fsExtractions(t testing.TB, m *mounted) float64 {
	t.Helper()
	fsStats, _ := mountStats(t, m)["fs"].(map[string]any)
	n, ok := fsStats["extractions"].(float64)
	if !ok {
		t.Fatalf("no fs.extractions in the stats: %v", fsStats)
	}
	return n
}

// waitCacheWrites waits until the mount has no feature queued for its
// cache write (fs.cache_write_queued is 0: cache writes happen behind the
// reads), so that the cache's figures are final for what was read.
func waitCacheWrites(t testing.TB, m *mounted) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		time.Sleep(20 * time.Millisecond) // past a kernel tick (fsStat)
		fsStats, _ := mountStats(t, m)["fs"].(map[string]any)
		if q, ok := fsStats["cache_write_queued"].(float64); !ok || q == 0 {
			if !ok {
				t.Fatalf("stats file: no fs.cache_write_queued")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache writes still queued after 1m: %v", fsStats)
		}
	}
}

// mib formats bytes as MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
