package features

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
)

func TestTopKIsSoftmaxHighestFirst(t *testing.T) {
	logits := []float32{1, 3, 2, 3, -1}
	top := TopK(logits, 3)
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	want := []Class{{1, math.Exp(3) / sum}, {3, math.Exp(3) / sum}, {2, math.Exp(2) / sum}}
	if len(top) != len(want) {
		t.Fatalf("TopK = %v, want %v", top, want)
	}
	for i := range want {
		if top[i].Index != want[i].Index || math.Abs(top[i].Score-want[i].Score) > 1e-12 {
			t.Errorf("TopK[%d] = %v, want %v", i, top[i], want[i])
		}
	}
	if got := TopK(logits, 10); len(got) != 5 || got[4].Index != 4 {
		t.Errorf("TopK(k > classes) = %v", got)
	}
	if got := TopK([]float32{1000, 0}, 1); got[0].Index != 0 || math.IsNaN(got[0].Score) || got[0].Score != 1 {
		t.Errorf("large logits: %v (overflow?)", got)
	}
	if TopK(nil, 3) != nil || TopK(logits, 0) != nil {
		t.Error("empty input or k 0 gave classes")
	}
}

func TestPredictionLinesPadToTheirWidth(t *testing.T) {
	m := &api.Model{Name: "m", Layers: []api.Layer{{Name: "layer0", Shape: []int64{12}}}}
	labels := []string{"a", "b", `quote "q"`, "d", "e", "f", "g", "h", "i", "j", "k", "ü"}
	for _, lab := range [][]string{labels, nil} {
		l := NewPredictionLayout(m, lab, 3)
		ok := Prediction{Key: "dir/x.jpg", Top: []Class{{2, 0.5}, {11, 0.25}, {0, 1}}}
		bad := Prediction{Key: "dir/ü.jpg", Err: strings.Repeat("corrupt ", 100)}
		for _, pr := range []Prediction{ok, bad} {
			line := l.Append(nil, pr, true)
			if int64(len(line)) != l.Width(pr.Key) || line[len(line)-1] != '\n' {
				t.Fatalf("line %q: %d bytes, width %d", line, len(line), l.Width(pr.Key))
			}
			if compact := l.Append(nil, pr, false); pr.Err == "" && len(compact) > len(line) {
				t.Errorf("compact line longer than padded")
			}
			var got PredictionLine
			if err := json.Unmarshal(line, &got); err != nil || got.Key != pr.Key {
				t.Fatalf("line %q: %v", line, err)
			}
			if pr.Err != "" {
				if !strings.HasPrefix(got.Error, "corrupt corrupt") {
					t.Errorf("error line %q", line)
				}
				continue
			}
			c, name, ok := got.Top1()
			wantName := ""
			if lab != nil {
				wantName = `quote "q"`
			}
			if !ok || c != 2 || name != wantName || len(got.Top) != 3 || got.Top[2][2].(float64) != 1 {
				t.Errorf("line %q: top1 %d %q %v", line, c, name, ok)
			}
		}
	}
}

func TestCheckLabelsCountsClasses(t *testing.T) {
	m := &api.Model{Name: "m", Layers: []api.Layer{{Name: "layer0", Shape: []int64{8}}, {Name: "layer1", Shape: []int64{3}}}}
	if err := CheckLabels(m, []string{"a", "b", "c"}); err != nil {
		t.Error(err)
	}
	err := CheckLabels(m, []string{"a", "b"})
	if err == nil || !strings.Contains(err.Error(), "2 class names for model m") || !strings.Contains(err.Error(), "has 3 classes") {
		t.Errorf("CheckLabels = %v", err)
	}
}
