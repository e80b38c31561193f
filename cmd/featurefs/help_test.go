package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
)

// selfArgsEnv carries the arguments (a JSON array) of a featurefs run by
// this test binary as a child (runSelf): TestMain runs them and exits.
const selfArgsEnv = "FEATUREFS_TEST_RUN_ARGS"

func TestMain(m *testing.M) {
	if a, ok := os.LookupEnv(selfArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			panic(err)
		}
		os.Exit(run(args))
	}
	os.Exit(m.Run())
}

// selfResult is what a featurefs command run by runSelf printed and its
// exit code.
type selfResult struct {
	stdout, stderr string
	code           int
}

// runSelf runs featurefs ARGS (the command's run, in a child process of
// this test binary, as main would) and returns what it printed.
func runSelf(t *testing.T, args ...string) selfResult {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	a, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), selfArgsEnv+"="+string(a))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := selfResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("featurefs %q: %v", args, err)
	}
	return r
}

// helpFlagLine matches a flag's line in flag.PrintDefaults' output.
var helpFlagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// TestExtractMissingFlagNamesIt: featurefs extract without --model,
// --layer, -o or an image exits 2 with one line naming what is missing,
// then the flags (at 1942f8f: the whole usage text, ending in an empty
// "Flags:" section, and nothing named the missing flag).
func TestExtractMissingFlagNamesIt(t *testing.T) {
	full := []string{"extract", "--model", "m.onnx", "--layer", "layer0", "-o", "out", "img.jpg"}
	without := func(drop ...string) []string {
		var out []string
		for i := 0; i < len(full); i++ {
			if i+1 < len(full) && strings.HasPrefix(full[i], "-") && slices.Contains(drop, full[i]) {
				i++
				continue
			}
			if slices.Contains(drop, full[i]) {
				continue
			}
			out = append(out, full[i])
		}
		return out
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{without("--model"), []string{"--model"}},
		{without("--layer"), []string{"--layer"}},
		{without("-o"), []string{"-o"}},
		{without("--model", "-o"), []string{"--model", "-o"}},
		{without("img.jpg"), []string{"IMAGE", "--files-from"}},
	} {
		r := runSelf(t, c.args...)
		first, rest, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || !strings.HasPrefix(first, "featurefs extract: missing ") {
			t.Errorf("extract %q: exit %d, first line %q; want exit %d and a line \"featurefs extract: missing ...\"\nstderr:\n%s",
				c.args, r.code, first, exitUsage, r.stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(first, w) {
				t.Errorf("extract %q: %q does not name %s", c.args, first, w)
			}
		}
		if strings.Contains(r.stderr, "Writes the output of layer K") {
			t.Errorf("extract %q: printed the whole help, want one line and the flags:\n%s", c.args, r.stderr)
		}
		var flags []string
		for _, m := range helpFlagLine.FindAllStringSubmatch(rest, -1) {
			flags = append(flags, m[1])
		}
		for _, f := range []string{"model", "layer", "o", "files-from", "relative-to"} {
			if !slices.Contains(flags, f) {
				t.Errorf("extract %q: flag -%s not listed after the line; flags listed: %q\nstderr:\n%s", c.args, f, flags, r.stderr)
			}
		}
	}
}

// TestCacheHelpPrintsFlags: featurefs cache -h (and cache stats -h,
// cache clear -h) print the flags, as README says every command's -h does
// (at 1942f8f cache -h printed the usage alone, without --cache-dir or
// --json).
func TestCacheHelpPrintsFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"cache", "-h"}, []string{"cache-dir", "json"}},
		{[]string{"cache", "--help"}, []string{"cache-dir", "json"}},
		{[]string{"cache", "stats", "-h"}, []string{"cache-dir", "json"}},
		{[]string{"cache", "clear", "-h"}, []string{"cache-dir"}},
	} {
		r := runSelf(t, c.args...)
		if r.code != exitOK {
			t.Errorf("%q: exit %d, want 0\n%s%s", c.args, r.code, r.stdout, r.stderr)
		}
		var flags []string
		for _, m := range helpFlagLine.FindAllStringSubmatch(r.stdout+r.stderr, -1) {
			flags = append(flags, m[1])
		}
		for _, f := range c.want {
			if !slices.Contains(flags, f) {
				t.Errorf("%q: flag --%s not listed; flags listed: %q\n%s%s", c.args, f, flags, r.stdout, r.stderr)
			}
		}
	}
}

// TestLayersHelpListsEveryColumn: featurefs layers -h describes every
// column the table has (api.Model.Table's header), each on a line of its
// own (at 1942f8f it named six of eight: not digest or aliases).
func TestLayersHelpListsEveryColumn(t *testing.T) {
	m := &api.Model{Name: "m", Layers: []api.Layer{{Name: "layer0", Tensor: "t", Shape: []int64{4}, Bytes: 16}}}
	lines := strings.Split(m.Table(), "\n")
	if len(lines) < 2 {
		t.Fatalf("table has no header:\n%s", m.Table())
	}
	cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(lines[1]), -1)
	if len(cols) < 8 {
		t.Fatalf("header %q: %d columns, want at least 8", lines[1], len(cols))
	}
	r := runSelf(t, "layers", "-h")
	if r.code != exitOK {
		t.Fatalf("layers -h: exit %d\n%s", r.code, r.stderr)
	}
	for _, c := range cols {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c) + `  `).MatchString(r.stderr) {
			t.Errorf("layers -h does not describe the column %q on a line of its own:\n%s", c, r.stderr)
		}
	}
	// A wrong argument count says so in one line, then the help.
	r = runSelf(t, "layers")
	if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != exitUsage || !strings.Contains(first, "want one MODEL.onnx") ||
		!helpFlagLine.MatchString(r.stderr) {
		t.Errorf("layers without a model: exit %d, want %d, a line saying what is wrong and the flags:\n%s", r.code, exitUsage, r.stderr)
	}
}

// TestEveryCommandHelpPrintsFlags: README says `featurefs COMMAND -h`
// prints a command's flags: every command of the usage (but version) does,
// with exit 0.
func TestEveryCommandHelpPrintsFlags(t *testing.T) {
	cmds := regexp.MustCompile(`(?m)^  featurefs ([a-z-]+)`).FindAllStringSubmatch(usage, -1)
	seen := map[string]bool{}
	for _, m := range cmds {
		c := m[1]
		if c == "version" || seen[c] {
			continue
		}
		seen[c] = true
		r := runSelf(t, c, "-h")
		if r.code != exitOK || !helpFlagLine.MatchString(r.stdout+r.stderr) {
			t.Errorf("featurefs %s -h: exit %d, want 0 and its flags:\n%s%s", c, r.code, r.stdout, r.stderr)
		}
	}
	if len(seen) < 10 {
		t.Errorf("%d commands found in the usage, want at least 10: %v", len(seen), seen)
	}
}
