package test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/fs/archive/archivetest"
	"github.com/featurefs/featurefs/test/testenv"
)

// packTar returns a tar of files (name -> bytes), in name order.
func packTar(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range sortedNames(files) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// packZip returns a zip of files with the given method.
func packZip(t *testing.T, files map[string][]byte, method uint16) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range sortedNames(files) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sortedNames(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestArchivesAreDirectories (issue 27, item 3) puts the same generated
// images in a MinIO bucket as loose objects (loose/train/<class>/<img>),
// as one tar per class (packed/train/<class>.tar, ImageNet's layout), as
// one zip per class with deflated members (zipped/train/<class>.zip), as
// a WebDataset shard with .cls labels (shards/000000.tar) and as bad
// archives. Through a kernel mount: DatasetFolder over packed/train finds
// the classes and every sample unchanged; every member's feature is
// byte-identical to its loose image's; the shard's labels read beside its
// features; each bad archive fails alone (EIO for its directory or member,
// its sound members and the other archives read).
func TestArchivesAreDirectories(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "0")
	images := d.images("train/")
	byClass := map[string]map[string][]byte{}
	shard := map[string][]byte{}
	labels := map[string]string{}
	classIdx := map[string]int{}
	for i, c := range d.Classes {
		classIdx[c] = i
	}
	for i, o := range images {
		b, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(o.Key)))
		if err != nil {
			t.Fatal(err)
		}
		if byClass[o.Class] == nil {
			byClass[o.Class] = map[string][]byte{}
		}
		byClass[o.Class][path.Base(o.Key)] = b
		k := "s" + string(rune('0'+i/10)) + string(rune('0'+i%10))
		shard[k+path.Ext(o.Key)] = b
		shard[k+".cls"] = []byte(itoaTest(classIdx[o.Class]))
		shard[k+".json"] = []byte(`{"key": "` + o.Key + `"}`)
		labels[k] = o.Key
	}
	shard["README"] = []byte("not a sample")

	srv, env := minioBucket(t, "packs", "loose/", d.Dir)
	for c, files := range byClass {
		srv.Put(t, "packs", "packed/train/"+c+".tar", packTar(t, files))
		srv.Put(t, "packs", "zipped/train/"+c+".zip", packZip(t, files, zip.Deflate))
	}
	srv.Put(t, "packs", "shards/000000.tar", packTar(t, shard))

	// Bad archives, each beside a good one.
	first := images[0]
	img, _ := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(first.Key)))
	three := packTar(t, map[string][]byte{"a.jpg": img, "b.jpg": img, "c.jpg": img})
	cut := len(three) - 1024 - 512 - 10 // in c.jpg's data (two zero blocks end a tar; data padded to 512)
	srv.Put(t, "packs", "bad/trunc.tar", three[:cut])
	srv.Put(t, "packs", "bad/evil.tar", packTar(t, map[string][]byte{"../up.jpg": img, "/abs.jpg": img, "fine.jpg": img}))
	z := packZip(t, map[string][]byte{"x.jpg": img}, zip.Store)
	srv.Put(t, "packs", "bad/cut.zip", z[:len(z)-30])
	corrupt := packZip(t, map[string][]byte{"c.jpg": img, "d.jpg": img}, zip.Store)
	corrupt[30+len("c.jpg")+500] ^= 0xff
	srv.Put(t, "packs", "bad/corrupt.zip", corrupt)
	srv.Put(t, "packs", "bad/good.tar", packTar(t, map[string][]byte{"ok.jpg": img}))
	// The zip64 locator that once panicked the mount (offset 2^63-1), and
	// members declaring 150 times the bytes they inflate to (an image).
	z64, err := archivetest.Zip64(z, 1<<63-1)
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "packs", "bad/zip64.zip", z64)
	over, err := archivetest.OverDeclared(4, img, uint64(len(img))*150) // within the bomb ratio
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "packs", "bad/over.zip", over)

	m := testMount(t, mountConfig{Source: "s3://packs", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})
	layer := m.Layer(testLayer)

	// DatasetFolder over the per-class tars: the classes and every sample.
	r := runLoaderCheck(t, filepath.Join(layer, "packed", "train"), "--workers", "2", "--batch", "2")
	var classes []string
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	if !reflect.DeepEqual(r.Classes, classes) {
		t.Fatalf("DatasetFolder classes %v, want %v", r.Classes, classes)
	}
	if len(r.Samples) != len(images) || len(r.Loaded) != len(images) {
		t.Errorf("DatasetFolder: %d samples, DataLoader %d, want %d", len(r.Samples), len(r.Loaded), len(images))
	}

	// Every member's feature is its loose image's, byte for byte.
	names := featureNames(d.keys(t))
	for _, o := range images {
		loose, err := os.ReadFile(filepath.Join(layer, "loose", filepath.FromSlash(names[o.Key])))
		if err != nil {
			t.Fatal(err)
		}
		base := path.Base(names[o.Key])
		for _, p := range []string{filepath.Join(layer, "packed", "train", o.Class, base), filepath.Join(layer, "zipped", "train", o.Class, base)} {
			got, err := os.ReadFile(p)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			if !bytes.Equal(got, loose) {
				t.Errorf("%s: %d bytes differ from the loose image's feature", p, len(got))
			}
		}
	}

	// The WebDataset shard: k.npy beside k.cls and k.json, README left out.
	dir := filepath.Join(layer, "shards", "000000")
	got, err := readDirNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	var want []string
	for k := range labels {
		want = append(want, k+".cls", k+".json", k+".npy")
	}
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("shard lists %q, want %q", got, want)
	}
	for k, key := range labels {
		cls, err := os.ReadFile(filepath.Join(dir, k+".cls"))
		if err != nil || string(cls) != string(shard[k+".cls"]) {
			t.Errorf("%s.cls = %q, %v; want %q", k, cls, err, shard[k+".cls"])
		}
		feat, err := os.ReadFile(filepath.Join(dir, k+".npy"))
		loose, _ := os.ReadFile(filepath.Join(layer, "loose", filepath.FromSlash(names[key])))
		if err != nil || !bytes.Equal(feat, loose) {
			t.Errorf("%s.npy: %v, or not the loose image's feature", k, err)
		}
	}

	// README's Dataset over the shard (.npy + .cls) yields every sample
	// with its label.
	shardDataset(t, dir, labels, shard)

	// Bad archives fail alone.
	bad := filepath.Join(layer, "bad")
	if got, _ := readDirNames(filepath.Join(bad, "trunc")); !slices.Equal(got, []string{"a.npy", "b.npy"}) {
		t.Errorf("truncated tar lists %q, want its whole members a.npy, b.npy", got)
	}
	if got, _ := readDirNames(filepath.Join(bad, "evil")); !slices.Equal(got, []string{"fine.npy"}) {
		t.Errorf("tar with escaping paths lists %q, want fine.npy", got)
	}
	if _, err := readDirNames(filepath.Join(bad, "cut")); !errors.Is(err, syscall.EIO) {
		t.Errorf("zip without its end record: %v, want EIO", err)
	}
	if _, err := os.ReadFile(filepath.Join(bad, "corrupt", "c.npy")); !errors.Is(err, syscall.EIO) {
		t.Errorf("member failing its CRC: %v, want EIO", err)
	}
	if _, err := readDirNames(filepath.Join(bad, "zip64")); !errors.Is(err, syscall.EIO) {
		t.Errorf("zip64 locator at 2^63-1: %v, want EIO", err)
	}
	if _, err := os.ReadFile(filepath.Join(bad, "over", "m0.npy")); !errors.Is(err, syscall.EIO) {
		t.Errorf("member declaring 150x the %d bytes it inflates to: %v, want EIO", len(img), err)
	}
	for _, p := range []string{"trunc/a.npy", "evil/fine.npy", "corrupt/d.npy", "good/ok.npy"} {
		b, err := os.ReadFile(filepath.Join(bad, filepath.FromSlash(p)))
		if err != nil || len(b) == 0 {
			t.Errorf("%s beside bad archives: %v", p, err)
		}
	}
	log, _ := os.ReadFile(m.Log)
	for _, k := range []string{"bad/trunc.tar", "bad/evil.tar", "bad/cut.zip", "bad/zip64.zip"} {
		if !strings.Contains(string(log), k) {
			t.Errorf("the log does not name %s", k)
		}
	}
}

func itoaTest(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoaTest(i/10) + string(rune('0'+i%10))
}

// TestArchivesThroughFeatureStoreAndServe: archive members through the
// feature store (a mount writes each member's feature to
// PREFIX/<model>-<digest12>/<layer>/<archive key>/<member>.npy and a
// second mount with a cold cache reads them all with no extraction) and
// through `featurefs serve` + `mount --remote` (the same bytes, and a
// WebDataset shard's label file beside its feature).
func TestArchivesThroughFeatureStoreAndServe(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "0")
	srv, env := minioBucket(t, "packs", "loose/", d.Dir)
	srv.CreateBucket(t, "features")
	byClass := map[string]map[string][]byte{}
	names := map[string]string{} // member key -> its path under the layer
	looseNames := featureNames(d.keys(t))
	for _, o := range d.images("train/") {
		b, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(o.Key)))
		if err != nil {
			t.Fatal(err)
		}
		if byClass[o.Class] == nil {
			byClass[o.Class] = map[string][]byte{}
		}
		byClass[o.Class][path.Base(o.Key)] = b
		names["packed/train/"+o.Class+".tar/"+path.Base(o.Key)] = "packed/train/" + o.Class + "/" + path.Base(looseNames[o.Key])
	}
	for c, files := range byClass {
		srv.Put(t, "packs", "packed/train/"+c+".tar", packTar(t, files))
	}
	srv.Put(t, "packs", "shards/000000.tar", packTar(t, map[string][]byte{"k.jpg": byClass[d.images("train/")[0].Class][path.Base(d.images("train/")[0].Key)], "k.cls": []byte("7")}))
	store := []string{"--endpoint-url", srv.Endpoint, "--feature-store", "s3://features/shared", "--prefetch", "off"}

	a := testMount(t, mountConfig{Source: "s3://packs", Env: env, Args: store})
	fromA := readLayer(t, a, names)
	waitStoreField(t, a, "puts", int64(len(names)))
	layerDir := "shared/" + modelName + "-" + layerDigest12(t, testenv.Model(t, modelName), testLayer) + "/" + testLayer + "/"
	for key := range names {
		stem := strings.TrimSuffix(key, path.Ext(key))
		b, _ := storeFeature(t, srv, "features", layerDir+stem+".npy")
		if !bytes.Equal(b, fromA[key]) {
			t.Errorf("feature store object of %s differs from the mount's file", key)
		}
	}

	b := testMount(t, mountConfig{Source: "s3://packs", Env: env, Args: store})
	fromB := readLayer(t, b, names)
	if n := extractionCount(t, mountStats(t, b)); n != 0 {
		t.Errorf("second mount: %d extractions, want 0 (all from the feature store)", n)
	}

	s := startServe(t, "s3://packs", env, "--endpoint-url", srv.Endpoint)
	r := testMount(t, mountConfig{Args: s.remoteArgs(), NoModel: true})
	fromR := readLayer(t, r, names)
	// The shard's label through the server (GET /v1/object), beside its feature.
	if got, err := readDirNames(filepath.Join(r.Layer(testLayer), "shards", "000000")); err != nil || !slices.Equal(got, []string{"k.cls", "k.npy"}) {
		t.Errorf("remote mount lists the shard as %q, %v; want k.cls, k.npy", got, err)
	}
	if cls, err := os.ReadFile(filepath.Join(r.Layer(testLayer), "shards", "000000", "k.cls")); err != nil || string(cls) != "7" {
		t.Errorf("remote mount: k.cls = %q, %v; want 7", cls, err)
	}
	for key := range names {
		if !bytes.Equal(fromA[key], fromB[key]) || !bytes.Equal(fromA[key], fromR[key]) {
			t.Errorf("%s: the mounts disagree (store %v, remote %v)", key, bytes.Equal(fromA[key], fromB[key]), bytes.Equal(fromA[key], fromR[key]))
		}
	}
}

// TestWarmArchives: `featurefs warm --source` over a directory of
// per-class tars and a bad archive computes every member (the bad archive
// is skipped, not the end of the walk), and a mount over the warmed cache
// reads every member with no extraction.
func TestWarmArchives(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "0")
	src := t.TempDir()
	byClass := map[string]map[string][]byte{}
	var names []string
	looseNames := featureNames(d.keys(t))
	for _, o := range d.images("train/") {
		b, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(o.Key)))
		if err != nil {
			t.Fatal(err)
		}
		if byClass[o.Class] == nil {
			byClass[o.Class] = map[string][]byte{}
		}
		byClass[o.Class][path.Base(o.Key)] = b
		names = append(names, filepath.Join("train", o.Class, path.Base(looseNames[o.Key])))
	}
	if err := os.MkdirAll(filepath.Join(src, "train"), 0o755); err != nil {
		t.Fatal(err)
	}
	for c, files := range byClass {
		if err := os.WriteFile(filepath.Join(src, "train", c+".tar"), packTar(t, files), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "train", "aaa-broken.zip"), []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	out, code := runWarm(t, "--source", src, "--model", modelName+"="+testenv.Model(t, modelName), "--layer", testLayer,
		"--cache-dir", cacheDir, "--device", "cpu")
	t.Logf("featurefs warm --source:\n%s", out)
	// The bad archive is skipped and counted among the failures by its
	// path, as warm through a mount counts it (issue 36 item 15): exit 1.
	if want := fmt.Sprintf("%d of %d done", len(names), len(names)+1); code != 1 || !strings.Contains(out, want) ||
		!strings.Contains(out, "1 failed") || !strings.Contains(out, "train/aaa-broken.zip") {
		t.Errorf("warm over per-class tars and a bad archive: exit %d, want 1, %q, 1 failed naming train/aaa-broken.zip", code, want)
	}
	m := testMount(t, mountConfig{Source: src, CacheDir: cacheDir, Args: []string{"--prefetch", "off"}})
	for _, n := range names {
		if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), n)); err != nil {
			t.Fatalf("read %s: %v", n, err)
		}
	}
	if n := extractionCount(t, mountStats(t, m)); n != 0 {
		t.Errorf("mount over the warmed cache extracted %d times, want 0", n)
	}
}

// shardDataset runs README's WebDataset example (the Shard class, as
// printed there) over dir with Debian's PyTorch and checks each sample's
// label and shape.
func shardDataset(t *testing.T, dir string, labels map[string]string, shard map[string][]byte) {
	t.Helper()
	py := testenv.RequireTorch(t)
	readme, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```python\nimport os, numpy as np, torch\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(code, "class Shard") {
		t.Fatal("README has no Shard example")
	}
	script := "import os, json, numpy as np, torch\n" + code + `
import sys
ds = Shard(sys.argv[1])
print(json.dumps([[list(x.shape), y] for x, y in (ds[i] for i in range(len(ds)))]))
`
	out, err := exec.Command(py, "-c", script, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("README's Shard example: %v\n%s", err, out)
	}
	var got [][2]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("README's Shard example printed %s: %v", out, err)
	}
	var keys []string
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(got) != len(keys) {
		t.Fatalf("README's Shard example: %d samples, want %d", len(got), len(keys))
	}
	for i, k := range keys {
		if lab, _ := got[i][1].(float64); fmt.Sprint(int(lab)) != string(shard[k+".cls"]) {
			t.Errorf("sample %s: label %v, want %s", k, got[i][1], shard[k+".cls"])
		}
		if shape := fmt.Sprint(got[i][0]); shape != fmt.Sprint(toAny(testLayerShape)) {
			t.Errorf("sample %s: shape %s, want %v", k, shape, testLayerShape)
		}
	}
}

func toAny(s []int64) []any {
	var out []any
	for _, v := range s {
		out = append(out, float64(v))
	}
	return out
}

// TestWarmMountCountsBadArchive: `featurefs warm MOUNT/.../train` over a
// directory holding a good tar, a loose image and a garbage bad.tar reads
// every feature, skips the bad archive (EIO for its directory) and counts
// it among the failures, naming it, with exit 1. At ca82ffd the listing
// error ended the walk: "0 of 0 done ..., 0 failed" (nothing read, the
// archive neither counted nor listed), exit 1.
func TestWarmMountCountsBadArchive(t *testing.T) {
	src := t.TempDir()
	train := filepath.Join(src, "train")
	img := func(name string, seed int) []byte {
		p := filepath.Join(t.TempDir(), name)
		writeJPEG(t, p, 64, 48, seed)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := os.MkdirAll(train, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(train, "good.tar"), packTar(t, map[string][]byte{"a.jpg": img("a.jpg", 1), "b.jpg": img("b.jpg", 2)}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(train, "bad.tar"), bytes.Repeat([]byte("garbage!"), 200), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJPEG(t, filepath.Join(train, "c.jpg"), 64, 48, 3)
	m := testMount(t, mountConfig{Source: src, Args: []string{"--prefetch", "off"}})
	out, code := runWarm(t, filepath.Join(m.Layer(testLayer), "train"))
	t.Logf("featurefs warm MOUNT/.../train:\n%s", out)
	if code != 1 || !strings.Contains(out, "3 of 4 done") || !strings.Contains(out, ", 1 failed") {
		t.Errorf("warm over a bad archive: exit %d, want 1 and \"3 of 4 done ..., 1 failed\"", code)
	}
	var listed bool
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "  ") && strings.Contains(l, "bad") && strings.Contains(l, "input/output error") {
			listed = true
		}
	}
	if !listed {
		t.Errorf("the failure list does not name the bad archive with its EIO")
	}
}
