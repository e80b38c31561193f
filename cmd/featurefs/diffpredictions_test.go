package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffPredictionsNamesItsInputs: diff-predictions names its two files
// by their base names, or, when those are the same (two mount paths'
// predictions.jsonl), as A and B after a line saying which path each is;
// docs/MODELS.md shows this run. At 1942f8f two mount paths printed
// "0 only in predictions.jsonl, 0 only in predictions.jsonl".
func TestDiffPredictionsNamesItsInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, class int) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for i := 0; i < 5; i++ {
			fmt.Fprintf(&b, "{\"key\":\"train/cat/%d.jpg\",\"top\":[[%d,\"c%d\",0.9]]}\n", i, class, class)
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("predictions/v1/train/cat/predictions.jsonl", 7)
	b := write("predictions/v2/train/cat/predictions.jsonl", 1)
	d, err := diffPredictions(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	d.print(&out, 0)
	got := strings.ReplaceAll(out.String(), dir, "/mnt/ff")
	want := "A = /mnt/ff/predictions/v1/train/cat/predictions.jsonl\n" +
		"B = /mnt/ff/predictions/v2/train/cat/predictions.jsonl\n" +
		"5 images in both: 5 top-1 changed (100.00%), 0 unchanged\n" +
		"0 only in A, 0 only in B, 0 with an error line in either\n"
	if !strings.HasPrefix(got, want) {
		t.Errorf("two files named predictions.jsonl: got\n%s\nwant it to start with\n%s", got, want)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "MODELS.md"))
	if err != nil {
		t.Fatal(err)
	}
	var indented strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if l != "" {
			indented.WriteString("    " + l + "\n")
		}
	}
	if !strings.Contains(string(doc), indented.String()) {
		t.Errorf("docs/MODELS.md does not show this run:\n%s", indented.String())
	}

	// Different base names: those.
	c := write("v1.jsonl", 7)
	e := write("v2.jsonl", 7)
	if d, err = diffPredictions(c, e); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	d.print(&out, 0)
	if !strings.Contains(out.String(), "0 only in v1.jsonl, 0 only in v2.jsonl,") || strings.Contains(out.String(), "A = ") {
		t.Errorf("v1.jsonl and v2.jsonl: got\n%s", out.String())
	}
}
