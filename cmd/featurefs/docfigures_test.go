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
// or a bare path: docs/bench/mount.md (from docs/, without docs/).
var benchRef = regexp.MustCompile(`(?:docs/)?bench/[a-z0-9_-]+\.md`)

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

// Every measured figure (N.NNx) that README.md, docs/SERVE.md and
// docs/FEATURE-STORE.md quote is in a docs/bench section that the same
// paragraph, list item or table row cites (issue 24: figures from older
// runs, or from files that did not hold them, had drifted in).
func TestQuotedFiguresComeFromBench(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, doc := range []string{"README.md", "docs/SERVE.md", "docs/FEATURE-STORE.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		paras, lines := paragraphs(string(b))
		for i, p := range paras {
			figs := figure.FindAllStringSubmatch(p, -1)
			if len(figs) == 0 {
				continue
			}
			var sections []string
			for _, ref := range benchRef.FindAllString(p, -1) {
				path := filepath.Join(root, "docs", strings.TrimPrefix(ref, "docs/"))
				s, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s:%d cites %s: %v", doc, lines[i], ref, err)
					continue
				}
				sections = append(sections, string(s))
			}
			for _, f := range figs {
				checked++
				if len(sections) == 0 {
					t.Errorf("%s:%d quotes %s and cites no docs/bench section", doc, lines[i], f[1])
					continue
				}
				in := regexp.MustCompile(`(?:^|[^\w.])` + regexp.QuoteMeta(f[1]) + `\b`)
				found := false
				for _, s := range sections {
					found = found || in.MatchString(s)
				}
				if !found {
					t.Errorf("%s:%d quotes %s, which none of the sections it cites (%s) holds",
						doc, lines[i], f[1], strings.Join(benchRef.FindAllString(p, -1), ", "))
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d figures: the docs quote more than that, so the parsing is broken", checked)
	}
}
