package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// stampLine is the whole form of a bench file's stamp (scripts/lib.sh
// bench_stamp, written by scripts/bench.sh); make bench-docs parses the
// commit and the measured paths from it.
var stampLine = regexp.MustCompile("(?m)^Measured at commit ([0-9a-f]{7,40})(-dirty)?, \\d{4}-\\d\\d-\\d\\d, [^;]+, \\d+ CPUs, kernel [^;]+; " +
	"command: `[^`]+`; load average [0-9. ]+ before, [0-9. ]+ after(; \\d+ s wall)?(; measures: ((`[^`]+` ?)+))?\\.$")

// unstamped are the bench files written before the harness (issue 52),
// which name no commit in its form: gpu.md, which only a GPU host
// (make gpu-check) can rerun. The list only shrinks: a file rerun through
// scripts/bench.sh must leave it, and a new file must be stamped. Earlier
// runs kept for what they decided are records (docs/records), not bench
// files.
var unstamped = map[string]bool{
	"gpu.md": true,
}

// TestBenchFilesAreStamped: every bench script names the code it measures
// (its "# measures:" line, paths that exist), and every docs/bench file
// but the listed older ones carries the harness's stamp, whose commit is
// in this repository's history, so that make bench-docs can tell whether
// the code it measured has changed since (issue 52).
func TestBenchFilesAreStamped(t *testing.T) {
	root := filepath.Join("..", "..")
	scripts, _ := filepath.Glob(filepath.Join(root, "scripts", "bench-*.sh"))
	if len(scripts) < 10 {
		t.Fatalf("%d bench scripts: the glob is broken", len(scripts))
	}
	measures := regexp.MustCompile(`(?m)^# measures: (.+)$`)
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		m := measures.FindStringSubmatch(string(b))
		if m == nil {
			t.Errorf("%s has no '# measures: PATH...' line", s)
			continue
		}
		for _, p := range strings.Fields(m[1]) {
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s measures %s: %v", s, p, err)
			}
		}
	}
	// A shallow clone lacks the history to find a stamp's commit in; the
	// form and the paths are checked all the same.
	history := fullHistory(t, root)
	files, _ := filepath.Glob(filepath.Join(root, "docs", "bench", "*.md"))
	seen := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		seen[name] = true
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := stampLine.FindStringSubmatch(string(b))
		switch {
		case m == nil && !unstamped[name]:
			t.Errorf("docs/bench/%s has no stamp of scripts/bench.sh (Measured at commit ...): write it through the harness", name)
		case m != nil && unstamped[name]:
			t.Errorf("docs/bench/%s is stamped now: take it off the unstamped list", name)
		case m != nil:
			if history {
				if !isCommit(root, m[1]) {
					t.Errorf("docs/bench/%s: its commit %s is not in this history", name, m[1])
				}
			}
			for _, p := range strings.Fields(strings.ReplaceAll(m[5], "`", " ")) {
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("docs/bench/%s measures %s: %v", name, p, err)
				}
			}
		}
	}
	var gone []string
	for name := range unstamped {
		if !seen[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	if len(gone) > 0 {
		t.Errorf("the unstamped list names files that are not in docs/bench: %v", gone)
	}
}

// fullHistory reports whether the checkout at root has its whole history
// (not a shallow clone), where commits named in the docs can be looked up.
func fullHistory(t *testing.T, root string) bool {
	shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
	if strings.TrimSpace(string(shallow)) != "false" {
		t.Logf("git rev-parse --is-shallow-repository: %q: named commits not looked up", shallow)
		return false
	}
	return true
}

// isCommit reports whether c names a commit of root's history.
func isCommit(root, c string) bool {
	return exec.Command("git", "-C", root, "cat-file", "-e", c+"^{commit}").Run() == nil
}

// TestRecordsNameTheirCommits: a docs/records file holds runs the harness
// does not repeat (A/Bs of named builds, a benchmark's earlier runs). Its
// first line marks it a record, its header says so to a reader, it names
// the commits it ran, each one in this history, and it carries no stamp
// (a stamped section belongs in docs/bench, where make bench-docs tracks
// its freshness).
func TestRecordsNameTheirCommits(t *testing.T) {
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "records", "*.md"))
	if len(files) < 3 {
		t.Fatalf("%d records: the glob is broken", len(files))
	}
	history := fullHistory(t, root)
	for _, f := range files {
		name := filepath.Base(f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !strings.HasPrefix(text, "<!-- record -->\n*A record, not rerun by scripts/bench.sh") {
			t.Errorf("docs/records/%s does not begin with the record's marker and header", name)
		}
		if stampLine.MatchString(text) {
			t.Errorf("docs/records/%s carries a harness stamp: a stamped section belongs in docs/bench", name)
		}
		commits := hexCommit.FindAllString(text, -1)
		if len(commits) == 0 {
			t.Errorf("docs/records/%s names no commit", name)
		}
		found := 0
		for _, c := range commits {
			if !history {
				break
			}
			if isCommit(root, c) {
				found++
			}
		}
		if history && len(commits) > 0 && found == 0 {
			t.Errorf("docs/records/%s names %v, none of them a commit of this history", name, commits)
		}
	}
}

// TestBenchFreshness runs scripts/lib.sh's bench_freshness, which make
// bench-docs uses to mark sections stale, on a scratch repository: a
// section is current until a commit changes code in what its stamp says
// it measures (not a test file, not another path, not a comment alone;
// a cgo directive is code), stale after until the code is as it was
// (a revert), and a section without a stamp says so.
func TestBenchFreshness(t *testing.T) {
	lib, err := filepath.Abs(filepath.Join("..", "..", "scripts", "lib.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("cache/cache.go", "package cache\n")
	write("fs/fs.go", "package fs\n")
	git("add", ".")
	git("commit", "-qm", "code")
	c := git("rev-parse", "--short=7", "HEAD")
	section := filepath.Join(dir, "cache.md")
	write("cache.md", "## Cache\n\nMeasured at commit "+c+", 2026-12-07, CPU, 2 CPUs, kernel k; command: `scripts/bench-cache.sh`; "+
		"load average 1 1 1 before, 1 1 1 after; 3 s wall; measures: `cache`.\n")
	write("old.md", "## Old\n\nCommand: `make bench` (2 CPUs).\n")
	fresh := func(file string) string {
		t.Helper()
		cmd := exec.Command("bash", "-c", `. "$1"; REPO=$2; bench_freshness "$3"`, "x", lib, dir, file)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bench_freshness: %v %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	steps := []struct {
		change, file, want string
	}{
		{"", "", "current: measured at " + c},
		{"a test of what it measures", "cache/cache_test.go", "current: measured at " + c},
		{"other code", "fs/fs.go", "current: measured at " + c},
		{"a comment in the code it measures", "cache/cache.go", "current: measured at " + c},
		{"a cgo directive in it", "cache/cache.go", "stale: measured at " + c + "; 1 later commit(s) change what it measures (cache)"},
		{"the code it measures", "cache/cache.go", "stale: measured at " + c + "; 2 later commit(s) change what it measures (cache)"},
		{"both reverted", "cache/cache.go", "current: measured at " + c},
	}
	// What each step writes: the comment and the directive leave the
	// package clause as it was.
	text := map[string]string{
		"a comment in the code it measures": "package cache\n\n// a comment, reworded later\n",
		"a cgo directive in it":             "// #cgo LDFLAGS: -lm\npackage cache\n\n// a comment, reworded later\n",
		"both reverted":                     "package cache\n\n// a comment, reworded again\n",
	}
	for _, s := range steps {
		if s.file != "" {
			body, ok := text[s.change]
			if !ok {
				body = "package x // " + s.change + "\n"
			}
			write(s.file, body)
			git("add", ".")
			git("commit", "-qm", s.change)
		}
		if got := fresh(section); !strings.HasPrefix(got, s.want) {
			t.Errorf("after a commit to %s: %q, want %q...", s.change, got, s.want)
		}
	}
	if got := fresh(filepath.Join(dir, "old.md")); !strings.HasPrefix(got, "no stamp:") {
		t.Errorf("a section without a stamp: %q", got)
	}
}
