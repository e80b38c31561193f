package test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// loaderResult is what scripts/loader_check.py prints.
type loaderResult struct {
	Classes    []string       `json:"classes"`
	ClassToIdx map[string]int `json:"class_to_idx"`
	Samples    []struct {
		Path   string  `json:"path"`
		Label  int     `json:"label"`
		Shape  []int64 `json:"shape"`
		DType  string  `json:"dtype"`
		SHA256 string  `json:"sha256"`
		Sum    float64 `json:"sum"`
	} `json:"samples"`
	Loaded [][2]any `json:"loaded"`
	Epochs []struct {
		Seconds float64 `json:"seconds"`
		Samples int     `json:"samples"`
		Bytes   int64   `json:"bytes"`
	} `json:"epochs"`
}

// runLoaderCheck runs scripts/loader_check.py on root with Debian's python.
func runLoaderCheck(t *testing.T, root string, args ...string) loaderResult {
	t.Helper()
	py := testenv.RequireTorch(t)
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "loader_check.py")
	cmd := exec.Command(py, append([]string{script, root}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("loader_check.py %s: %v\n%s", root, err, stderr.String())
	}
	var r loaderResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("loader_check.py output: %v\n%s", err, out)
	}
	return r
}

// TestDataLoaderReadsEverySample runs an unmodified torchvision
// DatasetFolder(root, loader=np.load, extensions=(".npy",)) with
// DataLoader(num_workers=4, shuffle=True) over the mount of a MinIO bucket:
// classes and per-class counts match the bucket, every sample is yielded
// exactly once with its class, the arrays are byte-identical to the mount's
// files, and the values equal `featurefs extract` on the same objects.
func TestDataLoaderReadsEverySample(t *testing.T) {
	d := genDataset(t, "--bad", "--classes", "3", "--train", "3", "--val", "2")
	srv, env := minioBucket(t, "train-data", "imagenet/", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://train-data/imagenet", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--batch-size", "4"}})
	checkDataLoader(t, d, m)
}

// checkDataLoader runs DatasetFolder + DataLoader over train/ and val/ of
// m's test layer and checks classes, counts, labels, bytes and values
// against d and `featurefs extract` (within closeEnough).
func checkDataLoader(t *testing.T, d *dataset, m *mounted) {
	t.Helper()
	names := featureNames(d.keys(t))
	for _, split := range []string{"train", "val"} {
		root := filepath.Join(m.Layer(testLayer), split)
		r := runLoaderCheck(t, root, "--workers", "4", "--batch", "4")

		// Classes and counts match the bucket.
		wantCount := map[string]int{}
		for _, o := range d.images(split + "/") {
			wantCount[o.Class]++
		}
		var wantClasses []string
		for c := range wantCount {
			wantClasses = append(wantClasses, c)
		}
		sort.Strings(wantClasses)
		if !reflect.DeepEqual(r.Classes, wantClasses) {
			t.Fatalf("%s: DatasetFolder classes %v, want %v", split, r.Classes, wantClasses)
		}
		gotCount := map[string]int{}
		for _, s := range r.Samples {
			gotCount[r.Classes[s.Label]]++
		}
		if !reflect.DeepEqual(gotCount, wantCount) {
			t.Errorf("%s: samples per class %v, want %v", split, gotCount, wantCount)
		}

		// The DataLoader (4 workers, shuffled) yielded every sample once,
		// with its label, byte-identical to np.load of the same file.
		type pair struct {
			sum   string
			label int
		}
		var direct, loaded []pair
		for _, s := range r.Samples {
			direct = append(direct, pair{s.SHA256, s.Label})
		}
		for _, l := range r.Loaded {
			h, _ := l[0].(string)
			lab, _ := l[1].(float64)
			loaded = append(loaded, pair{h, int(lab)})
		}
		less := func(p []pair) func(i, j int) bool {
			return func(i, j int) bool {
				if p[i].sum != p[j].sum {
					return p[i].sum < p[j].sum
				}
				return p[i].label < p[j].label
			}
		}
		sort.Slice(direct, less(direct))
		sort.Slice(loaded, less(loaded))
		if !reflect.DeepEqual(direct, loaded) {
			t.Errorf("%s: DataLoader yielded %d samples, not the %d of the dataset (or other bytes)", split, len(loaded), len(direct))
		}
		if len(r.Epochs) != 1 || r.Epochs[0].Samples != len(r.Samples) {
			t.Errorf("%s: epochs %+v, want one of %d samples", split, r.Epochs, len(r.Samples))
		}

		// Each sample's file: np.load saw exactly its data section, and the
		// values equal featurefs extract on the object.
		images := map[string]string{}
		byRel := map[string]string{}
		for _, o := range d.images(split + "/") {
			rel := strings.TrimPrefix(names[o.Key], split+"/")
			byRel[rel] = o.Key
			images[o.Key] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
		}
		ref := extractRef(t, testLayer, images)
		for _, s := range r.Samples {
			key, ok := byRel[s.Path]
			if !ok {
				t.Errorf("%s: DatasetFolder sample %s matches no image object", split, s.Path)
				continue
			}
			if want := path.Dir(key); path.Base(want) != r.Classes[s.Label] {
				t.Errorf("%s: %s labelled %s", split, s.Path, r.Classes[s.Label])
			}
			if !reflect.DeepEqual(s.Shape, testLayerShape) || s.DType != "<f4" {
				t.Errorf("%s: np.load shape %v dtype %s, want %v <f4", s.Path, s.Shape, s.DType, testLayerShape)
			}
			f := readNPY(t, filepath.Join(root, filepath.FromSlash(s.Path)))
			sum := sha256.Sum256(f.Raw)
			if hex.EncodeToString(sum[:]) != s.SHA256 {
				t.Errorf("%s: np.load bytes differ from the file's data section", s.Path)
			}
			if diff, ok := closeEnough(f.Data, ref[key].Data); !ok || !reflect.DeepEqual(ref[key].Shape, f.Shape) {
				t.Errorf("%s: mount vs featurefs extract: max |diff| %g, shapes %v vs %v", s.Path, diff, f.Shape, ref[key].Shape)
			}
		}
	}
}

// TestDataLoaderSkipsDirectoriesWithoutImages adds to a class tree what
// buckets often hold besides images: an S3 folder marker (train/trail/) and
// a prefix of text files only (train/docs/). DatasetFolder over the mount
// finds exactly the image classes (it raised FileNotFoundError for the empty
// directories); with --show-empty-dirs they are shown, and it fails as it
// would on such a local tree.
func TestDataLoaderSkipsDirectoriesWithoutImages(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "0")
	srv, env := minioBucket(t, "markers", "", d.Dir)
	srv.Put(t, "markers", "train/trail/", nil)
	srv.Put(t, "markers", "train/docs/readme.txt", []byte("not an image"))
	m := testMount(t, mountConfig{Source: "s3://markers", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})
	r := runLoaderCheck(t, filepath.Join(m.Layer(testLayer), "train"), "--workers", "0", "--batch", "2")
	var want []string
	for _, o := range d.images("train/") {
		if !slices.Contains(want, o.Class) {
			want = append(want, o.Class)
		}
	}
	sort.Strings(want)
	if !reflect.DeepEqual(r.Classes, want) {
		t.Errorf("DatasetFolder classes %v, want %v", r.Classes, want)
	}
	if len(r.Samples) != len(d.images("train/")) {
		t.Errorf("DatasetFolder found %d samples, want %d", len(r.Samples), len(d.images("train/")))
	}

	shown := testMount(t, mountConfig{Source: "s3://markers", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--show-empty-dirs"}})
	got, err := readDirNames(shown.Layer(testLayer) + "/train")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, "trail") || !slices.Contains(got, "docs") {
		t.Errorf("--show-empty-dirs: ls train = %v, want trail and docs among them", got)
	}
}
