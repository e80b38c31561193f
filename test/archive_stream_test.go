package test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/test/testenv"
)

// streamSet is a generated dataset in MinIO as loose objects
// (loose/train/<class>/<img>), as one tar per class
// (packed/train/<class>.tar) and a tar cut in its third member's bytes
// (packed/train/cut.tar: a.jpg and b.jpg whole, c.jpg past the cut).
type streamSet struct {
	srv     *testenv.MinIO
	env     []string
	looseOf map[string]string // packed feature path (under the layer) -> its loose image's
	tars    int
	tarKeys []string // the tars' object keys
}

func newStreamSet(t *testing.T) streamSet {
	t.Helper()
	d := genDataset(t, "--classes", "2", "--train", "5", "--val", "0")
	srv, env := minioBucket(t, "packs", "loose/", d.Dir)
	s := streamSet{srv: srv, env: env, looseOf: map[string]string{}}
	names := featureNames(d.keys(t))
	byClass := map[string]map[string][]byte{}
	var first []byte
	for _, o := range d.images("train/") {
		b, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(o.Key)))
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = b
		}
		if byClass[o.Class] == nil {
			byClass[o.Class] = map[string][]byte{}
		}
		byClass[o.Class][path.Base(o.Key)] = b
		s.looseOf[path.Join("packed/train", o.Class, path.Base(names[o.Key]))] = path.Join("loose", names[o.Key])
	}
	for c, files := range byClass {
		srv.Put(t, "packs", "packed/train/"+c+".tar", packTar(t, files))
		s.tars++
		s.tarKeys = append(s.tarKeys, "packed/train/"+c+".tar")
	}
	three := packTar(t, map[string][]byte{"a.jpg": first, "b.jpg": first, "c.jpg": first})
	srv.Put(t, "packs", "packed/train/cut.tar", three[:len(three)-1024-512-10]) // in c.jpg's bytes
	s.tars++
	s.tarKeys = append(s.tarKeys, "packed/train/cut.tar")
	return s
}

// TestWarmStreamsEachArchiveOnce (issue 27, item 3): `featurefs warm
// --source` over per-class tars in MinIO reads each archive with one
// GetObject (MinIO's own count), its index built in the stream's pass; a
// tar cut in a member's bytes warms the members before the cut and only
// those. A mount over the warmed cache reads every member with no
// extraction, each feature byte-identical to its loose image's (computed
// by a mount of the loose objects), and c.jpg of the cut tar is not there.
func TestWarmStreamsEachArchiveOnce(t *testing.T) {
	s := newStreamSet(t)
	model := testenv.Model(t, modelName)
	cacheDir := filepath.Join(t.TempDir(), "cache")
	before := s.srv.GetObjects(t)
	cmd := exec.Command(featurefsBin(t), "warm", "--source", "s3://packs", "--endpoint-url", s.srv.Endpoint,
		"--model", modelName+"="+model, "--layer", testLayer, "--cache-dir", cacheDir, "--device", "cpu", "packed/")
	cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t)), s.env...)
	out, err := cmd.CombinedOutput()
	t.Logf("featurefs warm --source:\n%s", out)
	members := len(s.looseOf) + 2 // and a.jpg, b.jpg of cut.tar
	if want := fmt.Sprintf("%d of %d done", members, members); err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("warm: %v, want exit 0 and %q", err, want)
	}
	if gets := s.srv.GetObjects(t) - before; gets != int64(s.tars) {
		t.Errorf("warm of %d tars (%d members) took %d GetObject requests, want %d: one per archive", s.tars, members, gets, s.tars)
	}

	m := testMount(t, mountConfig{Source: "s3://packs", Env: s.env, CacheDir: cacheDir,
		Args: []string{"--endpoint-url", s.srv.Endpoint, "--prefetch", "off"}})
	layer := m.Layer(testLayer)
	packed := map[string][]byte{}
	for p := range s.looseOf {
		b, err := os.ReadFile(filepath.Join(layer, filepath.FromSlash(p)))
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		packed[p] = b
	}
	for _, n := range []string{"a.npy", "b.npy"} {
		if _, err := os.ReadFile(filepath.Join(layer, "packed", "train", "cut", n)); err != nil {
			t.Errorf("cut.tar's %s (before the cut): %v", n, err)
		}
	}
	if _, err := os.Stat(filepath.Join(layer, "packed", "train", "cut", "c.npy")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cut.tar's c.npy (past the cut): %v, want it absent", err)
	}
	st := mountStats(t, m)
	if n := extractionCount(t, st); n != 0 {
		t.Errorf("mount over the warmed cache extracted %d times, want 0", n)
	}
	// Byte-identical to the loose images' features, which this mount
	// computes.
	for p, lp := range s.looseOf {
		loose, err := os.ReadFile(filepath.Join(layer, filepath.FromSlash(lp)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(packed[p], loose) {
			t.Errorf("%s: %d bytes, not %s's feature", p, len(packed[p]), lp)
		}
	}
}

// TestShardedWarmReadsOnlyItsArchives (issue 27, item 4 with item 3): a
// `featurefs warm --shard K/N` reads only the archives its part owns (an
// archive is one shard unit): one GetObject per owned tar by MinIO's
// count, none for the others' (not listed, not streamed), which the
// summary counts as left to the other shards; the parts together warm
// every member once.
func TestShardedWarmReadsOnlyItsArchives(t *testing.T) {
	s := newStreamSet(t)
	model := testenv.Model(t, modelName)
	const n = 3
	owned := make([]int, n)
	for _, k := range s.tarKeys {
		owned[spec.ShardOf(k, n)]++
	}
	if slices.Contains(owned, len(s.tarKeys)) {
		t.Fatalf("one part of %d owns all %d tars %v: the test would prove nothing", n, len(s.tarKeys), owned)
	}
	members := len(s.looseOf) + 2 // and a.jpg, b.jpg of cut.tar
	extracted := 0
	for k := range n {
		before := s.srv.GetObjects(t)
		cmd := exec.Command(featurefsBin(t), "warm", "--source", "s3://packs", "--endpoint-url", s.srv.Endpoint,
			"--model", modelName+"="+model, "--layer", testLayer, "--cache-dir", filepath.Join(t.TempDir(), "cache"),
			"--device", "cpu", "--shard", fmt.Sprintf("%d/%d", k, n), "packed/")
		cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t)), s.env...)
		out, err := cmd.CombinedOutput()
		t.Logf("featurefs warm --shard %d/%d:\n%s", k, n, out)
		if err != nil {
			t.Fatalf("warm --shard %d/%d: %v", k, n, err)
		}
		if gets := s.srv.GetObjects(t) - before; gets != int64(owned[k]) {
			t.Errorf("warm --shard %d/%d took %d GetObject requests, want %d: one per tar it owns, none for the others'", k, n, gets, owned[k])
		}
		m := shardSummary.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("warm --shard %d/%d: no count line", k, n)
		}
		x, _ := strconv.Atoi(m[3])
		extracted += x
		if others, _ := strconv.Atoi(m[5]); others != len(s.tarKeys)-owned[k] {
			t.Errorf("warm --shard %d/%d: %d left to the other shards, want %d (their tars, each counted once)", k, n, others, len(s.tarKeys)-owned[k])
		}
	}
	if extracted != members {
		t.Errorf("the %d parts extracted %d features, want %d: every member once", n, extracted, members)
	}
}

// TestPrefetchStreamsAnArchive: the mount's prefetch of an archive's
// directory reads the archive in one GET (MinIO's count: the reader's own
// member read and the stream, after the listing's index read), and the
// stats say so (archives.stream_gets 1); the directory's other features
// then read with no extraction.
func TestPrefetchStreamsAnArchive(t *testing.T) {
	s := newStreamSet(t)
	m := testMount(t, mountConfig{Source: "s3://packs", Env: s.env,
		Args: []string{"--endpoint-url", s.srv.Endpoint, "--prefetch", "dir"}})
	layer := m.Layer(testLayer)
	var dir string
	for p := range s.looseOf {
		dir = filepath.Dir(filepath.Join(layer, filepath.FromSlash(p)))
		break
	}
	var inDir []string
	for p := range s.looseOf {
		if filepath.Dir(filepath.Join(layer, filepath.FromSlash(p))) == dir {
			inDir = append(inDir, filepath.Join(layer, filepath.FromSlash(p)))
		}
	}
	if _, err := readDirNames(dir); err != nil { // the index: ranged GETs
		t.Fatal(err)
	}
	before := s.srv.GetObjects(t)
	if _, err := os.ReadFile(inDir[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for statsField(t, mountStats(t, m), "prefetch.walks_done") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("prefetch walk not done after 5m: %v", mountStats(t, m))
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := mountStats(t, m)
	if gets := s.srv.GetObjects(t) - before; gets != 2 {
		t.Errorf("one read and its directory's prefetch (%d members): %d GetObject requests, want 2 (the read's member, the archive's stream)", len(inDir), gets)
	}
	if n := statsField(t, st, "archives.stream_gets"); n != 1 {
		t.Errorf("archives.stream_gets = %d, want 1", n)
	}
	if n := statsField(t, st, "archives.streamed_members"); n < int64(len(inDir)-1) {
		t.Errorf("archives.streamed_members = %d, want at least %d", n, len(inDir)-1)
	}
	extracted := extractionCount(t, st)
	for _, p := range inDir {
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if n := extractionCount(t, mountStats(t, m)) - extracted; n != 0 {
		t.Errorf("reading the prefetched directory extracted %d more times, want 0", n)
	}
}
