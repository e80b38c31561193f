package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// TestAugmentedViews: a mount with --augment 3 shows LAYER-aug/0..2 beside
// every layer and alias directory, each the bucket's tree with files of
// the plain file's size; a view file is the feature of its view (the fake
// extractor's ViewInput of the object and the view's spec with the
// object's identity), other for each view and the plain file, cached like
// any feature (a second read computes nothing); its extended attribute
// user.featurefs.augment is its parameters, drawn for the image's size
// without computing the feature; plain files have none.
func TestAugmentedViews(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/2.jpg", []byte("two"))
	aug := features.AugmentConfig{Views: 3, Seed: 5}
	e := testMount(t, b, func(c *testConfig) { c.Augment = aug })
	top := names(t, e.path("features", "tiny"))
	for _, want := range []string{"layer0/", "layer0-aug/", "layer2-aug/", "pool-aug/"} {
		if !slices.Contains(top, want) {
			t.Errorf("features/tiny lacks %s: %v", want, top)
		}
	}
	if views := names(t, e.path("features", "tiny", "layer0-aug")); !slices.Equal(views, []string{"0/", "1/", "2/"}) {
		t.Fatalf("layer0-aug holds %v; want 0 1 2", views)
	}
	l := e.x.Models()[0].Layers[0]
	obj, err := b.Stat(context.Background(), "d/1.jpg")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := os.ReadFile(e.path("features", "tiny", "layer0", "d", "1.npy"))
	if err != nil {
		t.Fatal(err)
	}
	seen := [][]byte{plain}
	for k := range aug.Views {
		p := e.path("features", "tiny", "layer0-aug", fmt.Sprint(k), "d", "1.npy")
		st, err := os.Stat(p)
		if err != nil || st.Size() != int64(len(plain)) {
			t.Fatalf("stat view %d: %v, %v; want the plain file's size %d", k, st, err, len(plain))
		}
		calls := e.x.Calls.Load()
		buf := make([]byte, 512)
		n, err := getxattr(p, augment.Xattr, buf)
		if err != nil {
			t.Fatalf("getxattr %s of view %d: %v", augment.Xattr, k, err)
		}
		if e.x.Calls.Load() != calls {
			t.Errorf("getxattr of view %d computed a feature", k)
		}
		var params augment.Params
		if err := json.Unmarshal(buf[:n], &params); err != nil {
			t.Fatalf("view %d's parameters %q: %v", k, buf[:n], err)
		}
		spec := aug.Spec(k)
		spec.Identity = augment.Identity(obj.Key, obj.ETag)
		if want := spec.Params(64+len("one"), 48, 224); params != want {
			t.Errorf("view %d's parameters %+v, want %+v", k, params, want)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := expectedNPY(l, fakes.ViewInput([]byte("one"), spec), e.x.DType()); !bytes.Equal(got, want) {
			t.Errorf("view %d of d/1.jpg: not its view's feature", k)
		}
		for _, s := range seen {
			if bytes.Equal(got, s) {
				t.Errorf("view %d of d/1.jpg equals another view's or the plain feature", k)
			}
		}
		seen = append(seen, got)
		if n, err := listxattr(p, buf); err != nil || string(buf[:n]) != augment.Xattr+"\x00" {
			t.Errorf("listxattr of view %d: %q, %v", k, buf[:max(n, 0)], err)
		}
	}
	// Cached under keys of their own: a second mount over the same cache
	// reads every view's bytes and computes nothing.
	e.flushCacheWrites(t)
	e2 := testMount(t, b, func(c *testConfig) { c.Cache = e.c; c.Augment = aug })
	for k := range aug.Views {
		got, err := os.ReadFile(e2.path("features", "tiny", "layer0-aug", fmt.Sprint(k), "d", "1.npy"))
		if err != nil || !bytes.Equal(got, seen[k+1]) {
			t.Errorf("view %d through a second mount of the cache: %v, same bytes %v", k, err, bytes.Equal(got, seen[k+1]))
		}
	}
	if n := e2.x.Calls.Load(); n != 0 {
		t.Errorf("%d extractions reading cached views through a second mount", n)
	}
	if _, err := getxattr(e.path("features", "tiny", "layer0", "d", "1.npy"), augment.Xattr, make([]byte, 64)); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("getxattr of a plain file: %v, want ENODATA", err)
	}
}

// TestAugmentedViewPrefetch: a read in a view directory prefetches that
// view of its neighbours, even when the plain layer's directory was just
// walked (a view's walks are their own): after reading layer0/d/1.npy and
// then layer0-aug/1/d/1.npy, view 1 of d/2.jpg is computed without being
// read, and reading it computes nothing more.
func TestAugmentedViewPrefetch(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/2.jpg", []byte("two"))
	aug := features.AugmentConfig{Views: 2, Seed: 1}
	e := testMount(t, b, func(c *testConfig) {
		c.Augment = aug
		c.Prefetch = features.PrefetchConfig{Mode: features.PrefetchDir}
	})
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "d", "1.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the plain layer's prefetch of d/2.jpg", func() bool { return e.x.CallsFor("d/2.jpg") >= 1 })
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0-aug", "1", "d", "1.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "view 1 of d/2.jpg prefetched", func() bool { return e.x.CallsFor("d/2.jpg") >= 2 })
	calls := e.x.Calls.Load()
	obj, err := b.Stat(context.Background(), "d/2.jpg")
	if err != nil {
		t.Fatal(err)
	}
	spec := aug.Spec(1)
	spec.Identity = augment.Identity(obj.Key, obj.ETag)
	got, err := os.ReadFile(e.path("features", "tiny", "layer0-aug", "1", "d", "2.npy"))
	if err != nil || !bytes.Equal(got, expectedNPY(e.x.Models()[0].Layers[0], fakes.ViewInput([]byte("two"), spec), e.x.DType())) {
		t.Fatalf("view 1 of d/2.jpg: %v, or not its view's feature", err)
	}
	if n := e.x.Calls.Load() - calls; n != 0 {
		t.Errorf("reading a prefetched view computed %d features", n)
	}
}

// TestAugmentJSONL: a view directory lists augment.jsonl first; its size
// (from the listing: stat fetches nothing) is the size of what a read
// returns; each line is a view file's name and the same parameters as its
// extended attribute, padded with spaces; a bad image's line says so; the
// plain layer has no such file.
func TestAugmentJSONL(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/2.jpg", []byte("two, longer"))
	b.put("d/3.jpg", []byte("BAD image"))
	b.put("d/sub/4.jpg", []byte("four"))
	e := testMount(t, b, func(c *testConfig) { c.Augment = features.AugmentConfig{Views: 2, Seed: 9} })
	dir := e.path("features", "tiny", "layer1-aug", "1", "d")
	if got := names(t, dir); !slices.Equal(got, []string{"1.npy", "2.npy", "3.npy", "augment.jsonl", "sub/"}) {
		t.Errorf("view directory lists %v", got)
	}
	gets := b.gets.Load()
	st, err := os.Stat(dir + "/augment.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if b.gets.Load() != gets {
		t.Errorf("stat of augment.jsonl fetched %d objects", b.gets.Load()-gets)
	}
	data, err := os.ReadFile(dir + "/augment.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != st.Size() {
		t.Errorf("augment.jsonl: stat says %d bytes, a read returns %d", st.Size(), len(data))
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("augment.jsonl has %d lines, want 3:\n%s", len(lines), data)
	}
	for i, name := range []string{"1.npy", "2.npy"} {
		var got struct {
			File string `json:"file"`
			augment.Params
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %d %q: %v", i, lines[i], err)
		}
		buf := make([]byte, 512)
		n, err := getxattr(dir+"/"+name, augment.Xattr, buf)
		if err != nil {
			t.Fatal(err)
		}
		var want augment.Params
		if err := json.Unmarshal(buf[:n], &want); err != nil {
			t.Fatal(err)
		}
		if got.File != name || got.Params != want || got.View != 1 || got.Seed != 9 {
			t.Errorf("line %d: %+v; want %s with %+v (view 1, seed 9)", i, got, name, want)
		}
		if !strings.HasSuffix(lines[i], " ") {
			t.Errorf("line %d is not padded: %q", i, lines[i])
		}
	}
	if !strings.Contains(lines[2], `"file":"3.npy","error":"not an image"`) {
		t.Errorf("the bad image's line: %q", lines[2])
	}
	if _, err := os.Stat(e.path("features", "tiny", "layer1", "d", "augment.jsonl")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of augment.jsonl in a plain layer: %v, want ENOENT", err)
	}
}

// TestFeatureSpaceViews: --feature-augment 2 shows LAYER-faug/0..1; a
// file there is its plain feature with the view's ops applied
// (augment.ApplyFeature with DrawFeature's numbers for the object), the
// same shape and size; it costs no extraction beyond the plain feature's
// (one, shared: read first, the view computes the plain feature, which the
// plain file then reads from the cache); its extended attribute is its
// numbers.
func TestFeatureSpaceViews(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/2.jpg", []byte("two"))
	aug := features.AugmentConfig{FeatureViews: 2, Seed: 4, FeatureOps: augment.FeatureOps}
	e := testMount(t, b, func(c *testConfig) { c.Augment = aug })
	if got := names(t, e.path("features", "tiny", "layer0-faug")); !slices.Equal(got, []string{"0/", "1/"}) {
		t.Fatalf("layer0-faug holds %v", got)
	}
	if slices.Contains(names(t, e.path("features", "tiny")), "layer0-aug/") {
		t.Errorf("image views shown without --augment")
	}
	l := e.x.Models()[0].Layers[0]
	for _, key := range []string{"d/1.jpg", "d/2.jpg"} {
		obj, err := b.Stat(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		data, _, _ := b.Get(context.Background(), key, 0)
		plain := expectedNPY(l, data, e.x.DType())
		shape, dt, vals, err := api.DecodeNPY(plain)
		if err != nil {
			t.Fatal(err)
		}
		p := augment.DrawFeature(augment.Identity(obj.Key, obj.ETag), 1, 4, augment.FeatureOps)
		augment.ApplyFeature(vals, p)
		want := api.EncodeNPY(shape, vals, dt)
		calls := e.x.Calls.Load()
		name := strings.TrimSuffix(path.Base(key), ".jpg") + ".npy"
		got, err := os.ReadFile(e.path("features", "tiny", "layer0-faug", "1", "d", name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s's feature view 1: %v, equal to its definition: %v", key, err, bytes.Equal(got, want))
		}
		if bytes.Equal(got, plain) {
			t.Errorf("%s's feature view 1 is its plain feature", key)
		}
		if got, err := os.ReadFile(e.path("features", "tiny", "layer0", "d", name)); err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s's plain feature after its view: %v", key, err)
		}
		if n := e.x.Calls.Load() - calls; n != 1 {
			t.Errorf("%s: %d extractions for its feature view and plain feature, want 1", key, n)
		}
		buf := make([]byte, 512)
		n, err := getxattr(e.path("features", "tiny", "layer0-faug", "1", "d", name), augment.Xattr, buf)
		var gotP augment.FeatureParams
		if err != nil || json.Unmarshal(buf[:n], &gotP) != nil || !slices.Equal(gotP.Ops, p.Ops) || gotP.Brightness != p.Brightness || gotP.Bits != p.Bits || gotP.View != 1 {
			t.Errorf("%s's feature view's attribute %q, %v; want %+v", key, buf[:max(n, 0)], err, p)
		}
	}
}

// getxattr and listxattr are the system calls retried while interrupted,
// as Python's os and Go's os package retry them: the kernel answers EINTR
// for a FUSE request a signal (the Go runtime's, here) interrupted.
func getxattr(path, name string, buf []byte) (int, error) {
	for {
		n, err := syscall.Getxattr(path, name, buf)
		if err != syscall.EINTR {
			return n, err
		}
	}
}

func listxattr(path string, buf []byte) (int, error) {
	for {
		n, err := syscall.Listxattr(path, buf)
		if err != syscall.EINTR {
			return n, err
		}
	}
}
