package fs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
)

// bigModel has one layer12-sized layer (802,944-byte .npy files): the
// cache keeps its features in files of their own.
func bigModel() *api.Model {
	m := testModel()
	m.Layers = []api.Layer{{Index: 0, Name: "layer12", Tensor: "conv", Shape: []int64{1, 512, 28, 14}, Bytes: 802816}}
	m.Aliases = nil
	return m
}

// passthroughEnv computes the features of d/1.jpg and d/2.jpg through a
// first mount into a real cache (uncompressed: files of exactly the
// feature's bytes), and returns the store, the bucket and the expected
// bytes, for a second mount (a restart: fresh kernel inodes) to read.
func passthroughEnv(t *testing.T) (*cache.Store, *fakeBucket, *fakeExtractor, map[string][]byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := cache.Open(cache.Options{Dir: dir, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := newFakeBucket(1000)
	x := newFakeExtractor(bigModel())
	want := map[string][]byte{}
	b.put("d/1.jpg", []byte("image 1"))
	b.put("d/2.jpg", []byte("image 2"))
	b.put("d/3.jpg", []byte("image 3"))
	first := testMountWith(t, b, x, func(c *testConfig) { c.Cache = st })
	l := x.Models()[0].Layers[0]
	for _, n := range []string{"1", "2"} {
		want[n] = expectedNPY(l, []byte("image "+n), x.DType())
		if got, err := os.ReadFile(first.path("features", "tiny", l.Name, "d", n+".npy")); err != nil || !bytes.Equal(got, want[n]) {
			t.Fatalf("first mount, %s.npy: %v", n, err)
		}
	}
	first.flushCacheWrites(t)
	return st, b, x, want
}

// TestPassthroughReadsBypassTheMount: with passthrough on, a feature the
// cache holds as a file of its bytes is read by the kernel from that
// file: the bytes are right, and the mount sees an OPEN per open(2) but
// no READ of it; the file's chunks are verified at each such open.
func TestPassthroughReadsBypassTheMount(t *testing.T) {
	st, b, x, want := passthroughEnv(t)
	e := testMountWith(t, b, x, func(c *testConfig) { c.Cache = st; c.passthrough = true })
	if !e.fs.passthrough.Load() {
		t.Fatal("passthrough off after mount: the kernel (>= 6.9) does not offer it")
	}
	calls := x.Calls.Load()
	before := e.fs.Stats().FS
	for range 3 {
		for _, n := range []string{"1", "2"} {
			got, err := os.ReadFile(e.path("features", "tiny", "layer12", "d", n+".npy"))
			if err != nil || !bytes.Equal(got, want[n]) {
				t.Fatalf("%s.npy through passthrough: %v, right bytes %v", n, err, bytes.Equal(got, want[n]))
			}
		}
	}
	after := e.fs.Stats().FS
	if after.Reads != before.Reads || after.ReadBytes != before.ReadBytes {
		t.Errorf("the mount answered %d READs (%d bytes) of passthrough files; want none",
			after.Reads-before.Reads, after.ReadBytes-before.ReadBytes)
	}
	if d := after.PassthroughOpens - before.PassthroughOpens; d != 6 {
		t.Errorf("%d passthrough opens for 6 opens of cached features; want 6", d)
	}
	if d := after.Opens - before.Opens; d < 6 {
		t.Errorf("%d OPEN requests for 6 opens; want one each", d)
	}
	if x.Calls.Load() != calls {
		t.Errorf("%d extractions; want none", x.Calls.Load()-calls)
	}
	// A file not in the cache as a file (the stats file, a feature being
	// computed) still reads through the mount, with OPENs answered.
	if _, err := os.ReadFile(e.path(".featurefs", "stats")); err != nil {
		t.Fatal(err)
	}
	l := x.Models()[0].Layers[0]
	if got, err := os.ReadFile(e.path("features", "tiny", "layer12", "d", "3.npy")); err != nil || !bytes.Equal(got, expectedNPY(l, []byte("image 3"), x.DType())) {
		t.Fatalf("3.npy, computed: %v", err)
	}
	if n := e.fs.Stats().FS.Reads; n == after.Reads {
		t.Error("a computed feature's read was not answered by the mount")
	}
}

// TestPassthroughNeverServesDamagedFile: a cache file whose bytes no
// longer match its chunk table is never handed to the kernel: the open
// finds it damaged, the cache deletes it, and the read goes through the
// mount, which computes the right bytes.
func TestPassthroughNeverServesDamagedFile(t *testing.T) {
	st, b, x, want := passthroughEnv(t)
	// Damage every feature file in the cache (one byte each).
	damaged := 0
	filepath.WalkDir(filepath.Join(st.Dir(), "files"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c := []byte{0}
		f.ReadAt(c, 500_000)
		c[0] ^= 0x40
		if _, err := f.WriteAt(c, 500_000); err != nil {
			t.Fatal(err)
		}
		damaged++
		return nil
	})
	if damaged != 2 {
		t.Fatalf("%d feature files in the cache; want 2", damaged)
	}
	e := testMountWith(t, b, x, func(c *testConfig) { c.Cache = st; c.passthrough = true })
	for _, n := range []string{"1", "2"} {
		got, err := os.ReadFile(e.path("features", "tiny", "layer12", "d", n+".npy"))
		if err != nil || !bytes.Equal(got, want[n]) {
			t.Fatalf("%s.npy with its cache file damaged: %v, right bytes %v", n, err, bytes.Equal(got, want[n]))
		}
	}
	s := e.fs.Stats().FS
	if s.PassthroughOpens != 0 || s.Reads == 0 {
		t.Errorf("%d passthrough opens, %d reads through the mount; want 0 and some", s.PassthroughOpens, s.Reads)
	}
	if n := st.Stats().ChecksumFailures; n != 2 {
		t.Errorf("%d checksum failures; want 2", n)
	}
}

// TestPassthroughOffFallsBack: passthrough not asked for, or refused by
// the kernel (as for a mount that is not root: registering the backing
// file fails), reads go through the mount with the right bytes, silently,
// and opens are answered ENOSYS so that the kernel stops sending them.
func TestPassthroughOffFallsBack(t *testing.T) {
	st, b, x, want := passthroughEnv(t)
	for _, tc := range []struct {
		name string
		mod  func(*testConfig)
	}{
		{"off", func(c *testConfig) { c.Cache = st }},
		{"refused", func(c *testConfig) {
			c.Cache = st
			c.passthrough = true
			c.registerBacking = func(int) syscall.Errno { return syscall.EPERM }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testMountWith(t, b, x, tc.mod)
			for range 3 {
				for _, n := range []string{"1", "2"} {
					got, err := os.ReadFile(e.path("features", "tiny", "layer12", "d", n+".npy"))
					if err != nil || !bytes.Equal(got, want[n]) {
						t.Fatalf("%s.npy: %v, right bytes %v", n, err, bytes.Equal(got, want[n]))
					}
				}
			}
			s := e.fs.Stats().FS
			if s.PassthroughOpens != 0 || s.Reads == 0 || s.Opens > 2 {
				t.Errorf("%d passthrough opens, %d reads through the mount, %d OPENs; want 0, some, at most 2",
					s.PassthroughOpens, s.Reads, s.Opens)
			}
			if e.fs.passthrough.Load() {
				t.Error("passthrough still on")
			}
		})
	}
}

// TestPassthroughOverwriteReadsNewVersion: a file held open with
// passthrough keeps the old version's cache file as its backing file; once
// the object is overwritten and relisted, a new open of the name reads the
// new version (through the mount while it is computed, then from its own
// cache file), never the old backing file.
func TestPassthroughOverwriteReadsNewVersion(t *testing.T) {
	st, b, x, want := passthroughEnv(t)
	e := testMountWith(t, b, x, func(c *testConfig) { c.Cache = st; c.passthrough = true })
	l := x.Models()[0].Layers[0]
	p := e.path("features", "tiny", "layer12", "d", "1.npy")
	held, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	buf := make([]byte, len(want["1"]))
	if _, err := io.ReadFull(held, buf); err != nil || !bytes.Equal(buf, want["1"]) {
		t.Fatalf("held open: %v", err)
	}
	if n := e.fs.Stats().FS.PassthroughOpens; n != 1 {
		t.Fatalf("%d passthrough opens; want 1", n)
	}
	b.put("d/1.jpg", []byte("new"))
	e.clock.Advance(2 * time.Hour)
	if _, err := os.Stat(e.path("features", "tiny", "layer12", "d", "9.npy")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a name never there: %v", err)
	}
	newer := expectedNPY(l, []byte("new"), x.DType())
	for i := range 2 {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, newer) {
			t.Fatalf("read %d after the overwrite, the old version held open: %v, new bytes %v, old bytes %v",
				i, err, bytes.Equal(got, newer), bytes.Equal(got, want["1"]))
		}
	}
	held.Close()
	e.flushCacheWrites(t)
	pt := e.fs.Stats().FS.PassthroughOpens
	waitFor(t, 10*time.Second, "the new version read through passthrough", func() bool {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, newer) {
			t.Fatalf("read of the new version: %v, new bytes %v", err, bytes.Equal(got, newer))
		}
		return e.fs.Stats().FS.PassthroughOpens > pt
	})
}

// TestMountHandleOffersNoBackingFile: the handle of an open that reads
// through the mount offers go-fuse no backing file (go-fuse would attach
// the node's registered one, possibly an older version's, to any handle
// that offers one).
func TestMountHandleOffersNoBackingFile(t *testing.T) {
	var h any = &mountHandle{}
	if _, ok := h.(gofs.FilePassthroughFder); ok {
		t.Fatal("mountHandle offers a backing file")
	}
	var p any = &ptHandle{}
	if _, ok := p.(gofs.FilePassthroughFder); !ok {
		t.Fatal("ptHandle offers no backing file")
	}
}

// cacheFileOf returns the path of the cache's feature file holding
// exactly want (an uncompressed value in a file of its own).
func cacheFileOf(t *testing.T, st *cache.Store, want []byte) string {
	t.Helper()
	var found string
	filepath.WalkDir(filepath.Join(st.Dir(), "files"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, want) {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatal("no cache file holds the feature's bytes")
	}
	return found
}

// TestPassthroughSharedBackingFileRechecked: an open that would share the
// backing file another open holds gets it only while it is what was
// checked: a file damaged in place (its mtime and ctime change) is checked
// again, fails, and the open is refused (EIO: the kernel takes no other
// mode while the backing file is held), said once; a file the cache
// replaced by the same bytes, or one unlinked behind its back that it
// still holds open, is checked again and shared; one the cache evicted
// has nothing to be checked against and is refused. Once the holder
// closes, the feature reads right again.
func TestPassthroughSharedBackingFileRechecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
		shared bool // the second open shares the held file
		bad    int64
	}{
		{"damaged", func(p string) error {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			c := []byte{0}
			f.ReadAt(c, 500_000)
			c[0] ^= 0x40
			_, err = f.WriteAt(c, 500_000)
			return err
		}, false, 1},
		{"replaced", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tmp := p + ".new"
			if err := os.WriteFile(tmp, b, 0o600); err != nil {
				return err
			}
			return os.Rename(tmp, p)
		}, true, 0},
		// Unlinked behind the cache's back: the cache still holds it open
		// and checks it again through that descriptor.
		{"unlinked", os.Remove, true, 0},
		{"evicted", nil, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b, x, want := passthroughEnv(t)
			if tc.change == nil { // evicted by the cache (every entry: Clear)
				tc.change = func(string) error { return st.Clear() }
			}
			e := testMountWith(t, b, x, func(c *testConfig) { c.Cache = st; c.passthrough = true })
			p := e.path("features", "tiny", "layer12", "d", "1.npy")
			fd1, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer fd1.Close()
			if got, err := io.ReadAll(fd1); err != nil || !bytes.Equal(got, want["1"]) {
				t.Fatalf("first open: %v, right bytes %v", err, bytes.Equal(got, want["1"]))
			}
			if n := e.fs.Stats().FS.PassthroughOpens; n != 1 {
				t.Fatalf("%d passthrough opens; want 1", n)
			}
			if err := tc.change(cacheFileOf(t, st, want["1"])); err != nil {
				t.Fatal(err)
			}
			fd2, err := os.Open(p)
			if err == nil {
				got, rerr := io.ReadAll(fd2)
				fd2.Close()
				if rerr != nil || !bytes.Equal(got, want["1"]) {
					t.Fatalf("second open, its cache file %s while the first held it: read %v, right bytes %v; want them right, or the open refused",
						tc.name, rerr, bytes.Equal(got, want["1"]))
				}
			}
			if tc.shared != (err == nil) {
				t.Fatalf("second open, the cache file %s: %v; want it shared %v (else refused: EIO)", tc.name, err, tc.shared)
			}
			if err != nil && !errors.Is(err, syscall.EIO) {
				t.Fatalf("second open refused with %v; want EIO", err)
			}
			if err != nil {
				// Refused until the holder closes, said once.
				if fd3, err := os.Open(p); !errors.Is(err, syscall.EIO) {
					if fd3 != nil {
						fd3.Close()
					}
					t.Fatalf("third open: %v; want EIO", err)
				}
				if n := strings.Count(e.logs.String(), "cannot be checked again"); n != 1 {
					t.Errorf("%d WARN lines about the held file; want 1:\n%s", n, e.logs)
				}
			}
			if n := st.Stats().ChecksumFailures; n != tc.bad {
				t.Errorf("%d checksum failures; want %d", n, tc.bad)
			}
			fd1.Close()
			// The kernel's RELEASE of fd1 reaches the mount after close(2)
			// returns (asynchronously, later on a loaded machine): until
			// it does, the backing file is still held and a refused one
			// still refuses. Once it has, every open reads right.
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := os.ReadFile(p)
				if err == nil && bytes.Equal(got, want["1"]) {
					break
				}
				if tc.shared || !errors.Is(err, syscall.EIO) || time.Now().After(deadline) {
					t.Fatalf("read after the holder closed: %v, right bytes %v", err, bytes.Equal(got, want["1"]))
				}
				time.Sleep(20 * time.Millisecond)
			}
			for i := range 2 {
				got, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(got, want["1"]) {
					t.Fatalf("read %d after the holder's release: %v, right bytes %v", i, err, bytes.Equal(got, want["1"]))
				}
			}
		})
	}
}
