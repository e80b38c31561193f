package fs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestDeletedFileDroppedFromKernelInEveryLayer stats a feature file in two
// layers and an alias directory, so that the kernel caches its entry in
// each (for a day: feature files change only with their ETag), deletes the
// object and lists the directory in one layer after the metadata TTL: the
// new listing makes featurefs tell the kernel to drop the entry in every
// layer, and stat through each then answers ENOENT.
func TestDeletedFileDroppedFromKernelInEveryLayer(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/2.jpg", []byte("two"))
	e := testMount(t, b)
	dirs := []string{"layer0", "layer2", "pool"}
	for _, l := range dirs {
		if _, err := os.Stat(e.path("features", "tiny", l, "d", "1.npy")); err != nil {
			t.Fatal(err)
		}
	}
	b.del("d/1.jpg")
	e.clock.Advance(2 * time.Hour)
	if got := names(t, e.path("features", "tiny", "layer0", "d")); !same(got, []string{"2.npy"}) {
		t.Fatalf("ls after the delete: %v", got)
	}
	for _, l := range dirs {
		p := e.path("features", "tiny", l, "d", "1.npy")
		waitFor(t, 10*time.Second, "stat "+p+" is ENOENT", func() bool {
			_, err := os.Stat(p)
			return errors.Is(err, syscall.ENOENT)
		})
	}
	if n := e.fs.Stats().FS.KernelInvalidations; n != int64(len(dirs)) {
		t.Errorf("%d kernel invalidations, want %d (one per layer directory holding the name)", n, len(dirs))
	}
	// The file still there keeps its entry and reads.
	if _, err := os.ReadFile(e.path("features", "tiny", "pool", "d", "2.npy")); err != nil {
		t.Errorf("read of the remaining file: %v", err)
	}
}

// TestOverwrittenFileReadsNewVersionOnceRelisted reads a feature file, so
// that the kernel's page cache holds it (FOPEN_KEEP_CACHE), overwrites the
// object and, after the metadata TTL, looks up another name in its
// directory (which reads the listing again; a readdir would also hand the
// kernel the new entry itself): the kernel is told to drop the entry, so
// that the name stands for a new inode (the ETag's) and reads the new
// object's feature. Until it has, a read through the old entry returns one
// version whole, never a mix (TestReaderAcrossARelistingReadsOneVersion).
func TestOverwrittenFileReadsNewVersionOnceRelisted(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("old"))
	e := testMount(t, b)
	l := e.x.Models()[0].Layers[0]
	p := e.path("features", "tiny", "layer0", "d", "1.npy")
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, expectedNPY(l, []byte("old"), e.x.DType())) {
		t.Fatal("wrong content before the overwrite")
	}
	var st0 syscall.Stat_t
	if err := syscall.Stat(p, &st0); err != nil {
		t.Fatal(err)
	}
	b.put("d/1.jpg", []byte("new"))
	e.clock.Advance(2 * time.Hour)
	if _, err := os.Stat(e.path("features", "tiny", "layer0", "d", "2.npy")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a name never there: %v", err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, old) && !bytes.Equal(got, expectedNPY(l, []byte("new"), e.x.DType())) {
		t.Errorf("read after the overwrite and a new listing: neither version's bytes")
	}
	waitFor(t, 10*time.Second, "the name stands for the new version's inode", func() bool {
		var st syscall.Stat_t
		return syscall.Stat(p, &st) == nil && st.Ino != st0.Ino
	})
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, expectedNPY(l, []byte("new"), e.x.DType())) {
		t.Errorf("read through the new inode: %v, new bytes: %v", err, bytes.Equal(got, expectedNPY(l, []byte("new"), e.x.DType())))
	}
}

// TestPathWalkRevalidatesDirectory caches a file's entry, deletes its
// object and, once the kernel's entry for the directory has expired (the
// mount's TTL, 1s here) and featurefs's listing is stale, stats the file by
// its full path: the kernel looks the directory up again, which checks the
// files it holds there against a new listing before the walk goes on, so
// the stat answers ENOENT at once although the file's own entry is kept
// for a day.
func TestPathWalkRevalidatesDirectory(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("a/b/1.jpg", []byte("one"))
	b.put("a/b/2.jpg", []byte("two"))
	e := testMount(t, b, func(c *testConfig) { c.MetadataTTL = time.Second })
	p := e.path("features", "tiny", "layer1", "a", "b", "1.npy")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	b.del("a/b/1.jpg")
	e.clock.Advance(time.Hour)
	time.Sleep(1500 * time.Millisecond) // the kernel's directory entries expire
	if _, err := os.Stat(p); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat through expired directory entries after the delete: %v, want ENOENT", err)
	}
	if _, err := os.Stat(e.path("features", "tiny", "layer1", "a", "b", "2.npy")); err != nil {
		t.Errorf("stat of the file still there: %v", err)
	}
}

// TestSecondPassSendsNoFileLookups reads every file of a directory, waits
// past the kernel's TTL for directories (1s here; featurefs's own listing
// stays fresh) and reads them all again: the kernel looks up the
// directories again, but none of the files, whose entries it keeps.
func TestSecondPassSendsNoFileLookups(t *testing.T) {
	const n = 20
	b := newFakeBucket(1000)
	for i := range n {
		b.put(fmt.Sprintf("d/%02d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	e := testMount(t, b, func(c *testConfig) { c.MetadataTTL = time.Second })
	readAll := func() {
		for i := range n {
			if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "d", fmt.Sprintf("%02d.npy", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll()
	time.Sleep(1500 * time.Millisecond)
	before := e.fs.stats.lookups.Load()
	readAll()
	if got := e.fs.stats.lookups.Load() - before; got >= n {
		t.Errorf("second pass over %d files after the TTL: %d lookups, want fewer than one per file (only directories)", n, got)
	}
}

// TestMetadataTTLZeroKeepsNothing: with --metadata-ttl 0 the kernel keeps
// no feature file entry either, so a deleted object's file is gone at once.
func TestMetadataTTLZeroKeepsNothing(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	e := testMount(t, b, func(c *testConfig) { c.MetadataTTL = 0 })
	p := e.path("features", "tiny", "layer0", "d", "1.npy")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	b.del("d/1.jpg")
	if _, err := os.Stat(p); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat after the delete with no metadata TTL: %v, want ENOENT", err)
	}
}

// TestLargeDirectoryEntriesDroppedWhenUncheckable: a directory larger than
// RelistPages pages whose listing is not cached has nothing to check the
// kernel's entries against; a path walk through it after the TTL drops
// them, so that a deleted object's file is looked up again (by Stat) and
// is gone, as when file entries expired with the TTL.
func TestLargeDirectoryEntriesDroppedWhenUncheckable(t *testing.T) {
	b := newFakeBucket(1)
	for i := range 6 {
		b.put(fmt.Sprintf("d/%d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	e := testMount(t, b, func(c *testConfig) { c.MetadataTTL = time.Second; c.RelistPages = 2 })
	p := func(i int) string { return e.path("features", "tiny", "layer0", "d", fmt.Sprintf("%d.npy", i)) }
	for _, i := range []int{1, 5} {
		if _, err := os.Stat(p(i)); err != nil {
			t.Fatal(err)
		}
	}
	b.del("d/5.jpg")
	e.clock.Advance(time.Hour)
	time.Sleep(1500 * time.Millisecond) // the kernel's directory entries expire
	if _, err := os.Stat(p(5)); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of a deleted object's file in a directory never listed whole: %v, want ENOENT", err)
	}
	if _, err := os.Stat(p(1)); err != nil {
		t.Errorf("stat of a file still there: %v", err)
	}
}

// TestReaderAcrossARelistingReadsOneVersion opens a large feature file
// (802,944 bytes), reads its first 4 KiB, overwrites the object and makes
// the mount read the directory's listing again (a lookup of a name never
// there, after the TTL), which drops the file's pages; the same reader
// then reads the rest. The file it read is the old version's, whole: a
// node's content is that of its own object version while the cache holds
// it, so a reader straddling a change never gets two versions' bytes
// (the CI failure of TestReplacedArchiveServesNewMembers/openat-ls). The
// name then stands for the new version.
func TestReaderAcrossARelistingReadsOneVersion(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("old"))
	x := newFakeExtractor(bigModel())
	e := testMountWith(t, b, x)
	l := x.Models()[0].Layers[0]
	oldNPY, newNPY := expectedNPY(l, []byte("old"), x.DType()), expectedNPY(l, []byte("new"), x.DType())
	p := e.path("features", "tiny", l.Name, "d", "1.npy")
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, oldNPY) {
		t.Fatalf("first read: %v, old bytes: %v", err, bytes.Equal(got, oldNPY))
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 4096)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	b.put("d/1.jpg", []byte("new"))
	e.clock.Advance(2 * time.Hour)
	if _, err := os.Stat(e.path("features", "tiny", l.Name, "d", "2.npy")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a name never there: %v", err)
	}
	rest, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	got := append(head, rest...)
	switch {
	case bytes.Equal(got, oldNPY):
	case bytes.Equal(got, newNPY):
		t.Errorf("a reader that had read the old version's first 4 KiB read the new version's rest")
	default:
		t.Errorf("a reader across the relisting read %d bytes mixing two versions (old %v, new %v)", len(got), len(oldNPY), len(newNPY))
	}
	waitFor(t, 10*time.Second, "the name reads the new version", func() bool {
		got, err := os.ReadFile(p)
		return err == nil && bytes.Equal(got, newNPY)
	})
}
