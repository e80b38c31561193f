package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestWarmPredictionsWritesNoLink: the resume rewrite of warm
// --predictions OUT does not follow a link planted at OUT.tmp (it writes a
// temporary file of its own and renames it): the link's target keeps its
// bytes and OUT stays a regular file with the predictions; an OUT that is
// itself a link is refused with one line, exit 2 (issue 36, item 3). On
// ca82ffd the rerun wrote the prediction lines into the victim and left
// OUT a link to it.
func TestWarmPredictionsWritesNoLink(t *testing.T) {
	model := testenv.OddModel(t, "tiny")
	src := t.TempDir()
	for i := range 3 {
		writeJPEG(t, filepath.Join(src, "cls", fmt.Sprintf("%d.jpg", i)), 64, 48, i)
	}
	work := t.TempDir()
	out := filepath.Join(work, "p.jsonl")
	warm := func() cliResult {
		return runCLI(t, 3*time.Minute, nil, "warm", "--source", src, "--model", "m="+model, "--device", "cpu",
			"--cache-dir", filepath.Join(work, "cache"), "--predictions", out, "cls/")
	}
	if r := warm(); r.Code != 0 {
		t.Fatalf("first warm --predictions:\n%s", r)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// An error line: the rerun drops it, rewriting OUT.
	fmt.Fprintln(f, `{"key":"cls/9.jpg","error":"bad image: test"}`)
	f.Close()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkVictim := func() {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
			t.Errorf("victim written through a link: %q, %v", b, err)
		}
	}
	if err := os.Symlink(victim, out+".tmp"); err != nil {
		t.Fatal(err)
	}
	r := warm()
	checkVictim()
	fi, err := os.Lstat(out)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("OUT after the rerun: %v, %v; want a regular file\n%s", fi, err, r)
	}
	b, _ := os.ReadFile(out)
	if r.Code != 0 || len(lines(string(b))) != 3 || strings.Contains(string(b), `"error"`) {
		t.Errorf("rerun: want exit 0 and OUT with the 3 predictions; OUT:\n%s\n%s", b, r)
	}

	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, out); err != nil {
		t.Fatal(err)
	}
	r = warm()
	checkVictim()
	if r.Code != 2 || len(lines(r.Stderr)) != 1 || !strings.Contains(r.Stderr, "is a symbolic link") || !strings.Contains(r.Stderr, out) {
		t.Errorf("OUT a link: want exit 2 and one line naming it a symbolic link, got\n%s", r)
	}
}

// TestBenchProfileWritesNoLink: bench --cpuprofile FILE refuses a FILE
// that is a symbolic link (exit 2, one line) and leaves its target alone,
// and writes a new FILE through a temporary file renamed into place
// (issue 36, item 3). On ca82ffd os.Create truncated the link's target
// and wrote the profile into it.
func TestBenchProfileWritesNoLink(t *testing.T) {
	dir := t.TempDir()
	writeJPEG(t, filepath.Join(dir, "0.jpg"), 64, 48, 0)
	model := testenv.OddModel(t, "tiny")
	work := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(work, "cpu.prof")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	bench := func(prof string) cliResult {
		return runCLI(t, 3*time.Minute, nil, "bench", "--model", model, "--device", "cpu", "--modes", "decode", "--layers", "layer0",
			"--workers", "1", "--intra-op-threads", "1", "--cpuprofile", prof, dir)
	}
	r := bench(link)
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("victim written through the link: %d bytes, %v", len(b), err)
	}
	if r.Code != 2 || !strings.Contains(r.Stderr, "is a symbolic link") {
		t.Errorf("bench --cpuprofile LINK: want exit 2 and one line naming the link\n%s", r)
	}
	prof := filepath.Join(work, "new.prof")
	if r := bench(prof); r.Code != 0 {
		t.Fatalf("bench --cpuprofile NEW: %s", r)
	}
	if fi, err := os.Lstat(prof); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		t.Errorf("profile: %v, %v", fi, err)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 2 {
		t.Errorf("%d files in the profile's directory, want the link and the profile (a temporary file left?)", len(ents))
	}
}
