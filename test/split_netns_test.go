package test

import (
	"os"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
)

// TestSplitRemoteMountOverShapedLink: `featurefs serve` in one namespace,
// `featurefs mount --remote --split layer6` in the other over a 200 Mbit/s
// link: the DataLoader test of the embedded mount passes (values within
// float tolerance of featurefs extract), the server sent layer6 and the
// mount finished layer6..layer12, and the stats show the plan.
func TestSplitRemoteMountOverShapedLink(t *testing.T) {
	l := newNetLink(t, 200)
	d := genDataset(t, "--bad", "--classes", "3", "--train", "3", "--val", "2")
	url := startServeIn(t, l, d.Dir, "--batch-size", "4")
	m := mountIn(t, l, url, "--split", "layer6", "--batch-size", "4")
	checkDataLoader(t, d, m)
	// The layers table is the server's (its header names the model input).
	if table, err := os.ReadFile(m.Path("features", modelName, "layers")); err != nil || !strings.Contains(string(table), "input input 3x224x224") {
		t.Errorf("layers table of the split mount (%v):\n%s", err, table)
	}

	st := mountStats(t, m)
	ex, _ := st["extractor"].(map[string]any)
	sp, _ := ex["split"].(map[string]any)
	plans, _ := sp["plans"].([]any)
	if len(plans) != 1 {
		t.Fatalf("stats extractor.split: %v", sp)
	}
	p, _ := plans[0].(map[string]any)
	// layer6 = layer2.0 of ResNet-50; the server compresses it
	// (--wire-compression s2, the default): fewer bytes on the wire than the
	// .npy, and the cost model predicts that from the profile's wire ratio.
	raw := float64(api.NPYSize([]int64{512, 28, 28}, extractor.Float32))
	images := len(d.images("train/")) + len(d.images("val/"))
	measured, _ := p["measured_wire_bytes_per_sample"].(float64)
	predicted, _ := p["predicted_wire_bytes_per_sample"].(float64)
	if p["split"] != 6.0 || p["freeze"] != 12.0 || p["samples"].(float64) < float64(images) || sp["policy"] != "layer6" ||
		!(measured > 0 && measured < raw) || !(predicted < raw) {
		t.Errorf("split plan %v: want layer6 for layer12, at least %d samples, fewer bytes on the wire than the tensor's %g, measured and predicted", p, images, raw)
	}
	if bw, _ := sp["bandwidth_bytes_per_second"].(float64); bw*8/1e6 < 100 || bw*8/1e6 > 250 {
		t.Errorf("measured bandwidth %.1f Mbit/s on a 200 Mbit/s link", bw*8/1e6)
	}
}
