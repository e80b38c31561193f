package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestCacheCommandsAfterUmount: featurefs cache stats of a live mount's
// cache answers (exit 0) from its files without the lock, naming the
// mount's pid; `umount MNT && featurefs cache clear` works although umount
// returns before the mount's process has closed its cache: clear waits for
// it (one line naming its pid when it does) and clears every entry; stats
// then reads the empty cache (issue 36, item 14). On ca82ffd both failed
// with "directory locked ... in use by another process (pid N)".
func TestCacheCommandsAfterUmount(t *testing.T) {
	model := filepath.Join(t.TempDir(), "model.onnx")
	replaceFile(t, testenv.OddModel(t, "tiny"), model, true)
	src := t.TempDir()
	const images = 24
	for i := range images {
		writeJPEG(t, filepath.Join(src, "cls", fmt.Sprintf("%02d.jpg", i)), 320, 240, i)
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	m := testMount(t, mountConfig{Source: src, Model: model, CacheDir: cacheDir, Args: []string{"--prefetch", "off", "--device", "cpu"}})
	layers, err := os.ReadDir(m.Path("features", modelName))
	if err != nil || len(layers) == 0 {
		t.Fatalf("layers: %v, %v", layers, err)
	}
	for _, l := range layers {
		if !l.IsDir() {
			continue // the layers file
		}
		for i := range images {
			if _, err := os.ReadFile(filepath.Join(m.Path("features", modelName, l.Name()), "cls", fmt.Sprintf("%02d.npy", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	pid := m.PID()

	r := runCLI(t, time.Minute, nil, "cache", "stats", "--cache-dir", cacheDir)
	if r.Code != 0 || !strings.Contains(r.Stdout, "in use") || !strings.Contains(r.Stdout, "pid "+strconv.Itoa(pid)) {
		t.Errorf("cache stats of a live mount's cache: want exit 0 naming pid %d\n%s", pid, r)
	}
	r = runCLI(t, time.Minute, nil, "cache", "stats", "--json", "--cache-dir", cacheDir)
	var live struct {
		PID       int   `json:"in_use_by_pid"`
		DiskBytes int64 `json:"disk_bytes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &live); r.Code != 0 || err != nil || live.PID != pid || live.DiskBytes <= 0 {
		t.Errorf("cache stats --json of a live mount's cache: %+v, %v\n%s", live, err, r)
	}

	// umount, then at once cache clear.
	m.unmount.Do(func() {}) // unmounted here, not by the test's cleanup
	if b, err := exec.Command("umount", m.Dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, b)
	}
	start := time.Now()
	r = runCLI(t, time.Minute, nil, "cache", "clear", "--cache-dir", cacheDir)
	took := time.Since(start)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
		t.Fatal("the mount did not exit within 30 s of umount")
	}
	t.Logf("cache clear right after umount: %v\n%s", took, r)
	cleared := regexp.MustCompile(`cleared (\d+) entries`).FindStringSubmatch(r.Stdout)
	if r.Code != 0 || cleared == nil || cleared[1] == "0" {
		t.Fatalf("umount && cache clear: want exit 0 and the entries cleared\n%s", r)
	}
	if r.Stderr != "" && (len(lines(r.Stderr)) != 1 || !strings.Contains(r.Stderr, "waiting") || !strings.Contains(r.Stderr, strconv.Itoa(pid))) {
		t.Errorf("cache clear's stderr: want nothing or one line saying it waits for pid %d:\n%s", pid, r.Stderr)
	}
	r = runCLI(t, time.Minute, nil, "cache", "stats", "--cache-dir", cacheDir)
	if r.Code != 0 || !regexp.MustCompile(`(?m)^entries +0$`).MatchString(r.Stdout) {
		t.Errorf("cache stats after the clear:\n%s", r)
	}

	// Mounted again and filled: umount, then at once cache stats gives the
	// whole figures (it waits for the closing mount as clear does).
	m = testMount(t, mountConfig{Source: src, Model: model, CacheDir: cacheDir, Args: []string{"--prefetch", "off", "--device", "cpu"}})
	for i := range images {
		if _, err := os.ReadFile(filepath.Join(m.Path("features", modelName, "layer0"), "cls", fmt.Sprintf("%02d.npy", i))); err != nil {
			t.Fatal(err)
		}
	}
	m.unmount.Do(func() {})
	if b, err := exec.Command("umount", m.Dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, b)
	}
	r = runCLI(t, time.Minute, nil, "cache", "stats", "--cache-dir", cacheDir)
	<-m.exited
	if e := regexp.MustCompile(`(?m)^entries +(\d+)$`).FindStringSubmatch(r.Stdout); r.Code != 0 || e == nil || e[1] != strconv.Itoa(images) {
		t.Errorf("umount && cache stats: want exit 0 and %d entries\n%s", images, r)
	}
}
