package test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestFixedBatchModelsThroughAMount: models exported without a dynamic
// batch axis (batch 1, batch 3) serve through a mount the same features as
// the dynamic one, with the automatic batch size and with --batch-size 4:
// the batch size comes from the graph, said once per model at INFO, nothing
// is measured, nothing fails, nothing is retried, nothing warns (issue 15,
// item 7 and issue 16, item 9). Before, the batch-1 model logged "batch size
// measurement failed" on each layer's first use and, with --batch-size 4,
// "batch failed; retrying its items one by one" on every batch, and every
// read of the batch-3 model failed.
func TestFixedBatchModelsThroughAMount(t *testing.T) {
	src := t.TempDir()
	const n = 7 // batches of 3, 3 and a short one
	writeJPEGs(t, src, n)
	models := []string{"tiny", "batch1", "batch3"}
	for _, bs := range []string{"", "4"} {
		t.Run("batch-size="+bs, func(t *testing.T) {
			args := []string{"--prefetch", "off"}
			for _, name := range models {
				args = append(args, "--model", name+"="+testenv.OddModel(t, name))
			}
			if bs != "" {
				args = append(args, "--batch-size", bs)
			}
			m := testMount(t, mountConfig{Source: src, Args: args})

			// Every image of every layer of every model, n readers at a time.
			got := map[string][]float32{}
			var mu sync.Mutex
			for _, name := range models {
				for layer := range 4 {
					var wg sync.WaitGroup
					for i := range n {
						wg.Add(1)
						go func() {
							defer wg.Done()
							p := m.Path("features", name, fmt.Sprintf("layer%d", layer), "d", fmt.Sprintf("img%d.npy", i))
							b, err := os.ReadFile(p)
							if err != nil {
								t.Errorf("read %s: %v", p, err)
								return
							}
							f, err := parseNPY(b)
							if err != nil {
								t.Errorf("decode %s: %v", p, err)
								return
							}
							mu.Lock()
							got[fmt.Sprintf("%s/%d/%d", name, layer, i)] = f.Data
							mu.Unlock()
						}()
					}
					wg.Wait()
				}
			}
			for _, name := range models[1:] {
				for layer := range 4 {
					for i := range n {
						k := fmt.Sprintf("%d/%d", layer, i)
						if got[name+"/"+k] == nil || got["tiny/"+k] == nil {
							continue // the read failed, said above
						}
						if d, ok := closeEnough(got[name+"/"+k], got["tiny/"+k]); !ok {
							t.Errorf("%s layer%d img%d differs from the dynamic-batch model's by %g", name, layer, i, d)
						}
					}
				}
			}

			st := mountStats(t, m)
			if r, f := statsField(t, st, "extractor.retries"), statsField(t, st, "extractor.failed"); r != 0 || f != 0 {
				t.Errorf("extractor retried %d and failed %d items, want 0", r, f)
			}
			sizes, _ := st["extractor"].(map[string]any)["batch_sizes"].(map[string]any)
			for _, name := range models[1:] {
				want := map[string]float64{"batch1": 1, "batch3": 3}[name]
				for layer := range 4 {
					lane := fmt.Sprintf("%s/layer%d", name, layer)
					if sizes[lane] != want {
						t.Errorf("lane %s batch size %v, want %v (all: %v)", lane, sizes[lane], want, sizes)
					}
				}
			}
			logs, err := os.ReadFile(m.Log)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(logs), "\n") {
				if strings.Contains(line, "WARN") {
					t.Errorf("warning: %s", line)
				}
			}
			for _, name := range models[1:] {
				if c := len(linesWith(string(logs), "INFO", "fixed batch size", "model="+name+" ")); c != 1 {
					t.Errorf("%d INFO lines about %s's fixed batch size, want 1", c, name)
				}
			}
		})
	}
}
