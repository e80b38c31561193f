package test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestStoreOnlyDamagedObjectLogsWhatHappens: a damaged object in the
// feature store (its bytes changed, its size kept, so only the checksum
// tells) is logged by a --feature-store-only mount as making the read fail
// (it used to say "computing it again", which that mode never does), and
// the read fails with EIO; a mount that may compute logs that it computes
// the feature again, and the read succeeds. Directory feature store,
// kernel mounts.
func TestStoreOnlyDamagedObjectLogsWhatHappens(t *testing.T) {
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "d", "good.jpg"), 64, 48, 1)
	writeJPEG(t, filepath.Join(src, "d", "bad.jpg"), 64, 48, 2)
	store := filepath.Join(work, "store")
	r := runCLI(t, 5*time.Minute, nil, "warm", "--source", src, "--model", modelName+"="+testenv.Model(t, modelName),
		"--layer", "layer0", "--cache-dir", filepath.Join(work, "warm-cache"), "--device", "cpu",
		"--feature-store", store, "--feature-store-compression", "off")
	if r.Code != 0 || !strings.Contains(r.Stdout, "2 written") {
		t.Fatalf("warm --feature-store: %s", r)
	}
	var damaged string
	filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, filepath.Join("d", "bad.npy")) {
			damaged = p
		}
		return nil
	})
	if damaged == "" {
		t.Fatalf("no d/bad.npy under the feature store %s", store)
	}
	b, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+64; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name      string
		args      []string
		readFails bool
		want      string
	}{
		{"store-only", []string{"--feature-store-only"}, true, "feature store object unusable; the read fails (--feature-store-only computes nothing)"},
		{"computing", nil, false, "feature store object unusable; computing it again"},
	} {
		m := testMount(t, mountConfig{Source: src, Args: append([]string{"--feature-store", store, "--prefetch", "off"}, c.args...)})
		if _, err := os.ReadFile(filepath.Join(m.Layer("layer0"), "d", "good.npy")); err != nil {
			t.Errorf("%s: the undamaged feature: %v", c.name, err)
		}
		_, err := os.ReadFile(filepath.Join(m.Layer("layer0"), "d", "bad.npy"))
		if c.readFails != (err != nil) {
			t.Errorf("%s: reading the damaged feature: %v, want failing %v", c.name, err, c.readFails)
		}
		m.Unmount(t)
		logged := linesWith(tail(m.Log, 1<<20), "feature store", "d/bad.jpg")
		if warned := linesWith(strings.Join(logged, "\n"), "level=WARN"); len(warned) != 1 || !strings.Contains(warned[0], c.want) {
			t.Errorf("%s: log lines about d/bad.jpg's store object: %q, want one WARN saying %q", c.name, logged, c.want)
		}
		if text := strings.Join(logged, "\n"); c.readFails && (strings.Contains(text, "computing") || strings.Contains(text, "not in the feature store")) {
			t.Errorf("%s: the log says it computes, or that the store lacks the object: %q", c.name, logged)
		}
	}
}
