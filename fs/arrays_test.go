package fs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/naming"
)

// arrayRows reads an array view's three files through the kernel: the
// data's shape and rows (raw bytes each), the labels and the row list.
func arrayRows(t *testing.T, dataPath string) (shape []int64, rows [][]byte, labels []int64, keys []map[string]any) {
	t.Helper()
	b, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	shape, dt, body, err := api.ParseNPY(b)
	if err != nil {
		t.Fatalf("%s: %v", dataPath, err)
	}
	per := int64(len(body))
	if shape[0] > 0 {
		per /= shape[0]
	}
	if dt != api.Float32 {
		t.Fatalf("%s: dtype %s", dataPath, dt)
	}
	for i := range shape[0] {
		rows = append(rows, body[i*per:(i+1)*per])
	}
	base := dataPath[:len(dataPath)-len(".npy")]
	lb, err := os.ReadFile(base + ".labels.npy")
	if err != nil {
		t.Fatal(err)
	}
	lshape, _, lbody, err := parseInt64NPY(lb)
	if err != nil || len(lshape) != 1 || lshape[0] != shape[0] {
		t.Fatalf("labels: shape %v, %v; want (%d,)", lshape, err, shape[0])
	}
	for i := range lshape[0] {
		labels = append(labels, int64(binary.LittleEndian.Uint64(lbody[8*i:])))
	}
	rf, err := os.ReadFile(base + ".rows.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(rf))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("rows.jsonl line %q: %v", sc.Text(), err)
		}
		keys = append(keys, m)
	}
	if int64(len(keys)) != shape[0] {
		t.Fatalf("rows.jsonl has %d lines; want %d", len(keys), shape[0])
	}
	return shape, rows, labels, keys
}

// parseInt64NPY parses a little-endian int64 .npy (ParseNPY reads only
// float ones).
func parseInt64NPY(b []byte) ([]int64, string, []byte, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, "", nil, syscall.EINVAL
	}
	hl := int(binary.LittleEndian.Uint16(b[8:]))
	h := string(b[10 : 10+hl])
	if !bytes.Contains([]byte(h), []byte("'<i8'")) {
		return nil, "", nil, syscall.EINVAL
	}
	i := bytes.Index([]byte(h), []byte("'shape': ("))
	rest := h[i+len("'shape': ("):]
	n, err := strconv.ParseInt(rest[:bytes.IndexByte([]byte(rest), ',')], 10, 64)
	if err != nil {
		return nil, "", nil, err
	}
	return []int64{n}, "<i8", b[10+hl:], nil
}

// TestArrayView: arrays/tiny/layer1/train.npy is the train/ directory as
// DatasetFolder sees it (sorted classes, a class's files at any depth in
// sorted(os.walk) order: "sub" before "sub b", files directly in train/ not rows), each row
// byte-equal to the per-file view of its image, a bad image a row of NaN
// and a line in the failures file; its labels are the class indices and
// its row list names each row's object. stat computes nothing; the array
// of the bucket's root is arrays/tiny/layer1.npy. A listing that changes
// makes a new file; an open one keeps its rows.
func TestArrayView(t *testing.T) {
	b := newFakeBucket(1000)
	for _, k := range []string{"train/cat/b.jpg", "train/cat/a.jpg", "train/cat/BAD1.jpg", "train/dog/sub/c.jpg",
		"train/dog/d.jpg", "train/dog/sub b/e.jpg", "train/top.jpg", "val/x/y.jpg"} {
		b.put(k, []byte("img:"+k))
	}
	b.put("train/cat/BAD1.jpg", []byte("BAD image")) // the fake extractor's bad image
	e := testMount(t, b, func(c *testConfig) { c.MetadataTTL = time.Second })
	dataPath := e.path("arrays", "tiny", "layer1", "train.npy")
	st, err := os.Stat(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	if c := e.x.Calls.Load(); c != 0 {
		t.Fatalf("stat of the array computed %d features; want none", c)
	}
	l := e.x.Models()[0].Layers[1]
	hdr := api.NPYHeader(append([]int64{6}, l.Shape...), api.Float32)
	if want := int64(len(hdr)) + 6*l.Elements()*4; st.Size() != want {
		t.Fatalf("train.npy is %d bytes; want %d (6 rows)", st.Size(), want)
	}
	want := []string{"cat/BAD1.npy", "cat/a.npy", "cat/b.npy", "dog/d.npy", "dog/sub/c.npy", "dog/sub b/e.npy"}
	wantLabels := []int64{0, 0, 0, 1, 1, 1}
	shape, rows, labels, keys := arrayRows(t, dataPath)
	if !slices.Equal(shape, append([]int64{6}, l.Shape...)) {
		t.Fatalf("shape %v", shape)
	}
	if !slices.Equal(labels, wantLabels) {
		t.Errorf("labels %v; want %v", labels, wantLabels)
	}
	for i, p := range want {
		if keys[i]["file"] != p || keys[i]["key"] != "train/"+p[:len(p)-4]+".jpg" || keys[i]["label"] != float64(wantLabels[i]) {
			t.Errorf("rows.jsonl line %d: %v; want file %s", i, keys[i], p)
		}
		if i == 0 {
			for j := 0; j < len(rows[0]); j += 4 {
				if v := math.Float32frombits(binary.LittleEndian.Uint32(rows[0][j:])); !math.IsNaN(float64(v)) {
					t.Fatalf("the bad image's row holds %v; want NaN", v)
				}
			}
			continue
		}
		file, err := os.ReadFile(e.path("features", "tiny", "layer1", "train", p))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rows[i], file[len(file)-len(rows[i]):]) {
			t.Errorf("row %d differs from %s", i, p)
		}
	}
	fails, err := os.ReadFile(e.path(".featurefs", FailuresFile))
	if err != nil || !bytes.Contains(fails, []byte("BAD1")) {
		t.Errorf("failures file: %s, %v; want the bad row's image", fails, err)
	}
	// Reading the array again, and the per-file views, computes nothing:
	// the array's rows went into the cache entries of the per-file views.
	calls := e.x.Calls.Load()
	if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "train", "dog", "d.npy")); err != nil {
		t.Fatal(err)
	}
	if c := e.x.Calls.Load(); c != calls {
		t.Errorf("a per-file read after the array's computed %d more", c-calls)
	}
	// The root's array: classes train (its 6 rows and top.jpg) and val.
	rs, _, rl, _ := arrayRows(t, e.path("arrays", "tiny", "layer1.npy"))
	if rs[0] != 8 || rl[0] != 0 || rl[6] != 0 || rl[7] != 1 {
		t.Errorf("layer1.npy: shape %v labels %v; want 8 rows, train's 7 then val's 1", rs, rl)
	}
	ls := names(t, e.path("arrays", "tiny", "layer1"))
	for _, n := range []string{"train/", "train.npy", "train.labels.npy", "train.rows.jsonl", "val/", "val.npy"} {
		if !slices.Contains(ls, n) {
			t.Errorf("arrays/tiny/layer1 lacks %s: %v", n, ls)
		}
	}
	// A new image: after the listings' TTL, a new file; the open one
	// keeps its rows and size.
	old, err := os.Open(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldIno := st.Sys().(*syscall.Stat_t).Ino
	b.put("train/cat/c.jpg", []byte("img:new"))
	e.clock.Advance(2 * time.Second)
	time.Sleep(1200 * time.Millisecond) // the kernel's entry timeout
	st2, err := os.Stat(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Sys().(*syscall.Stat_t).Ino == oldIno || st2.Size() != st.Size()+l.Elements()*4 {
		t.Errorf("after a new image: ino %d (was %d), size %d; want a new file of one more row", st2.Sys().(*syscall.Stat_t).Ino, oldIno, st2.Size())
	}
	if ost, err := old.Stat(); err != nil || ost.Size() != st.Size() {
		t.Errorf("the open array: %v, %v; want its old size %d", ost, err, st.Size())
	}
	_, rows2, _, _ := arrayRows(t, dataPath)
	if len(rows2) != 7 || !bytes.Equal(rows2[2], rows[2]) || bytes.Equal(rows2[3], rows[3]) || !bytes.Equal(rows2[4], rows[3]) {
		t.Errorf("new array: %d rows, want 7 with cat/c.npy after cat/b.npy", len(rows2))
	}
}

// TestArrayViewAugmented: an augmented view's array is that view's files.
func TestArrayViewAugmented(t *testing.T) {
	b := newFakeBucket(1000)
	for _, k := range []string{"d/c1/1.jpg", "d/c1/2.jpg", "d/c2/3.jpg"} {
		b.put(k, []byte("img:"+k))
	}
	e := testMount(t, b, func(c *testConfig) { c.Augment = features.AugmentConfig{Views: 2, Seed: 3} })
	_, rows, _, keys := arrayRows(t, e.path("arrays", "tiny", "layer0-aug", "1", "d.npy"))
	if len(rows) != 3 {
		t.Fatalf("%d rows; want 3", len(rows))
	}
	for i, r := range rows {
		file, err := os.ReadFile(e.path("features", "tiny", "layer0-aug", "1", "d", keys[i]["file"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := os.ReadFile(e.path("features", "tiny", "layer0", "d", keys[i]["file"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r, file[len(file)-len(r):]) || bytes.Equal(r, plain[len(plain)-len(r):]) {
			t.Errorf("row %d: not the view's feature", i)
		}
	}
	if _, err := os.Stat(filepath.Join(e.path("arrays", "tiny", "layer0-aug"), "1.npy")); err != nil {
		t.Errorf("layer0-aug/1.npy: %v", err)
	}
}

// TestArrayNameTakenByADirectory: where the bucket shows a directory
// called X.npy, that name is the directory's, and X's array is shown and
// read under the moved name (naming.Generated).
func TestArrayNameTakenByADirectory(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/c/1.jpg", []byte("one"))
	b.put("d.npy/c/2.jpg", []byte("two"))
	e := testMount(t, b)
	dir := e.path("arrays", "tiny", "layer1")
	moved := naming.Generated("d.npy").Moved()
	ls := names(t, dir)
	for _, n := range []string{"d/", "d.npy/", moved, "d.labels.npy", "d.npy.npy"} {
		if !slices.Contains(ls, n) {
			t.Errorf("%s lacks %s: %v", dir, n, ls)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "d.npy")); err != nil || !st.IsDir() {
		t.Errorf("d.npy: %v, %v; want the bucket's directory", st, err)
	}
	_, rows, _, keys := arrayRows(t, filepath.Join(dir, "d.npy.npy"))
	if len(rows) != 1 || keys[0]["key"] != "d.npy/c/2.jpg" {
		t.Errorf("d.npy.npy: %v", keys)
	}
	b2, err := os.ReadFile(filepath.Join(dir, moved))
	if err != nil {
		t.Fatal(err)
	}
	shape, _, _, err := api.ParseNPY(b2)
	if err != nil || shape[0] != 1 {
		t.Errorf("%s: shape %v, %v; want d's one row", moved, shape, err)
	}
}

// TestAugmentJSONLOneListing: an augment.jsonl's size and bytes come from
// the one listing it was looked up with (views.AugJSONL): read after the
// directory changed, an open file gives the lines of its listing, as
// many bytes as its size said; a new lookup gives the new listing's.
// (At 1aead67 Getattr and Read each listed the directory again.)
func TestAugmentJSONLOneListing(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/a.jpg", []byte("one"))
	b.put("d/c.jpg", []byte("three"))
	e := testMount(t, b, func(c *testConfig) {
		c.Augment = features.AugmentConfig{Views: 1, Seed: 1}
		c.MetadataTTL = time.Second
	})
	p := e.path("features", "tiny", "layer1-aug", "0", "d", "augment.jsonl")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b.put("d/b.jpg", []byte("two")) // a line between the two
	e.clock.Advance(2 * time.Second)
	time.Sleep(1200 * time.Millisecond)
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != st.Size() || bytes.Contains(got, []byte(`"b.npy"`)) || !bytes.Contains(got, []byte(`"c.npy"`)) {
		t.Errorf("the open file read %d bytes (size %d):\n%s\nwant its own listing's lines (a.npy, c.npy)", len(got), st.Size(), got)
	}
	fresh, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(fresh, []byte(`"b.npy"`)) || len(bytes.Split(bytes.TrimSpace(fresh), []byte("\n"))) != 3 {
		t.Errorf("a new open after the listing changed:\n%s\nwant 3 lines with b.npy", fresh)
	}
}
