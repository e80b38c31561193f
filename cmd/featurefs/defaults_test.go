package main

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

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

// Every option of the table (issue 26, item 4): each command that takes it
// has its flag, with the table's default (Default) as -h's; an empty
// config file leaves every option at its default; and README's Mount
// flags table states the table's default of every mount option.
func TestEveryDefaultAgrees(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("FEATUREFS_ORT_LIB", "")
	def := mountopts.Default()
	// shown renders opt's default as the flag package does.
	shown := func(opt *mountopts.Option, c mountopts.Command) string {
		d := mountopts.Default()
		if c == mountopts.Serve {
			d = defaultServe()
		}
		switch p := opt.Target(&d).(type) {
		case *string:
			return *p
		case *bool:
			return strconv.FormatBool(*p)
		case *int:
			return strconv.Itoa(*p)
		case *int64:
			return strconv.FormatInt(*p, 10)
		case *time.Duration:
			return p.String()
		case mountopts.Value:
			return p.String()
		}
		t.Fatalf("--%s: target %T", opt.Name, opt.Target(&d))
		return ""
	}
	var w warmArgs
	sets := map[mountopts.Command]*flag.FlagSet{}
	o, so, wo := mountopts.Default(), defaultServe(), mountopts.Default()
	sets[mountopts.Mount], sets[mountopts.Serve], sets[mountopts.Warm] = mountFlags(&o), serveFlags(&so), warmFlags(&wo, &w)
	for _, c := range []mountopts.Command{mountopts.Extract, mountopts.Bench, mountopts.Layers, mountopts.Doctor} {
		sets[c] = flag.NewFlagSet("x", flag.ContinueOnError)
		extractorFlags(sets[c], c)
	}
	count := 0
	for c, fl := range sets {
		for _, opt := range mountopts.For(c) {
			count++
			f := fl.Lookup(opt.Name)
			if f == nil {
				t.Errorf("command %b has no --%s", c, opt.Name)
				continue
			}
			if want := shown(opt, c); f.DefValue != want {
				t.Errorf("command %b --%s default %q, the table's %q", c, opt.Name, f.DefValue, want)
			}
			if f.Usage != opt.HelpIn(c) {
				t.Errorf("command %b --%s usage %q, the table's %q", c, opt.Name, f.Usage, opt.HelpIn(c))
			}
		}
	}
	if count < len(mountopts.Table()) {
		t.Errorf("%d flags checked, fewer than the table's %d options", count, len(mountopts.Table()))
	}

	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := mountopts.Default()
	if err := f.LoadFile(cfg); err != nil {
		t.Fatal(err)
	}
	f.ConfigFile = ""
	if !reflect.DeepEqual(f, def) {
		t.Errorf("an empty config file changed the defaults:\n  %+v\n  %+v", f, def)
	}

	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
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
	for _, opt := range mountopts.For(mountopts.Mount) {
		want := shown(opt, mountopts.Mount)
		if want == "" || want == "false" || want == "0" || want == "0s" {
			// -h leaves zero defaults out, and so does README, but for
			// what the help says a zero stands for: "(default AWS)".
			want = ""
			if m := helpDefault.FindStringSubmatch(opt.Help); m != nil {
				want = m[1]
			}
		}
		want = strings.ReplaceAll(want, home, "~")
		got, ok := rows[opt.Name]
		if !ok {
			t.Errorf("README.md's Mount flags table has no --%s", opt.Name)
		} else if got != want {
			t.Errorf("README.md: --%s default %q, the table's %q", opt.Name, got, want)
		}
	}
}
