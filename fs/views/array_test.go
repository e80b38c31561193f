package views

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/naming"
)

// tree is a fake feature tree: prefix -> entries.
type tree map[string][]naming.Entry

func (tr tree) list(ctx context.Context, prefix string) ([]naming.Entry, error) {
	es, ok := tr[prefix]
	if !ok {
		return nil, fmt.Errorf("list %q: %w", prefix, bucket.ErrNotFound)
	}
	return es, nil
}

// add puts file key (a feature file's path under the root, "a/b/c.npy")
// into tr with every directory on its way.
func (tr tree) add(path string) {
	dir := ""
	for {
		i := bytes.IndexByte([]byte(path[len(dir):]), '/')
		if i < 0 {
			break
		}
		name := path[len(dir) : len(dir)+i]
		sub := dir + name + "/"
		if !slices.ContainsFunc(tr[dir], func(e naming.Entry) bool { return e.Name == name }) {
			tr[dir] = append(tr[dir], naming.Entry{Name: name, Dir: true, Sub: sub})
		}
		if _, ok := tr[sub]; !ok {
			tr[sub] = nil
		}
		dir = sub
	}
	name := path[len(dir):]
	tr[dir] = append(tr[dir], naming.Entry{Name: name, Obj: bucket.Object{Key: path[:len(path)-4] + ".jpg", ETag: "e1"}})
}

// source is a fake Source: a feature is the key's hash as float32s;
// keys starting with "bad" are bad images.
type source struct {
	v      *features.View
	reads  atomic.Int64
	cached sync.Map // key -> true
	fail   error
}

func (s *source) feature(key string) []byte {
	l := s.v.Layer
	vals := make([]float32, l.Elements())
	r := rand.New(rand.NewPCG(uint64(len(key)), uint64(key[len(key)-5])))
	for i := range vals {
		vals[i] = r.Float32()
	}
	return api.EncodeNPY(l.Shape, vals, api.Float32)
}

func (s *source) Read(ctx context.Context, v *features.View, obj bucket.Object) ([]byte, error) {
	s.reads.Add(1)
	if s.fail != nil {
		return nil, s.fail
	}
	if bytes.HasPrefix([]byte(obj.Key), []byte("bad")) || bytes.Contains([]byte(obj.Key), []byte("/bad")) {
		return nil, fmt.Errorf("decode: %w", api.ErrBadImage)
	}
	s.cached.Store(obj.Key, true)
	return s.feature(obj.Key), nil
}

func (s *source) ReadCachedAt(v *features.View, obj bucket.Object, dst []byte, off int64) (int, bool) {
	if _, ok := s.cached.Load(obj.Key); !ok {
		return 0, false
	}
	return copy(dst, s.feature(obj.Key)[off:]), true
}

func testView() *features.View {
	l := api.Layer{Index: 1, Name: "layer1", Shape: []int64{3, 5}}
	return &features.View{Layer: l, Size: api.NPYSize(l.Shape, api.Float32)}
}

// TestScanOrdersAsDatasetFolder: classes sorted, a class's files at any
// depth in sorted(os.walk) order ("a/sub" before "a/sub b", a directory's
// files by name, upper case first), files directly in the root no rows,
// non-.npy names no rows; the version changes with an ETag.
func TestScanOrdersAsDatasetFolder(t *testing.T) {
	tr := tree{"": nil}
	for _, p := range []string{"dog/z.npy", "cat/sub b/1.npy", "cat/sub/2.npy", "cat/b.npy", "cat/B.npy", "top.npy", "cat/notes.txt", "dog/x/y/z.npy"} {
		tr.add(p)
	}
	ds, err := Scan(context.Background(), tr.list, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range ds.Rows {
		got = append(got, fmt.Sprintf("%s:%d", r.Path, r.Label))
	}
	want := []string{"cat/B.npy:0", "cat/b.npy:0", "cat/sub/2.npy:0", "cat/sub b/1.npy:0", "dog/z.npy:1", "dog/x/y/z.npy:1"}
	if !slices.Equal(got, want) || !slices.Equal(ds.Classes, []string{"cat", "dog"}) {
		t.Fatalf("rows %v classes %v; want %v", got, ds.Classes, want)
	}
	v1 := ds.Version
	tr["dog/"][0].Obj.ETag = "e2" // dog/z.npy replaced
	ds2, _ := Scan(context.Background(), tr.list, "", 0)
	if ds2.Version == v1 {
		t.Error("a replaced object kept the version")
	}
	if _, err := Scan(context.Background(), tr.list, "", 5); !errors.Is(err, ErrTooManyRows) {
		t.Errorf("6 rows with a limit of 5: %v; want ErrTooManyRows", err)
	}
	tr2 := tree{"": {{Name: "gone", Dir: true, Sub: "gone/"}}}
	if _, err := Scan(context.Background(), tr2.list, "", 0); !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("a class that fails to list: %v", err)
	}
}

// TestArrayReadAtAnyRange: every range of the array (header, parts of
// rows, across rows) reads what the whole file holds: the header numpy
// writes for (N, 3, 5) and each row's feature, a bad image's row NaN,
// reported to Failed once per read of it; another error fails the read.
func TestArrayReadAtAnyRange(t *testing.T) {
	tr := tree{"": nil}
	for _, p := range []string{"c0/a.npy", "c0/bad.npy", "c1/b.npy", "c1/c.npy"} {
		tr.add(p)
	}
	ds, err := Scan(context.Background(), tr.list, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	v := testView()
	src := &source{v: v}
	var failed atomic.Int64
	a := NewArray(&ArrayEnv{Source: src, Fetch: 2, Failed: func(*features.View, *Dataset, Row, error) { failed.Add(1) }}, v, ds)
	hdr := api.NPYHeader([]int64{4, 3, 5}, api.Float32)
	row := int64(60)
	if a.Size() != int64(len(hdr))+4*row {
		t.Fatalf("size %d", a.Size())
	}
	whole := make([]byte, a.Size()+10)
	n, err := a.ReadAt(context.Background(), whole, 0)
	if err != nil || int64(n) != a.Size() {
		t.Fatalf("read all: %d, %v", n, err)
	}
	whole = whole[:n]
	if !bytes.Equal(whole[:len(hdr)], hdr) {
		t.Fatalf("header %q", whole[:len(hdr)])
	}
	fh := int64(len(api.NPYHeader(v.Layer.Shape, api.Float32)))
	for i, r := range ds.Rows {
		got := whole[int64(len(hdr))+int64(i)*row:][:row]
		if r.Path == "c0/bad.npy" {
			for j := 0; j < len(got); j += 4 {
				if !math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(got[j:])))) {
					t.Fatalf("bad row not NaN")
				}
			}
			continue
		}
		if !bytes.Equal(got, src.feature(r.Obj.Key)[fh:]) {
			t.Errorf("row %d (%s) differs", i, r.Path)
		}
	}
	if failed.Load() != 1 {
		t.Errorf("Failed called %d times; want 1", failed.Load())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		off := rng.Int64N(a.Size() + 5)
		buf := make([]byte, rng.IntN(200)+1)
		n, err := a.ReadAt(context.Background(), buf, off)
		if err != nil {
			t.Fatal(err)
		}
		want := whole[min(off, int64(len(whole))):min(off+int64(len(buf)), int64(len(whole)))]
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("ReadAt(%d, %d): differs from the whole file's bytes", off, len(buf))
		}
	}
	src2 := &source{v: v, fail: errors.New("store down")}
	b := NewArray(&ArrayEnv{Source: src2, Fetch: 2}, v, ds)
	if _, err := b.ReadAt(context.Background(), make([]byte, 100), int64(len(hdr))); err == nil {
		t.Error("a failing store gave no error")
	}
}

// TestLabelsAndRowsAnyRange: the labels file is numpy's int64 .npy of the
// class indices and the row list one JSON line per row, at any range.
func TestLabelsAndRowsAnyRange(t *testing.T) {
	tr := tree{"": nil}
	for _, p := range []string{"c0/a.npy", "c1/b\xff.npy", "c2/c.npy", "c2/d.npy"} {
		tr.add(p)
	}
	ds, _ := Scan(context.Background(), tr.list, "", 0)
	for _, f := range []File{NewLabels(ds), NewRows(ds)} {
		whole := make([]byte, f.Size())
		if n, err := f.ReadAt(context.Background(), whole, 0); err != nil || int64(n) != f.Size() {
			t.Fatalf("%T: read %d of %d: %v", f, n, f.Size(), err)
		}
		for off := int64(0); off < f.Size(); off += 7 {
			buf := make([]byte, 13)
			n, _ := f.ReadAt(context.Background(), buf, off)
			if !bytes.Equal(buf[:n], whole[off:min(off+13, f.Size())]) {
				t.Fatalf("%T at %d differs", f, off)
			}
		}
		switch f.(type) {
		case *Labels:
			hdr := api.NPYHeaderOf("<i8", []int64{4})
			var labels []int64
			for i := len(hdr); i < len(whole); i += 8 {
				labels = append(labels, int64(binary.LittleEndian.Uint64(whole[i:])))
			}
			if !bytes.HasPrefix(whole, hdr) || !slices.Equal(labels, []int64{0, 1, 2, 2}) {
				t.Errorf("labels %v", labels)
			}
		case *Rows:
			lines := bytes.Split(bytes.TrimSuffix(whole, []byte("\n")), []byte("\n"))
			if len(lines) != 4 || !bytes.Contains(lines[1], []byte(`"key_b64"`)) || !bytes.Contains(lines[1], []byte(`"file_b64"`)) {
				t.Errorf("rows: %q", whole)
			}
		}
	}
}

// TestSnapshotsShareAndBound: one scan per key within the TTL, shared by
// concurrent callers; a new one after it; the bytes held within the bound.
func TestSnapshotsShareAndBound(t *testing.T) {
	now := time.Unix(0, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := NewSnapshots(time.Minute, 4096, clock)
	var scans atomic.Int64
	scan := func(n int) func(context.Context) (*Dataset, error) {
		return func(context.Context) (*Dataset, error) {
			scans.Add(1)
			time.Sleep(10 * time.Millisecond)
			d := &Dataset{Rows: make([]Row, n)}
			d.seal()
			return d, nil
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = s.Get(context.Background(), "a", scan(3)) })
	}
	wg.Wait()
	if scans.Load() != 1 {
		t.Errorf("8 concurrent Gets scanned %d times; want 1", scans.Load())
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	_, _ = s.Get(context.Background(), "a", scan(3))
	if scans.Load() != 2 {
		t.Errorf("after the TTL: %d scans; want 2", scans.Load())
	}
	for i := range 50 {
		_, _ = s.Get(context.Background(), fmt.Sprint(i), scan(5))
		if s.Held() > 4096 {
			t.Fatalf("held %d > 4096", s.Held())
		}
	}
}
