package test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestLayersCommandMatchesLayerDocs runs `featurefs layers` on every model
// docs/LAYERS.md documents and checks each documented row (layer, tensor,
// per-sample shape, bytes per sample, cumulative GFLOPs) against the
// command's (issue 24, section 10: the command printed ViT-B/16's layer2 at
// 0.942 GFLOPs and the doc 1.284, while the docs test, computing FLOPs
// another way, passed). extractor.TestLayerDocs regenerates the file from
// the same code; this checks the binary a user runs.
func TestLayersCommandMatchesLayerDocs(t *testing.T) {
	f, err := os.Open(filepath.Join(testenv.RepoRoot(t), "docs", "LAYERS.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs := map[string][][]string{} // model -> rows: layer, tensor, shape, bytes, GFLOPs
	var order []string
	model := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "## "); ok {
			model = ""
			if !strings.Contains(name, " ") {
				model = name
				order = append(order, model)
			}
			continue
		}
		if model == "" || !strings.HasPrefix(line, "| layer") || strings.HasPrefix(line, "| layer |") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		docs[model] = append(docs[model], cells)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(order) < 7 {
		t.Fatalf("docs/LAYERS.md documents %d models (%v), want the 7 test models", len(order), order)
	}
	for _, name := range order {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, 3*time.Minute, nil, "layers", testenv.Model(t, name))
			if r.Code != 0 {
				t.Fatalf("featurefs layers: %s", r)
			}
			rows := lines(r.Stdout)[2:]
			if len(rows) != len(docs[name]) {
				t.Fatalf("featurefs layers prints %d layers, docs/LAYERS.md %d", len(rows), len(docs[name]))
			}
			for i, row := range rows {
				// index name tensor shape bytes/sample GFLOPs [aliases]
				got := strings.Fields(row)
				if len(got) < 6 {
					t.Fatalf("row %q", row)
				}
				if want := docs[name][i]; strings.Join(got[1:6], " ") != strings.Join(want, " ") {
					t.Errorf("featurefs layers: %s\n   docs/LAYERS.md: %s", strings.Join(got[1:6], " "), strings.Join(want, " "))
				}
			}
		})
	}
}
