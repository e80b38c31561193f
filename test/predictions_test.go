package test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// predictionsFixture is a bucket of images (one corrupt) in MinIO and two
// versions of a 10-class model with PyTorch's softmax of each image
// (scripts/ref_predictions.py).
type predictionsFixture struct {
	srv    *testenv.MinIO
	env    []string
	models map[string]string      // "v1", "v2" -> .onnx
	ref    map[string][][]float64 // model -> probabilities by keys' order, then cls/sub/e.jpg's
	keys   []string               // cls/ images directly, in key order
	labels string                 // a labels file of the 10 classes
	names  []string
}

func newPredictionsFixture(t *testing.T) *predictionsFixture {
	t.Helper()
	py := testenv.RequireTorch(t)
	dir := filepath.Join(t.TempDir(), "data")
	f := &predictionsFixture{keys: []string{"cls/a.jpg", "cls/b.jpg", "cls/bad.jpg", "cls/c.png", "cls/d.jpg"}}
	var paths []string
	for i, k := range f.keys {
		p := filepath.Join(dir, filepath.FromSlash(k))
		switch {
		case strings.Contains(k, "bad"):
			if err := os.WriteFile(p, []byte("\xff\xd8\xff\xe0 not a jpeg at all"), 0o644); err != nil {
				t.Fatal(err)
			}
		case strings.HasSuffix(k, ".png"):
			writeJPEG(t, p+".jpg", 320, 240, 40*i)
			if b, err := exec.Command(py, "-c", "import sys; from PIL import Image; Image.open(sys.argv[1]).save(sys.argv[2])", p+".jpg", p).CombinedOutput(); err != nil {
				t.Fatalf("png: %v %s", err, b)
			}
			os.Remove(p + ".jpg")
		default:
			writeJPEG(t, p, 300+20*i, 260, 40*i)
		}
		paths = append(paths, p)
	}
	e := filepath.Join(dir, "cls", "sub", "e.jpg") // in a subdirectory: not in cls/'s file; last in ref
	writeJPEG(t, e, 256, 256, 7)
	paths = append(paths, e)
	out := t.TempDir()
	cmd := exec.Command(py, append([]string{filepath.Join(testenv.RepoRoot(t), "scripts", "ref_predictions.py"), "--out", out}, paths...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ref_predictions.py: %v\n%s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f.ref); err != nil {
		t.Fatal(err)
	}
	f.models = map[string]string{"v1": filepath.Join(out, "v1.onnx"), "v2": filepath.Join(out, "v2.onnx")}
	for i := range 10 {
		f.names = append(f.names, fmt.Sprintf("class %d \"%c\"", i, 'a'+i))
	}
	f.labels = filepath.Join(out, "classes.txt")
	if err := os.WriteFile(f.labels, []byte(strings.Join(f.names, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.srv, f.env = minioBucket(t, "data", "", dir)
	return f
}

// predLine is one line of a predictions file.
type predLine struct {
	Key   string  `json:"key"`
	Top   [][]any `json:"top"`
	Error string  `json:"error"`
}

// checkPredictions checks a predictions file's lines against PyTorch's
// softmax for model (ref), with k classes a line named by names (nil:
// null): one line per key in order; the corrupt image an error line; for
// the others the k listed scores are the reference's for those classes
// (within 1e-3) and no class left out scores more than the lowest listed.
func (f *predictionsFixture) checkPredictions(t *testing.T, content []byte, model string, k int, names []string) {
	t.Helper()
	ls := lines(string(content))
	if len(ls) != len(f.keys) {
		t.Fatalf("%d lines, want %d (one per image directly under cls/):\n%s", len(ls), len(f.keys), content)
	}
	const tol = 1e-3
	for i, l := range ls {
		var pl predLine
		if err := json.Unmarshal([]byte(l), &pl); err != nil {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
		if pl.Key != f.keys[i] {
			t.Errorf("line %d: key %q, want %q", i+1, pl.Key, f.keys[i])
		}
		ref := f.ref[model][i]
		if ref == nil {
			if pl.Error == "" || pl.Top != nil {
				t.Errorf("corrupt %s: line %q, want an error line", pl.Key, l)
			}
			continue
		}
		if pl.Error != "" || len(pl.Top) != k {
			t.Errorf("%s: line %q, want %d classes", pl.Key, l, k)
			continue
		}
		listed := map[int]bool{}
		low := math.Inf(1)
		for j, e := range pl.Top {
			c, score := int(e[0].(float64)), e[2].(float64)
			listed[c] = true
			low = min(low, score)
			if math.Abs(score-ref[c]) > tol {
				t.Errorf("%s: class %d scores %.6f, PyTorch %.6f", pl.Key, c, score, ref[c])
			}
			if j > 0 && score > pl.Top[j-1][2].(float64) {
				t.Errorf("%s: not highest first: %v", pl.Key, pl.Top)
			}
			switch {
			case names == nil && e[1] != nil:
				t.Errorf("%s: class %d named %v without labels", pl.Key, c, e[1])
			case names != nil && e[1] != names[c]:
				t.Errorf("%s: class %d named %v, want %q", pl.Key, c, e[1], names[c])
			}
		}
		for c, p := range ref {
			if !listed[c] && p > low+tol {
				t.Errorf("%s: class %d (PyTorch %.6f) left out of %v", pl.Key, c, p, pl.Top)
			}
		}
	}
}

// TestPredictionsView reads MOUNT/predictions/<model>/cls/predictions.jsonl
// through the kernel from MinIO: its size (stat, computing nothing) is
// what a read returns, each line's top-k matches PyTorch's softmax on the
// same images and model, the labels name the classes (null without
// labels), the corrupt image has an error line and the others are fine,
// and a subdirectory is listed beside the file (its images are in its own
// file). A second model version shows its own predictions.
func TestPredictionsView(t *testing.T) {
	f := newPredictionsFixture(t)
	m := testMount(t, mountConfig{Source: "s3://data", Env: f.env, Args: []string{
		"--endpoint-url", f.srv.Endpoint, "--prefetch", "off",
		"--model", "v1=" + f.models["v1"], "--model", "v2=" + f.models["v2"],
		"--labels", "v1=" + f.labels, "--predictions-top", "3"}})
	p := m.Path("predictions", "v1", "cls", "predictions.jsonl")
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	extractions := func() float64 { return fsExtractions(t, m) }
	if n := extractions(); n != 0 {
		t.Errorf("stat computed: %v extractions", n)
	}
	content, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if n := extractions(); n == 0 {
		t.Errorf("the read computed nothing (0 extractions)")
	}
	if int64(len(content)) != st.Size() {
		t.Errorf("read %d bytes, stat said %d", len(content), st.Size())
	}
	f.checkPredictions(t, content, "v1", 3, f.names)
	if !strings.Contains(string(content), "cls/bad.jpg") {
		t.Errorf("no line for the corrupt image")
	}

	des, err := os.ReadDir(m.Path("predictions", "v1", "cls"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, de := range des {
		got = append(got, de.Name())
	}
	slices.Sort(got)
	if want := []string{"predictions.jsonl", "sub"}; !slices.Equal(got, want) {
		t.Errorf("ls predictions/v1/cls = %v, want %v", got, want)
	}
	sub, err := os.ReadFile(m.Path("predictions", "v1", "cls", "sub", "predictions.jsonl"))
	if err != nil || len(lines(string(sub))) != 1 || !strings.Contains(string(sub), `"cls/sub/e.jpg"`) {
		t.Errorf("cls/sub/predictions.jsonl = %q, %v", sub, err)
	}

	v2, err := os.ReadFile(m.Path("predictions", "v2", "cls", "predictions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	f.checkPredictions(t, v2, "v2", 3, nil)
	// A read from the middle of the file: only the lines it covers.
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	part := make([]byte, 40)
	if _, err := fh.ReadAt(part, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	if want := content[st.Size()/2 : st.Size()/2+40]; string(part) != string(want) {
		t.Errorf("ReadAt the middle = %q, want %q", part, want)
	}
}

// TestLabelsRefusedAtStart: a labels file that is missing, whose count
// is not the model's class dimension, with a name over 256 bytes, or that
// is not a regular file, stops mount at start with one line that says so
// (exit 2), before mounting.
func TestLabelsRefusedAtStart(t *testing.T) {
	model := testenv.OddModel(t, "tiny")
	dir := t.TempDir()
	nine := filepath.Join(dir, "nine.txt")
	if err := os.WriteFile(nine, []byte(strings.Repeat("x\n", 9)), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 64, 1)
	long := filepath.Join(dir, "long.txt") // ten names, the first 5 MB (issue 36 item 10)
	if err := os.WriteFile(long, []byte(strings.Repeat("x", 5<<20)+"\n"+strings.Repeat("x\n", 9)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ labels, want string }{
		{filepath.Join(dir, "missing.txt"), "missing.txt: no such file or directory"},
		{nine, "9 class names for model tiny, whose last layer"},
		{long, "long.txt: line 1 is 5242880 bytes, over 256"},
		{"/dev/zero", "/dev/zero: not a regular file"},
	} {
		r := runCLI(t, 2*time.Minute, nil, "mount", "--foreground", "--device", "cpu", "--cache-dir", filepath.Join(dir, "cache"),
			"--model", "tiny="+model, "--labels", "tiny="+tc.labels, src, mnt)
		msgs := lines(r.Stderr)
		var ours []string
		for _, l := range msgs {
			if strings.Contains(l, "--labels") {
				ours = append(ours, l)
			}
		}
		if r.Code != 2 || len(ours) != 1 || !strings.Contains(ours[0], tc.want) {
			t.Errorf("--labels %s: want exit 2 and one line containing %q; got\n%s", tc.labels, tc.want, r)
		}
		if isMounted(t, mnt) {
			t.Fatalf("mounted despite the bad labels")
		}
	}
}

// warmSummary is warm --predictions's count line.
var warmSummary = regexp.MustCompile(`(?m)^featurefs warm: (\d+) predicted now, (\d+) already in `)

// TestWarmPredictionsResumesAndDiffs writes a bucket's predictions with
// featurefs warm --predictions from MinIO: they match PyTorch, the corrupt
// image is an error line and in the failure list; a rerun predicts
// nothing it has (0 computed), and one after a run cut short (a line lost,
// a line half written) predicts just the lost image. diff-predictions
// counts the top-1 changes between the two model versions as PyTorch's
// argmaxes do, and none between a file and itself.
func TestWarmPredictionsResumesAndDiffs(t *testing.T) {
	f := newPredictionsFixture(t)
	work := t.TempDir()
	warm := func(model, out string) cliResult {
		return runCLI(t, 3*time.Minute, f.env, "warm", "--source", "s3://data", "--endpoint-url", f.srv.Endpoint,
			"--model", model+"="+f.models[model], "--labels", model+"="+f.labels, "--device", "cpu",
			"--cache-dir", filepath.Join(work, "cache-"+model), "--predictions", out, "--predictions-top", "4", "cls/")
	}
	counts := func(r cliResult) (int, int) {
		t.Helper()
		m := warmSummary.FindStringSubmatch(r.Stdout)
		if m == nil {
			t.Fatalf("no count line:\n%s", r)
		}
		var a, b int
		fmt.Sscan(m[1], &a)
		fmt.Sscan(m[2], &b)
		return a, b
	}
	outs := map[string]string{}
	for _, model := range []string{"v1", "v2"} {
		out := filepath.Join(work, model+".jsonl")
		outs[model] = out
		r := warm(model, out)
		if r.Code != 1 || !strings.Contains(r.Stdout, "cls/bad.jpg") || !strings.Contains(r.Stdout, "6 of 6 done") && !strings.Contains(r.Stdout, "5 of 6 done") {
			t.Errorf("warm --predictions %s: want exit 1 (a failed image) listing cls/bad.jpg, 5 of 6 done; got\n%s", model, r)
		}
		if now, had := counts(r); now != 5 || had != 0 {
			t.Errorf("first run: %d predicted, %d already there; want 5, 0", now, had)
		}
	}
	b, err := os.ReadFile(outs["v1"])
	if err != nil {
		t.Fatal(err)
	}
	// cls/sub/e.jpg is under the prefix too: left out of the check.
	var direct []string
	for _, l := range lines(string(b)) {
		if !strings.Contains(l, `"cls/sub/`) {
			direct = append(direct, l)
		}
	}
	slices.SortFunc(direct, func(a, b string) int {
		var pa, pb predLine
		json.Unmarshal([]byte(a), &pa)
		json.Unmarshal([]byte(b), &pb)
		return strings.Compare(pa.Key, pb.Key)
	})
	if len(lines(string(b))) != 6 {
		t.Errorf("%d lines, want 6:\n%s", len(lines(string(b))), b)
	}
	f.checkPredictions(t, []byte(strings.Join(direct, "\n")), "v1", 4, f.names)

	// A rerun computes nothing it has; the error line is tried again.
	r := warm("v1", outs["v1"])
	if now, had := counts(r); now != 0 || had != 5 {
		t.Errorf("rerun: %d predicted, %d already there; want 0, 5:\n%s", now, had, r)
	}
	b, _ = os.ReadFile(outs["v1"])
	if n := len(lines(string(b))); n != 6 {
		t.Errorf("after the rerun %d lines, want 6 (the error line replaced):\n%s", n, b)
	}
	// Cut short: the last good line lost and half of a new one written.
	ls := lines(string(b))
	var keep []string
	lost := ""
	for i := len(ls) - 1; i >= 0; i-- {
		if lost == "" && !strings.Contains(ls[i], `"error"`) {
			lost = ls[i]
			continue
		}
		keep = append([]string{ls[i]}, keep...)
	}
	if err := os.WriteFile(outs["v1"], []byte(strings.Join(keep, "\n")+"\n"+lost[:len(lost)/2]), 0o644); err != nil {
		t.Fatal(err)
	}
	r = warm("v1", outs["v1"])
	if now, had := counts(r); now != 1 || had != 4 {
		t.Errorf("after a cut: %d predicted, %d already there; want 1, 4:\n%s", now, had, r)
	}
	b, _ = os.ReadFile(outs["v1"])
	if n := len(lines(string(b))); n != 6 || !strings.Contains(string(b), lost) {
		t.Errorf("after the resumed run %d lines, want 6 with %q:\n%s", n, lost, b)
	}

	// diff-predictions: PyTorch's argmax per image decides what changed.
	changed := 0
	for i := range len(f.keys) + 1 {
		a, b := f.ref["v1"][i], f.ref["v2"][i]
		if a != nil && argmax(a) != argmax(b) {
			changed++
		}
	}
	if r := runCLI(t, time.Minute, nil, "diff-predictions", outs["v1"], outs["v1"]); r.Code != 0 || !strings.Contains(r.Stdout, "5 images in both: 0 top-1 changed") {
		t.Errorf("diff of a file with itself:\n%s", r)
	}
	r = runCLI(t, time.Minute, nil, "diff-predictions", outs["v1"], outs["v2"])
	want := fmt.Sprintf("5 images in both: %d top-1 changed", changed)
	if r.Code != 0 || !strings.Contains(r.Stdout, want) || !strings.Contains(r.Stdout, "1 with an error line in either") {
		t.Errorf("diff v1 v2: want %q (PyTorch's argmaxes) and 1 error line:\n%s", want, r)
	}
	t.Logf("diff-predictions v1 v2:\n%s", r.Stdout)
}

func argmax(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

// TestPredictionsThroughServe: a --remote mount of `featurefs serve` over
// MinIO, with the labels on the mount and the model only on the server,
// shows the same predictions (PyTorch's, the labels' names, the corrupt
// image's error line): the last layer is computed near the data, softmax
// and top-k in the mount.
func TestPredictionsThroughServe(t *testing.T) {
	f := newPredictionsFixture(t)
	s := startServe(t, "s3://data", f.env, "--endpoint-url", f.srv.Endpoint, "--model", "v1="+f.models["v1"])
	m := testMount(t, mountConfig{Args: s.remoteArgs("--labels", "v1="+f.labels, "--prefetch", "off"), NoModel: true})
	p := m.Path("predictions", "v1", "cls", "predictions.jsonl")
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(content)) != st.Size() {
		t.Errorf("read %d bytes, stat said %d", len(content), st.Size())
	}
	f.checkPredictions(t, content, "v1", 5, f.names)
}
