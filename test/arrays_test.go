package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// arrayCheck is what scripts/array_check.py prints.
type arrayCheck struct {
	Rows        int     `json:"rows"`
	Shape       []int64 `json:"shape"`
	DType       string  `json:"dtype"`
	Samples     int     `json:"samples"`
	Equal       int     `json:"equal"`
	NaN         []int   `json:"nan"`
	Mismatch    []int   `json:"mismatch"`
	LabelsEqual bool    `json:"labels_equal"`
	FilesEqual  bool    `json:"files_equal"`
	Probe       struct {
		Before  float64 `json:"loss_before"`
		After   float64 `json:"loss_after"`
		Sklearn float64 `json:"sklearn_train_accuracy"`
	} `json:"probe"`
}

// runArrayCheck runs scripts/array_check.py on a per-file root and its
// array view.
func runArrayCheck(t *testing.T, root, array string) arrayCheck {
	t.Helper()
	py := testenv.RequireTorch(t)
	cmd := exec.Command(py, filepath.Join(testenv.RepoRoot(t), "scripts", "array_check.py"), root, array)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("array_check.py %s: %v\n%s", array, err, stderr.String())
	}
	var r arrayCheck
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("array_check.py output: %v\n%s", err, out)
	}
	return r
}

// TestArrayViewEqualsDatasetFolder: through a real mount of a MinIO
// bucket (ONNX Runtime, the kernel's FUSE), np.load(mmap_mode="r") of
// arrays/MODEL/LAYER/SPLIT.npy is, row by row, byte-equal to np.load of
// the file torchvision's DatasetFolder lists at that index under
// features/MODEL/LAYER/SPLIT (a bad image's row all NaN), its labels are
// DatasetFolder's targets and its row list names its samples in order; a
// linear head trained over TensorDataset(torch.from_numpy(X)) lowers its
// loss and scikit-learn's LogisticRegression fits the rows (the README's
// recipes). After an object is replaced and the listing refreshed, the rows
// still equal the per-file views (the replaced image's new feature).
func TestArrayViewEqualsDatasetFolder(t *testing.T) {
	d := genDataset(t, "--bad", "--classes", "3", "--train", "4", "--val", "2")
	srv, env := minioBucket(t, "arrays", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://arrays", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", "2s", "--prefetch", "off"}})
	bad := map[string]int{}
	for _, o := range d.bad() {
		bad[o.Split]++
	}
	check := func(split string) arrayCheck {
		t.Helper()
		root := filepath.Join(m.Layer(testLayer), split)
		array := m.Path("arrays", modelName, testLayer, split+".npy")
		r := runArrayCheck(t, root, array)
		if r.Rows != r.Samples || r.Rows == 0 {
			t.Fatalf("%s: %d rows; DatasetFolder has %d samples", split, r.Rows, r.Samples)
		}
		if len(r.Mismatch) > 0 || r.Equal+len(r.NaN) != r.Rows || len(r.NaN) != bad[split] {
			t.Errorf("%s: %d rows equal, NaN rows %v (want %d bad images), rows neither %v", split, r.Equal, r.NaN, bad[split], r.Mismatch)
		}
		if !r.LabelsEqual || !r.FilesEqual {
			t.Errorf("%s: labels equal %v, row list equal %v; want both", split, r.LabelsEqual, r.FilesEqual)
		}
		if r.DType != "float32" {
			t.Errorf("%s: dtype %s", split, r.DType)
		}
		return r
	}
	for _, split := range []string{"train", "val"} {
		r := check(split)
		if !(r.Probe.After < r.Probe.Before) {
			t.Errorf("%s: the linear probe's loss went %v -> %v; want lower", split, r.Probe.Before, r.Probe.After)
		}
		if r.Probe.Sklearn < 0.5 {
			t.Errorf("%s: LogisticRegression fit the rows to %.2f accuracy; want at least 0.5 (3 classes)", split, r.Probe.Sklearn)
		}
	}
	// Replace one image with another's bytes: once the listing is
	// refreshed, its row is the new feature.
	imgs := d.images("train/")
	src, dst := imgs[0], imgs[len(imgs)-1]
	b, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(src.Key)))
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(m.Path("arrays", modelName, testLayer, "train.npy"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "arrays", dst.Key, b)
	time.Sleep(3 * time.Second) // --metadata-ttl 2s
	check("train")
	after, err := os.ReadFile(m.Path("arrays", modelName, testLayer, "train.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if string(before) == string(after) {
		t.Errorf("train.npy did not change after %s was replaced", dst.Key)
	}
}
