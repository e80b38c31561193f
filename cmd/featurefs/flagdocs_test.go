package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/mountopts"
)

// helpFlag is one flag as a command's -h prints it (flag.PrintDefaults).
type helpFlag struct {
	name, placeholder, def, usage string
}

// helpDefault matches the default a usage line ends with: the one
// flag.PrintDefaults appends ((default "x") or (default x)), or one
// written into the usage text ((default: x)).
var helpDefault = regexp.MustCompile(`\s*\(default:? (.*)\)$`)

// parseHelp parses fl's -h output (PrintDefaults) into its flags, in
// order, with $HOME written ~.
func parseHelp(t *testing.T, fl *flag.FlagSet) []helpFlag {
	t.Helper()
	var buf bytes.Buffer
	fl.SetOutput(&buf)
	fl.PrintDefaults()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	var out []helpFlag
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, ph, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			out = append(out, helpFlag{name: name, placeholder: strings.TrimSpace(ph)})
		case strings.HasPrefix(line, "    \t") && len(out) > 0:
			f := &out[len(out)-1]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimPrefix(line, "    \t"))
		}
	}
	for i := range out {
		f := &out[i]
		if m := helpDefault.FindStringSubmatch(f.usage); m != nil {
			f.usage = strings.TrimSpace(f.usage[:len(f.usage)-len(m[0])])
			f.def = m[1]
			if u, err := strconv.Unquote(f.def); err == nil {
				f.def = u
			}
			if home != "" && home != "/" {
				f.def = strings.ReplaceAll(f.def, home, "~")
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no flags parsed from -h output:\n%s", buf.String())
	}
	return out
}

// docRow is one row of a flags table in the docs: | `--name placeholder` | default | meaning |.
type docRow struct {
	line                          int
	name, placeholder, def, usage string
	hasType                       bool
}

// mdLink matches a markdown link, [text](target).
var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// plain is a docs cell or usage text without markdown (backquotes, link
// targets), lower case, with whitespace collapsed: what a reader sees.
func plain(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	s = strings.ReplaceAll(s, "`", "")
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// word matches a word of a flag's text: letters and digits.
var word = regexp.MustCompile(`[a-z0-9]+`)

// stopWords are words a rewording may drop without changing a meaning.
var stopWords = map[string]bool{"a": true, "an": true, "and": true, "at": true, "by": true, "for": true, "from": true,
	"in": true, "is": true, "it": true, "of": true, "on": true, "or": true, "the": true, "to": true, "with": true}

// words are the words of s as a reader sees it (plain), without stop words
// and single letters.
func words(s string) []string {
	var out []string
	for _, w := range word.FindAllString(plain(s), -1) {
		if len(w) > 1 && !stopWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// docTable returns the flag rows of the first table after heading in the
// markdown file at path (relative to the repository root).
func docTable(t *testing.T, path, heading string) []docRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section", path, heading)
	}
	startLine := strings.Count(text[:i+1], "\n") + 1
	body := text[i+1:]
	if j := strings.Index(body[len(heading)+1:], "\n#"); j >= 0 {
		body = body[:len(heading)+1+j]
	}
	var rows []docRow
	for n, line := range strings.Split(body, "\n") {
		// | `--name placeholder` | default | meaning |
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(line, "| `--") {
			continue
		}
		meaning := strings.TrimSpace(strings.Join(cells[3:len(cells)-1], "|"))
		// A cell may name several flags: `--tls-cert file`, `--tls-key file`.
		for _, spec := range strings.Split(strings.TrimSpace(cells[1]), ", ") {
			spec = strings.Trim(spec, "`")
			name, ph, _ := strings.Cut(strings.TrimPrefix(spec, "--"), " ")
			rows = append(rows, docRow{
				line: startLine + n, name: name, placeholder: ph, hasType: true,
				def:   strings.ReplaceAll(strings.TrimSpace(cells[2]), "`", ""),
				usage: meaning,
			})
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no flag rows under %q", path, heading)
	}
	return rows
}

// checkRows compares each docs row with the flag of the same name in -h:
// the placeholder (-h's type or named value), the default, and the
// meaning, which must hold every word of -h's text (the docs may say more
// and say it otherwise, but not leave out a value, a unit or a bound that
// -h names).
func checkRows(t *testing.T, path string, rows []docRow, help []helpFlag, checkMeaning bool) {
	t.Helper()
	byName := map[string]helpFlag{}
	for _, h := range help {
		byName[h.name] = h
	}
	for _, r := range rows {
		h, ok := byName[r.name]
		if !ok {
			t.Errorf("%s:%d: --%s is not in -h", path, r.line, r.name)
			continue
		}
		if r.hasType && r.placeholder != h.placeholder {
			t.Errorf("%s:%d: --%s %q, -h says --%s %q", path, r.line, r.name, r.placeholder, h.name, h.placeholder)
		}
		if r.def != h.def {
			t.Errorf("%s:%d: --%s default %q, -h says %q", path, r.line, r.name, r.def, h.def)
		}
		if checkMeaning {
			have := map[string]bool{}
			for _, w := range words(r.usage) {
				have[w] = true
			}
			for _, w := range words(h.placeholder) { // in the name cell
				have[w] = true
			}
			var missing []string
			for _, w := range words(h.usage) {
				if !have[w] {
					missing = append(missing, w)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%s:%d: --%s meaning lacks %q of -h's text\n  docs: %s\n  -h:   %s", path, r.line, r.name, missing, plain(r.usage), plain(h.usage))
			}
		}
	}
}

func names[T any](xs []T, name func(T) string) string {
	var s []string
	for _, x := range xs {
		s = append(s, name(x))
	}
	return strings.Join(s, " ")
}

// README.md's "Mount flags" table is `featurefs mount -h`: every flag, in
// its order, each row with -h's placeholder, default and text.
func TestReadmeMountFlagsTable(t *testing.T) {
	o := mountopts.Default()
	help := parseHelp(t, mountFlags(&o))
	rows := docTable(t, "README.md", "## Mount flags")
	if got, want := names(rows, func(r docRow) string { return r.name }), names(help, func(h helpFlag) string { return h.name }); got != want {
		t.Errorf("README.md's Mount flags table:\n  %s\nfeaturefs mount -h:\n  %s", got, want)
	}
	checkRows(t, "README.md", rows, help, true)
}

// docs/SERVE.md's flags table holds every flag of `featurefs serve -h`
// that README's Mount flags table does not, each row as -h prints it.
func TestServeFlagsTable(t *testing.T) {
	o := mountopts.Default()
	help := parseHelp(t, serveFlags(&o))
	rows := docTable(t, "docs/SERVE.md", "## Server side")
	checkRows(t, "docs/SERVE.md", rows, help, true)

	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.name] = true
	}
	for _, r := range docTable(t, "README.md", "## Mount flags") {
		listed[r.name] = true
	}
	for _, h := range help {
		if !listed[h.name] {
			t.Errorf("featurefs serve --%s is in neither docs/SERVE.md's Server side table nor README's Mount flags", h.name)
		}
	}
}

// docs/FEATURE-STORE.md's flags table (no type column, shorter meanings)
// names flags of mount, serve and warm with -h's defaults; every
// --feature-store flag of mount is in it.
func TestFeatureStoreFlagsTable(t *testing.T) {
	rows := docTable(t, "docs/FEATURE-STORE.md", "## Flags")
	for i := range rows {
		rows[i].hasType = false
	}
	o := mountopts.Default()
	mount := parseHelp(t, mountFlags(&o))
	checkRows(t, "docs/FEATURE-STORE.md (mount)", rows, mount, false)
	var shared []docRow
	for _, r := range rows {
		if r.name != "feature-store-only" { // mount's alone
			shared = append(shared, r)
		}
	}
	o = mountopts.Default()
	checkRows(t, "docs/FEATURE-STORE.md (serve)", shared, parseHelp(t, serveFlags(&o)), false)
	var w warmArgs
	o = mountopts.Default()
	checkRows(t, "docs/FEATURE-STORE.md (warm)", shared, parseHelp(t, warmFlags(&o, &w)), false)

	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.name] = true
	}
	for _, h := range mount {
		if strings.HasPrefix(h.name, "feature-store") && !listed[h.name] {
			t.Errorf("docs/FEATURE-STORE.md's Flags table lacks --%s", h.name)
		}
	}
}
