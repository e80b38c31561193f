package features

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
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

// PredictTree predicts every image under the prefix from the last layer
// (the fake's logits are an object's first bytes), emits a bad image as an
// error and lists it as failed, skips what Skip says, and counts them;
// PredictAll keeps its input's order.
func TestPredictTreeAndAll(t *testing.T) {
	objs := map[string]string{"notes.txt": "not an image"}
	for i := range 40 {
		objs[fmt.Sprintf("train/c%d/%03d.jpg", i%3, i)] = string([]byte{byte(i), byte(40 - i)})
	}
	objs["train/c0/zz-bad.jpg"] = "BAD image"
	b, _ := localBucket(t, objs)
	p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: fakes.NewCache(),
		Labels: map[string][]string{"tiny": {"first", "second"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]Prediction{}
	res, err := p.PredictTree(ctx, PredictOptions{Model: "tiny", Prefix: "train", TopK: 1,
		Skip: func(key string) bool { return key == "train/c1/001.jpg" }},
		func(pr Prediction) error {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := got[pr.Key]; dup {
				t.Errorf("%s emitted twice", pr.Key)
			}
			got[pr.Key] = pr
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 41 || res.Cached != 1 || res.Extracted != 39 || res.Failed != 1 || len(res.Failures) != 1 || !res.Failures[0].BadObject {
		t.Errorf("result %+v", res)
	}
	if len(got) != 40 {
		t.Errorf("%d emitted, want 40", len(got))
	}
	for k, pr := range got {
		if k == "train/c0/zz-bad.jpg" {
			if pr.Err == "" || pr.Top != nil {
				t.Errorf("bad image: %+v", pr)
			}
			continue
		}
		data := objs[k]
		want := 0
		if data[1] > data[0] {
			want = 1
		}
		if pr.Err != "" || len(pr.Top) != 1 || pr.Top[0].Index != want {
			t.Errorf("%s (logits %v): %+v, want class %d", k, []byte(data), pr, want)
		}
	}
	if p.Labels("tiny")[1] != "second" {
		t.Errorf("labels %q", p.Labels("tiny"))
	}

	m, _ := p.cfg.Extractor.Model("tiny")
	v := p.PredictionView(m)
	var list []bucket.Object
	for _, k := range []string{"train/c0/000.jpg", "train/c0/zz-bad.jpg", "train/c2/038.jpg"} {
		o, err := b.Stat(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, o)
	}
	all := p.PredictAll(ctx, v, list, 2)
	if len(all) != 3 || all[0].Key != list[0].Key || all[1].Err == "" || all[2].Top[0].Index != 0 || len(all[2].Top) != 2 {
		t.Errorf("PredictAll = %+v", all)
	}
}

// New refuses labels whose count is not the model's class count, and
// labels of a model it does not serve.
func TestNewChecksLabels(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"a.jpg": "x"})
	for _, labels := range []map[string][]string{{"tiny": {"one"}}, {"other": {"a", "b"}}} {
		p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: fakes.NewCache(), Labels: labels})
		if err == nil {
			p.Close()
			t.Errorf("labels %v accepted", labels)
		}
	}
}

// TestNothingToPredictAgreesWithPredictTree: NothingToPredict, which needs
// no extractor, says nothing is left exactly when PredictTree under the
// same options would predict nothing (every image of the part skipped),
// for the whole source and each of 3 parts, and counts the part's images.
func TestNothingToPredictAgreesWithPredictTree(t *testing.T) {
	objs := map[string]string{"train/notes.txt": "not an image", "other/x.jpg": "outside the prefix"}
	for i := range 30 {
		objs[fmt.Sprintf("train/c%d/sub/%03d.jpg", i%3, i)] = string([]byte{byte(i), byte(30 - i)})
	}
	b, _ := localBucket(t, objs)
	p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: fakes.NewCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for _, shard := range []spec.Shard{{}, {Index: 0, Count: 3}, {Index: 2, Count: 3}} {
		var keys []string
		if _, err := p.PredictTree(ctx, PredictOptions{Model: "tiny", Prefix: "train", Shard: shard}, func(pr Prediction) error {
			keys = append(keys, pr.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 || len(keys) > 30 {
			t.Fatalf("shard %s: %d images predicted", shard, len(keys))
		}
		for _, leave := range []int{-1, 0, len(keys) - 1} {
			skip := map[string]bool{}
			for i, k := range keys {
				if i != leave {
					skip[k] = true
				}
			}
			opts := PredictOptions{Model: "tiny", Prefix: "train", Shard: shard, Skip: func(k string) bool { return skip[k] }}
			n, nothing, err := NothingToPredict(ctx, b, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.PredictTree(ctx, opts, func(Prediction) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if want := res.Extracted+res.Failed == 0; nothing != want || (nothing && n != int64(len(keys))) {
				t.Errorf("shard %s, %d of %d images left: NothingToPredict = %v (%d images), PredictTree predicted %d",
					shard, len(keys)-len(skip), len(keys), nothing, n, res.Extracted+res.Failed)
			}
		}
	}
}

// TestPredictionLinesNameNonUTF8Keys: a key that is not valid UTF-8 (JSON
// writes U+FFFD for its bad bytes, which names no object) also carries
// key_b64, its bytes, within the padded width, on top and error lines; a
// UTF-8 key carries none.
func TestPredictionLinesNameNonUTF8Keys(t *testing.T) {
	m := &api.Model{Name: "m", Layers: []api.Layer{{Name: "layer0", Shape: []int64{4}}}}
	l := NewPredictionLayout(m, nil, 2)
	for _, pr := range []Prediction{
		{Key: "d/\xff\xfe-bad.jpg", Top: []Class{{1, 0.5}, {0, 0.25}}},
		{Key: "d/\xff-err.jpg", Err: strings.Repeat("corrupt ", 40)},
		{Key: "d/ok-ü.jpg", Top: []Class{{1, 0.5}, {0, 0.25}}},
	} {
		line := l.Append(nil, pr, true)
		if int64(len(line)) != l.Width(pr.Key) {
			t.Fatalf("line %q: %d bytes, width %d", line, len(line), l.Width(pr.Key))
		}
		var got PredictionLine
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		raw, err := base64.StdEncoding.DecodeString(got.KeyB64)
		switch {
		case utf8.ValidString(pr.Key) && got.KeyB64 != "":
			t.Errorf("UTF-8 key %q has key_b64 %q", pr.Key, got.KeyB64)
		case !utf8.ValidString(pr.Key) && (err != nil || string(raw) != pr.Key):
			t.Errorf("line %q: key_b64 gives %q, want the key %q", line, raw, pr.Key)
		}
	}
}
