package fs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/fakes"

	"github.com/featurefs/featurefs/test/testenv"
)

// fakeBucket is the shared in-memory bucket (fakes.Bucket), with the
// names the tree's tests use: put, del and the call counters.
type fakeBucket struct {
	*fakes.Bucket
	lists, stats, gets *atomic.Int64
}

func newFakeBucket(pageSize int) *fakeBucket {
	b := fakes.NewBucket(pageSize)
	return &fakeBucket{Bucket: b, lists: &b.Lists, stats: &b.Stats, gets: &b.Gets}
}

func (b *fakeBucket) put(key string, data []byte) { b.Put(key, data) }

func (b *fakeBucket) del(key string) { b.Del(key) }

// fakeExtractor "extracts" a feature by hashing the object's bytes into the
// layer's shape (expectedNPY). Objects starting with "BAD" are bad images.
type fakeExtractor = fakes.Extractor

// testModel returns a model with three small layers and an alias.
func testModel() *api.Model {
	return &api.Model{
		Name:   "tiny",
		Digest: "d1g35t",
		Layers: []api.Layer{
			{Index: 0, Name: "layer0", Tensor: "conv", Shape: []int64{4, 3, 3}, Bytes: 144},
			{Index: 1, Name: "layer1", Tensor: "pool", Shape: []int64{8}, Bytes: 32},
			{Index: 2, Name: "layer2", Tensor: "fc", Shape: []int64{5}, Bytes: 20},
		},
		Aliases:    map[string]string{"pool": "layer1"},
		Preprocess: api.DefaultPreprocess(),
	}
}

// newFakeExtractor returns a fake of models (default: testModel).
func newFakeExtractor(models ...*api.Model) *fakeExtractor {
	if len(models) == 0 {
		models = []*api.Model{testModel()}
	}
	return fakes.NewExtractor(expectedNPY, models...)
}

// expectedNPY is the fake extractor's answer for an object's bytes.
func expectedNPY(l api.Layer, data []byte, dt api.DType) []byte {
	vals := make([]float32, l.Elements())
	seed := sha256.Sum256(append([]byte(l.Tensor+"\x00"), data...))
	for i := range vals {
		vals[i] = float32(binary.LittleEndian.Uint32(seed[(i*4)%28:])%1000)/100 + float32(i)
	}
	return api.EncodeNPY(l.Shape, vals, dt)
}

// fakeCache is an in-memory feature store.
type fakeCache = fakes.Cache

func newFakeCache() *fakeCache { return fakes.NewCache() }

// fakeClock is a settable clock.
type fakeClock = fakes.Clock

func newFakeClock() *fakeClock { return fakes.NewClock() }

// env is one mounted tree over fakes.
type env struct {
	mnt   string
	fs    *FS
	b     *fakeBucket
	x     *fakeExtractor
	c     *fakeCache
	clock *fakeClock
	logs  *syncBuffer
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = testenv.SyncBuffer

// pipelineConfig is features.Config, named so that testConfig can embed it
// next to the tree's Config.
type pipelineConfig = features.Config

// testConfig is what the tests build a tree from: the settings of its
// pipeline and its own.
type testConfig struct {
	pipelineConfig
	Config
	// passthrough mounts with MountOptions.Passthrough; registerBacking,
	// if set, stands in for the kernel's answer to a backing file.
	passthrough     bool
	registerBacking func(fd int) syscall.Errno
}

// newTree builds the pipeline of cfg and the tree over it, as
// cmd/featurefs does. The pipeline is closed when the test ends, after
// the tree's own clean-ups.
func newTree(t testing.TB, cfg testConfig) (*FS, error) {
	p, err := features.New(cfg.pipelineConfig)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { p.Close() })
	f, err := New(p, cfg.Config)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// testMount mounts a tree over b with fake extractor and cache on a fresh
// directory through the kernel, and unmounts it when the test ends. The
// kernel caches entries for an hour: the fake clock drives featurefs's own
// TTLs.
func testMount(t *testing.T, b *fakeBucket, modify ...func(*testConfig)) *env {
	t.Helper()
	return testMountWith(t, b, newFakeExtractor(), modify...)
}

// testMountWith is testMount with the fake extractor x.
func testMountWith(t *testing.T, b *fakeBucket, x *fakeExtractor, modify ...func(*testConfig)) *env {
	t.Helper()
	e := &env{b: b, x: x, c: newFakeCache(), clock: newFakeClock(), logs: &syncBuffer{}}
	cfg := testConfig{pipelineConfig: pipelineConfig{
		Bucket:      b,
		Extractor:   e.x,
		Cache:       e.c,
		Logger:      slog.New(slog.NewTextHandler(e.logs, nil)),
		MetadataTTL: time.Hour,
		NegativeTTL: 5 * time.Minute,
		ReadTimeout: time.Minute,
		Now:         e.clock.Now,
	}}
	for _, m := range modify {
		m(&cfg)
	}
	f, err := newTree(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.fs = f
	f.registerBacking = cfg.registerBacking
	e.mnt = filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(e.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := f.Mount(e.mnt, MountOptions{FsName: "fake", DirectMount: true, Passthrough: cfg.passthrough})
	if err != nil {
		t.Fatalf("mount: %v (the tests need /dev/fuse and root)", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return e
}

// path returns a path in the mount.
func (e *env) path(parts ...string) string {
	return filepath.Join(append([]string{e.mnt}, parts...)...)
}

// names lists a directory of the mount.
func names(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, d := range des {
		n := d.Name()
		if d.IsDir() {
			n += "/"
		}
		out = append(out, n)
	}
	return out
}

// same reports whether two string lists hold the same names.
func same(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// flushCacheWrites waits for the tree's queued cache writes, so that
// another tree over the same cache finds its features there.
func (e *env) flushCacheWrites(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.fs.p.FlushCacheWrites(ctx); err != nil {
		t.Fatalf("cache writes still queued: %v", err)
	}
}
