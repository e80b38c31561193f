package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/mountopts"
)

// plantVictim makes a file outside the test's output directory for a
// planted link to point at, and returns a check that it is unchanged.
func plantVictim(t *testing.T) (string, func()) {
	t.Helper()
	v := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(v, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return v, func() {
		t.Helper()
		if b, err := os.ReadFile(v); err != nil || string(b) != "precious\n" {
			t.Errorf("victim %s written through a link: %q, %v", v, b, err)
		}
		if ents, _ := os.ReadDir(filepath.Dir(v)); len(ents) != 1 {
			t.Errorf("%d files beside the victim, want it alone", len(ents))
		}
	}
}

// TestLogFileSymlinkRefused: a --log-file that is a symbolic link is
// refused (exit 2, one line naming it) instead of appended through (issue
// 36, item 3); an existing regular log is still appended to.
func TestLogFileSymlinkRefused(t *testing.T) {
	v, check := plantVictim(t)
	o := mountopts.Default()
	o.LogFile = filepath.Join(t.TempDir(), "featurefs.log")
	if err := os.Symlink(v, o.LogFile); err != nil {
		t.Fatal(err)
	}
	log, c, err := newLogger(o)
	if err == nil {
		log.Error("written through the link")
		c.Close()
		check()
		t.Fatal("newLogger accepted a --log-file that is a symbolic link")
	}
	if exitCode(err) != exitUsage || !errors.Is(err, safefile.ErrSymlink) || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q (exit %d): want one line, exit %d, naming the link", err, exitCode(err), exitUsage)
	}
	check()
	o.LogFile = filepath.Join(t.TempDir(), "real.log")
	if err := os.WriteFile(o.LogFile, []byte("before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log, c, err = newLogger(o)
	if err != nil {
		t.Fatal(err)
	}
	log.Error("after")
	c.Close()
	if b, _ := os.ReadFile(o.LogFile); !strings.HasPrefix(string(b), "before\n") || !strings.Contains(string(b), "after") {
		t.Errorf("log not appended to: %q", b)
	}
}

// TestExtractOutputsDoNotFollowLinks: extract -o writes nothing outside
// its directory: an output path that is a link, or under a linked
// directory, fails that image alone with one line, and the link's target
// is unchanged (issue 36, item 3). On ca82ffd the image under the linked
// directory was written beside the victim.
func TestExtractOutputsDoNotFollowLinks(t *testing.T) {
	v, check := plantVictim(t)
	out := t.TempDir()
	if err := os.Symlink(v, filepath.Join(out, "b.npy")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(v), filepath.Join(out, "sub")); err != nil {
		t.Fatal(err)
	}
	images := []string{"a.jpg", "b.jpg", "sub/c.jpg"}
	names := []string{"a.npy", "b.npy", "sub/c.npy"}
	pf, err := os.Create(filepath.Join(t.TempDir(), "progress"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	res := extractAll(context.Background(), images, names, out, newProgressFor(pf, time.Hour, "extract"),
		func(_ context.Context, img string) ([]byte, error) { return []byte(img), nil })
	check()
	if res.failed != 2 || len(res.failures) != 2 {
		t.Fatalf("%d failed (%v), want b.jpg and sub/c.jpg", res.failed, res.failures)
	}
	for _, f := range res.failures {
		if strings.Contains(f.reason, "\n") || f.key == "a.jpg" {
			t.Errorf("failure %s: %q", f.key, f.reason)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "a.npy")); err != nil || string(b) != "a.jpg" {
		t.Errorf("a.npy: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(out, "b.npy")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("b.npy: %v, %v; want the link left as it was", fi, err)
	}
}
