package fs

import (
	"github.com/featurefs/featurefs/fs/views"

	"encoding/json"
	"fmt"
	"github.com/featurefs/featurefs/fs/figures"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStatsFileSizeIsWhatAReadReturns: the size stat reports for
// .featurefs/stats is the number of bytes a read then returns, while the
// figures change between the two (issue 16, item 7); an open handle's
// fstat agrees with its content; cp copies whole, valid JSON; and when the
// figures outgrow the file's size, the size follows at the next stat.
// Before, the kernel kept the size of the first lookup for the metadata TTL
// and reads returned more (or fewer) bytes than stat said.
func TestStatsFileSizeIsWhatAReadReturns(t *testing.T) {
	b := newFakeBucket(1000)
	for i := range 40 {
		b.put(fmt.Sprintf("d/%02d.jpg", i), []byte(strings.Repeat("x", 10+i)))
		b.put(fmt.Sprintf("bad/%02d.jpg", i), []byte("BAD image"))
	}
	e := testMount(t, b)
	stats := e.path(".featurefs", "stats")
	feature := func(dir string, i int) string {
		return e.path("features", "tiny", "layer0", dir, fmt.Sprintf("%02d.npy", i))
	}
	valid := func(what string, data []byte) {
		t.Helper()
		var st figures.Stats
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("%s: not JSON (%v):\n%s", what, err, data)
		}
	}

	for i := range 40 {
		fi, err := os.Stat(stats)
		if err != nil {
			t.Fatal(err)
		}
		// The figures change between the stat and the read.
		if _, err := os.ReadFile(feature("d", i)); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(1234567 * time.Microsecond)
		data, err := os.ReadFile(stats)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(data)) {
			t.Fatalf("round %d: stat says %d bytes, a read returned %d", i, fi.Size(), len(data))
		}
		valid("read", data)
	}

	// An open handle: fstat agrees with what it reads, figures changing
	// in between.
	f, err := os.Open(stats)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(feature("d", 0)); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len(data)) {
		t.Errorf("open handle: fstat says %d bytes, it read %d", fi.Size(), len(data))
	}
	valid("open handle", data)

	// 20 recent errors: the JSON grows by kilobytes, past the size. The
	// next stat reports the grown size, cp copies all of it, and a handle
	// opened before the growth still reads whole JSON.
	early, err := os.Open(stats)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	for i := range 40 {
		if _, err := os.ReadFile(feature("bad", i)); err == nil {
			t.Fatalf("bad/%02d.npy read", i)
		}
	}
	// The kernel keeps attributes for at least one clock tick, however
	// short their timeout (1 ns here): the 40 reads can take less.
	time.Sleep(20 * time.Millisecond)
	fi2, err := os.Stat(stats)
	if err != nil {
		t.Fatal(err)
	}
	if fi2.Size() <= fi.Size() {
		t.Errorf("20 recent errors later the size is %d, was %d: want it grown", fi2.Size(), fi.Size())
	}
	dst := filepath.Join(t.TempDir(), "stats.json")
	if out, err := exec.Command("cp", stats, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	copied, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	valid("cp", copied)
	if int64(len(copied)) != fi2.Size() {
		t.Errorf("cp copied %d bytes, stat said %d", len(copied), fi2.Size())
	}
	const maxRecentErrors = 20 // the pipeline keeps the last 20 (features' maxRecentErrors)
	var st figures.Stats
	if err := json.Unmarshal(copied, &st); err != nil || len(st.RecentErrors) != maxRecentErrors {
		t.Errorf("cp copy holds %d recent errors (%v), want %d", len(st.RecentErrors), err, maxRecentErrors)
	}
	old, err := io.ReadAll(early)
	if err != nil {
		t.Fatal(err)
	}
	valid("handle opened before the growth", old)
	if int64(len(old)) != fi2.Size() {
		t.Errorf("handle opened before the growth read %d bytes, the size is %d", len(old), fi2.Size())
	}
}

// TestStatsSizeHasHeadroom: the padded size is at least the JSON's, with a
// quarter (at least 1 KiB) to spare, in whole KiB.
func TestStatsSizeHasHeadroom(t *testing.T) {
	for _, n := range []int{1, 1023, 1024, 2980, 3054, 4096, 10000, 100000} {
		s := views.PaddedSize(n)
		if s%1024 != 0 || s < int64(n+max(n/4, 1024)) || s >= int64(n+max(n/4, 1024)+1024) {
			t.Errorf("views.PaddedSize(%d) = %d", n, s)
		}
	}
}

// TestStatsFileReadInPiecesIsOneSnapshot: the kernel may read the stats
// file in more than one request (a page, then the rest). The requests
// after the first, from the same thread, get the rest of the first's
// snapshot, so a read(2) never returns the halves of two different
// documents (a CI run once parsed `"get_e` followed by a newer rendering).
// Another thread, or the same one after views.PaddedSnapTTL, gets a new one.
func TestStatsFileReadInPiecesIsOneSnapshot(t *testing.T) {
	e := testMount(t, newFakeBucket(1000))
	renders := 0
	var docs []string // every rendering, without its final newline
	sf := newStatsFile(e.fs, func() []byte {
		renders++
		d := fmt.Sprintf("{%q: %d, %q: %q}", "n", renders, "pad", strings.Repeat("x", 5000+renders))
		docs = append(docs, d)
		return []byte(d + "\n")
	})
	// one checks that doc is one rendering, whole.
	one := func(what string, doc []byte) {
		t.Helper()
		if !slices.Contains(docs, string(doc)) {
			t.Errorf("%s: %d bytes that are no one rendering (pieces of two)", what, len(doc))
		}
	}
	// read is Read's content for a request from thread pid (the
	// snapshot it answers from; Read pads it and notifies the kernel,
	// which needs the file in a mounted tree).
	read := func(pid uint32, off int64, n int) []byte {
		json, _ := sf.file.ReaderSnapshot(pid, true, off)
		if off >= int64(len(json)) {
			return nil
		}
		return json[off:min(off+int64(n), int64(len(json)))]
	}
	whole := func(pid uint32) []byte {
		first := read(pid, 0, 4096)
		rest := read(pid, 4096, 1<<20)
		return append(first, rest...)
	}
	for pid := uint32(1); pid <= 3; pid++ {
		one(fmt.Sprintf("reader %d's read in two pieces", pid), whole(pid))
	}
	// A second thread starting between another's pieces does not tear it.
	first := read(7, 0, 4096)
	one("reader 8", whole(8))
	one("reader 7 around reader 8's read", append(first, read(7, 4096, 1<<20)...))
	// After views.PaddedSnapTTL a read further on takes a new snapshot.
	before := renders
	e.clock.Advance(2 * views.PaddedSnapTTL)
	read(7, 4096, 1<<20)
	if renders != before+1 {
		t.Errorf("a read past the snapshot's time rendered %d times, want 1", renders-before)
	}
}
