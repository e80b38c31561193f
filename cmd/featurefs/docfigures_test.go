package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// figure matches a measured ratio quoted in prose: 1.69x, 4x, **2.88x**
// (not a shape such as 1024x14x14 or a size such as 4000x3000).
var figure = regexp.MustCompile(`(?:^|[^\w.])(\d+(?:\.\d+)?x)\b`)

// benchRef matches a benchmark section cited in a paragraph, as a link
// or a bare path: docs/bench/mount.md (from docs/, without docs/), or a
// record of earlier runs, docs/records/ab.md, whose figures are of the
// commits it names.
var benchRef = regexp.MustCompile(`(?:docs/)?(?:bench|records)/[a-z0-9_-]+\.md`)

// paragraphs splits markdown into what one citation covers: a paragraph,
// a list item or a table row; fenced code blocks are left out. Each comes
// with its first line's number.
func paragraphs(text string) (out []string, lines []int) {
	var cur []string
	start, fenced := 0, false
	flush := func() {
		if len(cur) > 0 {
			out, lines = append(out, strings.Join(cur, "\n")), append(lines, start)
		}
		cur = nil
	}
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "```"):
			flush()
			fenced = !fenced
			continue
		case fenced:
			continue
		case t == "" || strings.HasPrefix(line, "    ") && len(cur) == 0:
			flush() // a blank line, or an indented code block
			continue
		case strings.HasPrefix(t, "|"), strings.HasPrefix(line, "- "), strings.HasPrefix(t, "#"):
			flush() // a table row, a list item or a heading starts its own
		}
		if len(cur) == 0 {
			start = i + 1
		}
		cur = append(cur, line)
		if strings.HasPrefix(t, "|") || strings.HasPrefix(t, "#") {
			flush()
		}
	}
	flush()
	return out, lines
}

// codeSpan matches an inline code span (a command's -benchtime 200x is no
// figure).
var codeSpan = regexp.MustCompile("`[^`]*`")

// bound matches the words before a figure that make it a target or a
// bound rather than a measurement: (target >= 1.5x), at most 2x the budget.
var bound = regexp.MustCompile(`(?i)(target|goal|>=|<=|≥|≤|at least|at most|no more than|never (exceeds?|more than|worse than)|exceeds?|within|up to|bounded?)[^.;|]{0,25}$`)

// hexCommit matches any commit a file names; measuredAt a paragraph's
// "measured at C". A stamp's commit: stampLine (benchstamp_test.go).
var (
	hexCommit  = regexp.MustCompile(`\b[0-9a-f]{7}\b`)
	measuredAt = regexp.MustCompile(`measured at ([0-9a-f]{7,40})`)
)

// quotedDocs: README.md and every docs/*.md but the generated BENCHMARKS.md.
func quotedDocs(t *testing.T, root string) []string {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) < 10 {
		t.Fatalf("docs/*.md: %d files, %v", len(docs), err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		if d = strings.TrimPrefix(d, root+string(filepath.Separator)); d != filepath.Join("docs", "BENCHMARKS.md") {
			out = append(out, d)
		}
	}
	return out
}

// Every measured figure (1.69x, **2.88x**, 7x) that README.md or any of
// docs/*.md quotes is in a docs/bench section that the same paragraph,
// list item or table row cites (issue 24: figures from older runs, or
// from files that did not hold them, had drifted in; issue 52: CACHE.md
// described one bench file three ways). A bound is no measurement (target
// >= 1.5x, at most 2x the budget), nor is a code span. In README, the
// paragraph also says where the figure was measured: "measured at C",
// where C is the commit of the cited file's stamp (scripts/bench.sh), or,
// in a file written before the harness, a commit that file names, so that
// a reader of a figure from a stale file (make bench-docs marks them) sees
// which code it measured.
func TestQuotedFiguresComeFromBench(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, doc := range quotedDocs(t, root) {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		paras, lines := paragraphs(string(b))
		for i, p := range paras {
			figs := measuredFigures(p)
			if len(figs) == 0 {
				continue
			}
			refs := benchRef.FindAllString(p, -1)
			sections := map[string]string{}
			for _, ref := range refs {
				path := filepath.Join(root, "docs", strings.TrimPrefix(ref, "docs/"))
				s, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s:%d cites %s: %v", doc, lines[i], ref, err)
					continue
				}
				sections[ref] = string(s)
			}
			holders := map[string]bool{}
			for _, f := range figs {
				checked++
				if len(sections) == 0 {
					t.Errorf("%s:%d quotes %s and cites no docs/bench section", doc, lines[i], f)
					continue
				}
				in := regexp.MustCompile(`(?:^|[^\w.])` + regexp.QuoteMeta(f) + `\b`)
				found := false
				for ref, s := range sections {
					if in.MatchString(s) {
						found, holders[ref] = true, true
					}
				}
				if !found {
					t.Errorf("%s:%d quotes %s, which none of the sections it cites (%s) holds",
						doc, lines[i], f, strings.Join(refs, ", "))
				}
			}
			if doc != "README.md" {
				continue
			}
			for ref := range holders {
				if !namesCommit(p, sections[ref]) {
					t.Errorf("%s:%d quotes figures of %s and does not say \"measured at C\" with its commit (%s)",
						doc, lines[i], ref, commitsOf(sections[ref]))
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d figures: the docs quote more than that, so the parsing is broken", checked)
	}
}

// measuredFigures: the figures a paragraph quotes as measurements, code
// spans and bounds left out.
func measuredFigures(p string) []string {
	prose := codeSpan.ReplaceAllString(p, "``")
	var figs []string
	for _, m := range figure.FindAllStringSubmatchIndex(prose, -1) {
		if !bound.MatchString(prose[:m[2]]) {
			figs = append(figs, prose[m[2]:m[3]])
		}
	}
	return figs
}

// commitsOf: the commit of a bench file's stamp, or, in one written before
// the harness, every commit it names.
func commitsOf(section string) []string {
	if m := stampLine.FindStringSubmatch(section); m != nil {
		return []string{m[1][:7]}
	}
	return hexCommit.FindAllString(section, -1)
}

// namesCommit: the paragraph says "measured at C" with a commit of the
// section (commitsOf).
func namesCommit(para, section string) bool {
	for _, m := range measuredAt.FindAllStringSubmatch(para, -1) {
		for _, c := range commitsOf(section) {
			if strings.HasPrefix(m[1], c) || strings.HasPrefix(c, m[1]) {
				return true
			}
		}
	}
	return false
}

// TestFigureRules: the figure, bound and commit rules on examples, so that
// a change to the regular expressions that lets measurements through, or
// stops seeing them, fails here and not silently in the docs.
func TestFigureRules(t *testing.T) {
	for text, want := range map[string][]string{
		"epoch 1 ran at 2.88x PyTorch":                  {"2.88x"},
		"**1.69x** fewer bytes, and 7x smaller":         {"1.69x", "7x"},
		"(target >= 1.5x), measured 1.52x":              {"1.52x"},
		"at most 2x the budget; peak 3.1x":              {"3.1x"},
		"`-benchtime 200x` and a 1024x14x14 tensor":     nil,
		"| never exceeds 3x the budget | measured 2.2x": {"2.2x"},
	} {
		got := measuredFigures(text)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%q: measured figures %q, want %q", text, got, want)
		}
	}
	stamped := "## X\n\nMeasured at commit 29e4cc7, 2026-12-07, CPU, 2 CPUs, kernel k; command: `scripts/bench-x.sh`; " +
		"load average 1 1 1 before, 1 1 1 after; 3 s wall; measures: `cache`.\n\nan earlier run at 1234567\n"
	legacy := "## Y\n\nfrom the run at abd7911 and 9d09968\n"
	for _, c := range []struct {
		para, section string
		want          bool
	}{
		{"2.1x (docs/bench/x.md, measured at 29e4cc7)", stamped, true},
		{"2.1x (docs/bench/x.md, measured at 1234567)", stamped, false},
		{"2.1x (docs/bench/x.md)", stamped, false},
		{"2.1x (docs/bench/gpu.md, measured at 9d09968)", legacy, true},
		{"2.1x (docs/bench/gpu.md, measured at 29e4cc7)", legacy, false},
	} {
		if got := namesCommit(c.para, c.section); got != c.want {
			t.Errorf("namesCommit(%q) = %v, want %v", c.para, got, c.want)
		}
	}
}

// sizeFigure matches a quoted size (320 MB, 1825 MB, 2.5 GiB); measured
// marks a text that says the figure was measured.
var (
	sizeFigure = regexp.MustCompile(`\b(\d+(?:\.\d+)?) ?(?:[KMG]B|[KMG]iB)\b`)
	measured   = regexp.MustCompile(`(?i)\b(took|peak(ed)?|RSS|VmRSS|measured|one run)\b`)
)

// sentences splits text (whitespace collapsed) into sentences.
func sentences(text string) []string {
	return strings.Split(strings.Join(strings.Fields(text), " "), ". ")
}

// TestQuotedSizesComeFromBench: a measured size (a sentence that says it
// took, peaked at or measured it: RSS, memory) quoted in README.md or
// docs/MODELS.md is in a docs/bench section its paragraph cites, and a
// command's -h, which cites none, quotes no measured size. At 1942f8f
// README and extract -h quoted "a million paths of 46 bytes took 320 MB"
// and MODELS.md reload RSS figures (766 MB to 1825 MB, 651 and 419 MB)
// that no bench file or test held (issue 40).
func TestQuotedSizesComeFromBench(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, doc := range []string{"README.md", "docs/MODELS.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		paras, lines := paragraphs(string(b))
		for i, p := range paras {
			if strings.HasPrefix(strings.TrimSpace(p), "|") {
				continue // a flags table row: defaults and bounds
			}
			var sections []string
			for _, ref := range benchRef.FindAllString(p, -1) {
				if s, err := os.ReadFile(filepath.Join(root, "docs", strings.TrimPrefix(ref, "docs/"))); err == nil {
					sections = append(sections, string(s))
				}
			}
			for _, sen := range sentences(p) {
				if !measured.MatchString(sen) {
					continue
				}
				for _, f := range sizeFigure.FindAllStringSubmatch(sen, -1) {
					in := regexp.MustCompile(`(?:^|[^\w.])` + regexp.QuoteMeta(f[1]) + `\b`)
					found := false
					for _, s := range sections {
						found = found || in.MatchString(s)
					}
					if !found {
						t.Errorf("%s:%d quotes %s as measured, and no docs/bench section its paragraph cites holds it: %q", doc, lines[i], f[0], sen)
					}
				}
			}
		}
	}
	for name, help := range map[string]string{"bench": benchUsage, "cache": cacheUsage, "doctor": doctorUsage,
		"extract": extractUsage, "layers": layersUsage, "mount": mountUsage, "diff-predictions": diffUsage,
		"serve": serveUsage, "stats": statsUsage, "warm": warmUsage} {
		for _, sen := range sentences(help) {
			if measured.MatchString(sen) && sizeFigure.MatchString(sen) {
				t.Errorf("featurefs %s -h quotes a measured size, which no bench file backs there: %q", name, sen)
			}
		}
	}
}

// reloadInfo matches the INFO lines a model reload logs.
var reloadInfo = regexp.MustCompile(`\.Info\("featurefs: (model [a-z]+)"`)

// TestModelsDocNamesReloadLogLines: docs/MODELS.md says how many INFO
// lines a reload logs and names each, as fs/reload.go and
// cmd/featurefs/reload.go log them (at 1942f8f it said one, `model
// reloaded`; a reload logs `model replaced` too).
func TestModelsDocNamesReloadLogLines(t *testing.T) {
	root := filepath.Join("..", "..")
	var msgs []string
	for _, src := range []string{"fs/reload.go", "cmd/featurefs/reload.go"} {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reloadInfo.FindAllStringSubmatch(string(b), -1) {
			msgs = append(msgs, m[1])
		}
	}
	if len(msgs) != 2 {
		t.Fatalf("a reload logs INFO lines %q; this test knows of two (model replaced, model reloaded)", msgs)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "MODELS.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	count := regexp.MustCompile(`\b(one|two|three) INFO lines? say`).FindAllStringSubmatch(doc, -1)
	if len(count) != 1 || count[0][1] != "two" {
		t.Errorf("docs/MODELS.md: want one statement that two INFO lines say a reload; found %q", count)
	}
	for _, m := range msgs {
		if !strings.Contains(doc, "`"+m+"`") {
			t.Errorf("docs/MODELS.md does not name the reload's INFO line `%s`", m)
		}
	}
}
