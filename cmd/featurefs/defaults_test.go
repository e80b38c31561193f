package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/mountopts"
)

// One default per setting (issue 14, item 4): the defaults extractor/spec
// owns are the ones `featurefs mount -h` and `featurefs serve -h` show, the
// ones an empty config file leaves, and the ones README's Mount flags table
// states.
func TestDefaultsAgree(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("FEATUREFS_ORT_LIB", "")
	want := map[string]string{
		"image-extensions": strings.Join(spec.DefaultImageExtensions(), ","),
		"max-pixels":       strconv.FormatInt(spec.DefaultMaxPixels, 10),
		"cache-dir":        spec.DefaultCacheDir(),
		"ort-lib":          spec.DefaultORTLib(),
	}
	if !strings.HasPrefix(spec.DefaultCacheDir(), filepath.Join(home, ".cache", "featurefs")) {
		t.Fatalf("spec.DefaultCacheDir() = %s, not under $HOME/.cache/featurefs", spec.DefaultCacheDir())
	}

	o, sv := mountopts.Default(), defaultServe()
	for name, fl := range map[string]*flag.FlagSet{"mount": mountFlags(&o), "serve": serveFlags(&sv)} {
		for flagName, def := range want {
			if name == "serve" && flagName == "cache-dir" {
				// Not a mount's, so that serve and mount --remote both
				// start with their defaults on one host (issue 24).
				def = spec.DefaultServeCacheDir()
				if def == spec.DefaultCacheDir() {
					t.Errorf("serve's default cache directory is mount's, %s", def)
				}
			}
			f := fl.Lookup(flagName)
			if f == nil {
				t.Errorf("featurefs %s has no --%s", name, flagName)
				continue
			}
			if f.DefValue != def {
				t.Errorf("featurefs %s --%s default %q, want %q (extractor/spec)", name, flagName, f.DefValue, def)
			}
		}
	}

	// An empty config file changes none of them.
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := mountopts.Default()
	if err := f.LoadFile(cfg); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.ImageExtensions, ","); got != want["image-extensions"] || f.MaxPixels != spec.DefaultMaxPixels ||
		f.CacheDir != spec.DefaultCacheDir() || f.ORTLib != spec.DefaultORTLib() || mountopts.DefaultLogFile() != spec.DefaultLogFile() {
		t.Errorf("after an empty config file: extensions %s, max pixels %d, cache %s, ort %s, log %s", got, f.MaxPixels, f.CacheDir, f.ORTLib, mountopts.DefaultLogFile())
	}

	// README's table, with $HOME written ~.
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tilde := func(p string) string { return "~" + strings.TrimPrefix(p, home) }
	inReadme := map[string]string{
		"image-extensions": want["image-extensions"],
		"max-pixels":       want["max-pixels"],
		"cache-dir":        tilde(want["cache-dir"]),
		"ort-lib":          tilde(want["ort-lib"]),
		"log-file":         tilde(spec.DefaultLogFile()) + " in the background",
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		name := strings.TrimPrefix(strings.Trim(strings.TrimSpace(cells[1]), "`"), "--")
		name, _, _ = strings.Cut(name, " ")
		if _, seen := rows[name]; !seen {
			rows[name] = strings.ReplaceAll(strings.TrimSpace(cells[2]), "`", "")
		}
	}
	for name, def := range inReadme {
		if rows[name] != def {
			t.Errorf("README.md: --%s default %q, want %q", name, rows[name], def)
		}
	}
}
