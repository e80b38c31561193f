package extractor

// End-to-end fidelity: featurefs's layer12 of a torchvision ResNet-50
// (random seeded weights, randomized BN statistics) against torchvision's
// own forward pass on PIL-decoded images, over a varied image set.

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

func readNPY(t *testing.T, path string) ([]int64, []float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	shape, _, data, err := api.DecodeNPY(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return shape, data
}

// genImages writes a varied image set (JPEG baseline/progressive/grayscale,
// PNG RGB/RGBA/paletted/grayscale, sizes 40..700, any aspect ratio) with
// scripts/gen_dataset.py and returns the image paths.
func genImages(t *testing.T, py, dir string, perClass int) []string {
	t.Helper()
	root := testenv.RepoRoot(t)
	cmd := exec.Command(py, filepath.Join(root, "scripts", "gen_dataset.py"), "--out", dir,
		"--classes", "3", "--train", strconv.Itoa(perClass), "--val", "2", "--min-side", "40", "--max-side", "700", "--seed", "7")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen_dataset.py: %v\n%s", err, out)
	}
	var man struct {
		Objects []struct {
			Key  string `json:"key"`
			Kind string `json:"kind"`
		} `json:"objects"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, o := range man.Objects {
		if o.Kind == "image" {
			paths = append(paths, filepath.Join(dir, filepath.FromSlash(o.Key)))
		}
	}
	if len(paths) < 10 {
		t.Fatalf("gen_dataset.py made only %d images", len(paths))
	}
	return paths
}

func TestLayer12MatchesTorchvision(t *testing.T) {
	py := testenv.RequireTorch(t)
	modelPath := testenv.Model(t, "resnet50")
	dir := t.TempDir()
	images := genImages(t, py, filepath.Join(dir, "images"), 4)
	refDir := filepath.Join(dir, "ref")
	args := append([]string{filepath.Join(testenv.RepoRoot(t), "scripts", "ref_features.py"),
		"--model", "resnet50", "--seed", "0", "--module", "layer3.3", "--threads", "2", "--out", refDir}, images...)
	if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("ref_features.py: %v\n%s", err, out)
	}

	svc := newCPUService(t, nil, ModelSpec{Name: "resnet50", Path: modelPath})
	m := svc.reg.Load().models["resnet50"]
	l, ok := m.Lookup("layer12")
	if !ok {
		t.Fatal("no layer12")
	}

	// Same weights: the ONNX layer12 on torchvision's own input tensors.
	ctx := context.Background()
	out := make([]float32, l.Elements())
	for i := range min(3, len(images)) {
		_, in := readNPY(t, filepath.Join(refDir, strconv.Itoa(i)+".input.npy"))
		_, ref := readNPY(t, filepath.Join(refDir, strconv.Itoa(i)+".npy"))
		if err := (ortRunner{pool: svc.pool}).run(ctx, segment{m: m, l: l}, 1, in, out); err != nil {
			t.Fatal(err)
		}
		if c := cosine(out, ref); c < 0.99999 {
			t.Fatalf("ONNX layer12 on torchvision's input %d: cosine %.6f; the exported weights differ from build()'s", i, c)
		}
	}

	// End to end: featurefs decodes, preprocesses and runs; all concurrently.
	type res struct {
		b   []byte
		err error
	}
	results := make([]res, len(images))
	done := make(chan int)
	for i, p := range images {
		go func() {
			b, err := svc.Extract(ctx, Request{Model: "resnet50", Layer: l.Index, Key: p, Priority: Background,
				Fetch: func(context.Context) ([]byte, error) { return os.ReadFile(p) }})
			results[i] = res{b, err}
			done <- i
		}()
	}
	for range images {
		<-done
	}
	var sum float64
	worst := 1.0
	for i, p := range images {
		if results[i].err != nil {
			t.Fatalf("%s: %v", p, results[i].err)
		}
		shape, dt, got, err := api.DecodeNPY(results[i].b)
		if err != nil {
			t.Fatal(err)
		}
		if dt != Float32 || api.ShapeString(shape) != "1024x14x14" || int64(len(results[i].b)) != api.NPYSize(l.Shape, Float32) {
			t.Fatalf("%s: shape %v dtype %s size %d", p, shape, dt, len(results[i].b))
		}
		_, ref := readNPY(t, filepath.Join(refDir, strconv.Itoa(i)+".npy"))
		c := cosine(got, ref)
		t.Logf("%-40s cosine %.6f", filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p), c)
		sum += c
		worst = min(worst, c)
		if c < 0.995 {
			t.Errorf("%s: cosine %.6f < 0.995", p, c)
		}
	}
	mean := sum / float64(len(images))
	t.Logf("%d images: mean cosine %.6f, worst %.6f", len(images), mean, worst)
	if mean < 0.999 {
		t.Errorf("mean cosine %.6f < 0.999", mean)
	}
	if st := svc.Stats(); st.BatchedItems != int64(len(images)) || st.Batches >= int64(len(images)) {
		t.Errorf("stats %+v: want %d items in fewer batches", st, len(images))
	}
}
