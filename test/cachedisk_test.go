package test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// cacheStatsJSON runs featurefs cache stats --json on dir.
func cacheStatsJSON(t *testing.T, dir string) (map[string]any, cliResult) {
	t.Helper()
	r := runCLI(t, 2*time.Minute, nil, "cache", "stats", "--cache-dir", dir, "--json")
	if r.Code != 0 {
		t.Fatalf("featurefs cache stats on %s: %s", dir, r)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("cache stats --json: %v\n%s", err, r)
	}
	return v, r
}

// checkFeatures reads every image's feature of layer through m and compares
// it with featurefs extract's.
func checkFeatures(t *testing.T, m *mounted, layer string, names map[string]string, ref map[string]npyFile) {
	t.Helper()
	for key, want := range ref {
		p := filepath.Join(m.Path("features", modelName, layer), filepath.FromSlash(names[key]))
		got := readNPY(t, p)
		if d, ok := closeEnough(got.Data, want.Data); !ok {
			t.Errorf("%s: differs from featurefs extract by %g", names[key], d)
		}
	}
}

// TestCacheFilesystemFull: a 32 MiB tmpfs cache directory under the default
// 10 GiB --cache-size, filled by featurefs warm through a kernel mount of
// 40 images' layer0 (3.2 MB each, 1.2 MB compressed). On 8f60f93 the mount died with SIGBUS in
// badger's valueLog.write. Now: one warning at start with the budget, the
// free space and the effective bound; the warm completes with every feature
// served, one WARN that the cache is full on disk; the cached features
// survive: cache stats sees them, a remount serves them without extracting
// and every feature equals featurefs extract's; with the filesystem then
// filled to its last byte by another file, cache stats, a remount (read-only
// cache) and cache clear still work.
func TestCacheFilesystemFull(t *testing.T) {
	d := genDataset(t, "--classes", "4", "--train", "8", "--val", "2", "--formats", "jpg")
	images := d.images("")
	names := featureNames(d.keys(t))
	local := map[string]string{}
	for _, o := range images {
		local[o.Key] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
	}
	ref := extractRef(t, "layer0", local)
	fsDir := testenv.MountTmpfs(t, 32<<20)
	cacheDir := filepath.Join(fsDir, "cache")
	args := []string{"--prefetch", "off"}

	m := testMount(t, mountConfig{Source: d.Dir, CacheDir: cacheDir, Args: args})
	warnStart := logLines(t, m.Log, "larger than the free space")
	if len(warnStart) != 1 || !strings.Contains(warnStart[0], "free_bytes=") || !strings.Contains(warnStart[0], "effective_bound_bytes=") {
		t.Errorf("want one warning at start with the free space and the effective bound, got %q", warnStart)
	}
	out, code := runWarm(t, "--jobs", "8", m.Path("features", modelName, "layer0"))
	t.Logf("featurefs warm:\n%s", out)
	if code != 0 {
		t.Fatalf("warm on a filling cache filesystem exited %d, want 0 (features are served when they cannot be cached)", code)
	}
	st := mountStats(t, m)
	entries := statsField(t, st, "cache.entries")
	refused := statsField(t, st, "cache.disk_full_refusals")
	t.Logf("cached %d of %d features, %d cache writes refused, %s free on the filesystem, reserve %s",
		entries, len(images), refused, mib(statsField(t, st, "cache.disk_free_bytes")), mib(statsField(t, st, "cache.disk_reserve_bytes")))
	if entries < 5 || entries >= int64(len(images)) || refused == 0 {
		t.Fatalf("cached %d of %d features with %d writes refused: the filesystem did not fill as intended", entries, len(images), refused)
	}
	if full := logLines(t, m.Log, "level=WARN", "cache filesystem full"); len(full) != 1 || !strings.Contains(full[0], "budget is larger than the free space") {
		t.Errorf("want one WARN that the cache filesystem is full, got %q", full)
	}
	checkFeatures(t, m, "layer0", names, ref)
	m.Unmount(t)

	cs, r := cacheStatsJSON(t, cacheDir)
	t.Logf("cache stats on the full filesystem:\n%s", r.Stdout)
	if got := int64(cs["entries"].(float64)); got != entries {
		t.Errorf("cache stats: %d entries, want %d", got, entries)
	}

	m2 := testMount(t, mountConfig{Source: d.Dir, CacheDir: cacheDir, Args: args})
	checkFeatures(t, m2, "layer0", names, ref)
	if n := extractionCount(t, mountStats(t, m2)); n != int64(len(images))-entries {
		t.Errorf("remount extracted %d features, want %d (all but the %d cached)", n, int64(len(images))-entries, entries)
	}
	m2.Unmount(t)

	// Another file takes the last byte of the filesystem.
	testenv.FillFS(t, fsDir)
	r = runCLI(t, 2*time.Minute, nil, "cache", "stats", "--cache-dir", cacheDir)
	t.Logf("cache stats at 0 bytes free: %s", r)
	if r.Code != 0 || !strings.Contains(r.Stdout, "read-only") || !strings.Contains(r.Stdout, fmt.Sprintf("entries          %d", entries)) {
		t.Errorf("cache stats at 0 bytes free: want exit 0, %d entries, read-only: %s", entries, r)
	}
	m3 := testMount(t, mountConfig{Source: d.Dir, CacheDir: cacheDir, Args: args})
	checkFeatures(t, m3, "layer0", names, ref)
	if n := extractionCount(t, mountStats(t, m3)); n != int64(len(images))-entries {
		t.Errorf("remount at 0 bytes free extracted %d features, want %d", n, int64(len(images))-entries)
	}
	m3.Unmount(t)
	r = runCLI(t, 2*time.Minute, nil, "cache", "clear", "--cache-dir", cacheDir)
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("cleared %d entries", entries)) {
		t.Errorf("cache clear at 0 bytes free: want exit 0 and %d entries cleared: %s", entries, r)
	}
	if cs, _ := cacheStatsJSON(t, cacheDir); cs["entries"].(float64) != 0 {
		t.Errorf("after cache clear: %v entries", cs["entries"])
	}
}

// TestCacheFilesPrivate: after a mount reads features (uncompressed cache),
// the cache directory is 0700 and no file in it is open to the group or
// others, and user nobody cannot read the value log. On 8f60f93 the
// directory was 0755 and the value log 0644: nobody read the features.
func TestCacheFilesPrivate(t *testing.T) {
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Fatalf("runuser (util-linux) is needed to read as user nobody: %v", err)
	}
	parent := t.TempDir()
	for _, p := range []string{filepath.Dir(parent), parent} { // TempDir makes them 0700
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	control := filepath.Join(parent, "control")
	if err := os.WriteFile(control, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("runuser", "-u", "nobody", "--", "cat", control).CombinedOutput(); err != nil {
		t.Fatalf("nobody cannot read a 0644 file beside the cache, so the test would prove nothing: %v: %s", err, out)
	}
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "1")
	names := featureNames(d.keys(t))
	cacheDir := filepath.Join(parent, "cache")
	m := testMount(t, mountConfig{Source: d.Dir, CacheDir: cacheDir, Args: []string{"--prefetch", "off", "--cache-compression", "off"}})
	for _, o := range d.images("") {
		if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[o.Key]))); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		var vlogs []string
		err := filepath.WalkDir(cacheDir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := e.Info()
			if err != nil {
				return err
			}
			switch {
			case e.IsDir() && info.Mode().Perm() != 0o700:
				t.Errorf("%s: directory %s is %v, want 0700", when, p, info.Mode().Perm())
			case !e.IsDir() && info.Mode().Perm()&0o077 != 0:
				t.Errorf("%s: %s is %v: open to the group or others", when, p, info.Mode().Perm())
			}
			// The value log, and the feature files large values go to
			// (cache/files.go).
			if strings.HasSuffix(p, ".vlog") && info.Size() > 0 ||
				!e.IsDir() && filepath.Base(filepath.Dir(filepath.Dir(p))) == "files" {
				vlogs = append(vlogs, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(vlogs) == 0 {
			t.Fatalf("%s: no value log or feature file in %s", when, cacheDir)
		}
		for _, v := range vlogs {
			if out, err := exec.Command("runuser", "-u", "nobody", "--", "cat", v).Output(); err == nil {
				t.Errorf("%s: user nobody read %d bytes of %s", when, len(out), v)
			}
		}
	}
	time.Sleep(1500 * time.Millisecond) // the cache's cleaner has run
	check("mounted")
	m.Unmount(t)
	check("unmounted")
}

// TestCacheDirRemovedWhileMounted: deleting the cache directory under a
// mount gives one WARN; features cached before and computed after are all
// served (equal to featurefs extract's); the unmount exits 0 at once, with
// no "error flushing memtable ... retrying" (on 8f60f93: no warning, and at
// unmount Badger retried its flush every second, forever).
func TestCacheDirRemovedWhileMounted(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "1")
	images := d.images("")
	names := featureNames(d.keys(t))
	local := map[string]string{}
	for _, o := range images {
		local[o.Key] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
	}
	ref := extractRef(t, testLayer, local)
	cacheDir := filepath.Join(t.TempDir(), "cache")
	m := testMount(t, mountConfig{Source: d.Dir, CacheDir: cacheDir, Args: []string{"--prefetch", "off"}})
	first := map[string]npyFile{}
	for _, o := range images[:len(images)/2] {
		first[o.Key] = ref[o.Key]
	}
	checkFeatures(t, m, testLayer, names, first)
	if err := os.RemoveAll(cacheDir); err != nil {
		t.Fatal(err)
	}
	checkFeatures(t, m, testLayer, names, ref)
	time.Sleep(1500 * time.Millisecond) // the cache's cleaner has looked
	if c, _ := mountStats(t, m)["cache"].(map[string]any); c["dir_removed"] != true {
		t.Errorf("stats: cache.dir_removed is not true: %v", c)
	}
	t0 := time.Now()
	m.Unmount(t) // fails the test unless the mount exits 0 within 30 s
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("unmount took %v", took)
	}
	if got := logLines(t, m.Log, "level=WARN", "removed while in use"); len(got) != 1 {
		t.Errorf("want one WARN that the cache directory was removed, got %q", got)
	}
	if got := logLines(t, m.Log, "flushing memtable"); len(got) != 0 {
		t.Errorf("Badger retried its flush: %q", got)
	}
}
