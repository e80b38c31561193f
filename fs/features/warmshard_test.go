package features

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// Warm with Shard k/3, three pipelines (hosts) with caches of their own
// sharing one directory feature store: each extracts exactly the images
// whose key spec.ShardOf puts in its part, counts the rest as
// OtherShards, and the three together extract every image once. A rerun
// of one part on a fresh cache extracts nothing (the store has it all),
// and the zero Shard warms everything.
func TestWarmShardsSplitTheSource(t *testing.T) {
	objs := map[string]string{}
	for i := range 60 {
		objs[fmt.Sprintf("train/c%d/img%03d.jpg", i%4, i)] = fmt.Sprintf("pixels%d", i)
	}
	objs["train/c0/notes.txt"] = "not an image: in no part"
	b, _ := localBucket(t, objs)
	storeDir := filepath.Join(t.TempDir(), "fst")
	ctx := context.Background()
	warm := func(s spec.Shard) (WarmResult, *fakeExtractor) {
		x := newFakeExtractor()
		fst := openFeatureStore(t, storeDir)
		p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), FeatureStore: fst})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		res, err := p.Warm(ctx, WarmOptions{Model: "tiny", Layer: "layer1", Shard: s})
		if err != nil {
			t.Fatalf("warm %s: %v", s, err)
		}
		if err := fst.Flush(ctx); err != nil { // as featurefs warm waits for its writes
			t.Fatal(err)
		}
		return res, x
	}

	var all []string
	for k := range 3 {
		s := spec.Shard{Index: k, Count: 3}
		var want []string
		for key := range objs {
			if spec.IsImage(key, nil) && spec.ShardOf(key, 3) == k {
				want = append(want, key)
			}
		}
		slices.Sort(want)
		res, x := warm(s)
		if got := x.Keys(); !slices.Equal(got, want) {
			t.Errorf("shard %s extracted %v, want %v", s, got, want)
		}
		n := int64(len(want))
		if res.Total != n || res.Extracted != n || res.Cached != 0 || res.OtherShards != 60-n || x.Calls.Load() != n {
			t.Errorf("shard %s: %+v, %d extractions; want %d total and extracted, %d other shards'", s, res, x.Calls.Load(), n, 60-n)
		}
		t.Logf("shard %s: %d of 60 images", s, n)
		all = append(all, want...)
	}
	slices.Sort(all)
	if len(all) != 60 || len(slices.Compact(all)) != 60 {
		t.Errorf("the three parts hold %d images (%d distinct), want the 60, each once", len(all), len(slices.Compact(all)))
	}

	res, x := warm(spec.Shard{Index: 1, Count: 3})
	if x.Calls.Load() != 0 || res.Extracted != 0 || res.Cached != res.Total || res.Total == 0 {
		t.Errorf("rerun of shard 1/3 on a fresh cache: %+v, %d extractions; want everything found in the store", res, x.Calls.Load())
	}
	res, x = warm(spec.Shard{})
	if x.Calls.Load() != 0 || res.Total != 60 || res.Cached != 60 || res.OtherShards != 0 {
		t.Errorf("unsharded warm after the three parts: %+v, %d extractions; want 60 found, none extracted", res, x.Calls.Load())
	}
}

// A member of an archive shown as a directory has its archive's shard
// unit, in any case of the extension; a loose object, or any key when no
// archive format is shown, is its own.
func TestShardUnit(t *testing.T) {
	tz := []string{"tar", "zip"}
	for _, c := range []struct {
		key      string
		archives []string
		want     string
	}{
		{"train/cat.tar/a.jpg", tz, "train/cat.tar"},
		{"train/cat.tar/sub/b.jpg", tz, "train/cat.tar"},
		{"train/CAT.Zip/b.jpg", tz, "train/CAT.Zip"},
		{"shards/s1.tar/inner.tar/c.jpg", tz, "shards/s1.tar"},
		{"train/cat.tar/a.jpg", []string{"zip"}, "train/cat.tar/a.jpg"},
		{"train/cat.tar/a.jpg", nil, "train/cat.tar/a.jpg"},
		{"train/cat/a.jpg", tz, "train/cat/a.jpg"},
		{"train/.tar/a.jpg", tz, "train/.tar/a.jpg"}, // no stem: not an archive
		{"train/cat.tar", tz, "train/cat.tar"},
	} {
		if got := ShardUnit(c.key, c.archives); got != c.want {
			t.Errorf("ShardUnit(%q, %v) = %q, want %q", c.key, c.archives, got, c.want)
		}
	}
}

// Warm with Shard k/3 over tars shown as directories: every member of an
// archive is warmed by the one part that owns the archive's key, and the
// three parts together warm every member once.
func TestWarmShardsKeepArchivesWhole(t *testing.T) {
	objs := map[string]string{}
	members := map[string][]string{} // archive key -> member keys
	for a := range 12 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		arch := fmt.Sprintf("train/c%02d.tar", a)
		for m := range 4 {
			name := fmt.Sprintf("img%d.jpg", m)
			data := fmt.Sprintf("pixels %d %d", a, m)
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(data)); err != nil {
				t.Fatal(err)
			}
			members[arch] = append(members[arch], arch+"/"+name)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		objs[arch] = buf.String()
	}
	b, _ := localBucket(t, objs)
	ab := archive.Wrap(b, archive.Config{Formats: []string{"tar"}})
	ctx := context.Background()
	owner := map[string]int{} // member key -> the part that extracted it
	for k := range 3 {
		x := newFakeExtractor()
		p, err := New(Config{Bucket: ab, Extractor: x, Cache: fakes.NewCache()})
		if err != nil {
			t.Fatal(err)
		}
		s := spec.Shard{Index: k, Count: 3}
		res, err := p.Warm(ctx, WarmOptions{Model: "tiny", Layer: "layer1", Shard: s, Archives: []string{"tar"}})
		p.Close()
		if err != nil {
			t.Fatalf("warm %s: %v", s, err)
		}
		for _, key := range x.Keys() {
			if prev, ok := owner[key]; ok {
				t.Errorf("%s extracted by parts %d and %d", key, prev, k)
			}
			owner[key] = k
		}
		t.Logf("shard %s: %+v", s, res)
	}
	parts := map[int]bool{}
	for arch, ms := range members {
		want := spec.ShardOf(arch, 3)
		parts[want] = true
		for _, m := range ms {
			if got, ok := owner[m]; !ok || got != want {
				t.Errorf("%s: extracted by part %d (%v), want part %d, its archive's", m, got, ok, want)
			}
		}
	}
	if len(owner) != 48 || len(parts) < 2 {
		t.Errorf("%d members extracted (want 48), archives in %d parts (want at least 2 of 3)", len(owner), len(parts))
	}
}
