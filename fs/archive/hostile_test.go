package archive

import (
	"archive/zip"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/fs/archive/archivetest"
)

// TestZip64LocatorOffsetOverflow: a zip64 locator naming its end record at
// 2^63-1 once wrapped the bounds check negative and panicked the mount's
// first listing of the archive (slice bounds out of range
// [:-9223372036854775753]). It is a bad archive now, failing alone and
// logged once with its key, while the same archive with a true locator
// lists and reads.
func TestZip64LocatorOffsetOverflow(t *testing.T) {
	z, err := archivetest.Zip(zip.Store, []string{"a.jpg"}, [][]byte{payload(1, 500)})
	if err != nil {
		t.Fatal(err)
	}
	evil, err := archivetest.Zip64(z, 1<<63-1)
	if err != nil {
		t.Fatal(err)
	}
	good, err := archivetest.Zip64(z, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, log := newBucket(t, map[string][]byte{"evil.zip": evil, "good.zip": good})
	if _, err := w.List(ctx, "evil.zip/", ""); !errors.Is(err, ErrBadArchive) {
		t.Errorf("listing the zip whose locator says 2^63-1: %v, want a bad archive", err)
	}
	if _, _, err := w.Get(ctx, "evil.zip/a.jpg", 0); err == nil {
		t.Error("a member of the bad archive read")
	}
	_, keys, _ := listAll(t, w, "good.zip/")
	if len(keys) != 1 || keys[0] != "good.zip/a.jpg" {
		t.Errorf("valid zip64 archive lists %q", keys)
	}
	if data, _, err := w.Get(ctx, "good.zip/a.jpg", 0); err != nil || string(data) != string(payload(1, 500)) {
		t.Errorf("valid zip64 member: %d bytes, %v", len(data), err)
	}
	if n := strings.Count(log.String(), "evil.zip"); n != 1 {
		t.Errorf("the bad archive is named in %d log lines, want 1:\n%s", n, log)
	}
}

// TestOverDeclaredMembersDoNotPreallocate: 16 deflated members of 340 KB
// each declaring 64 MiB (within the bomb ratio) made each read allocate
// 64 MiB before a byte was inflated (RSS 82 -> 410 MB for 16 parallel
// reads). Each read now fails, saying how few bytes the member inflates
// to, having allocated about what it inflated.
func TestOverDeclaredMembersDoNotPreallocate(t *testing.T) {
	const n, declare = 16, 64 << 20
	z, err := archivetest.OverDeclared(n, payload(3, 340<<10), declare)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newBucket(t, map[string][]byte{"over.zip": z})
	w.cfg.MaxMemberBytes = 1 << 30
	if _, keys, _ := listAll(t, w, "over.zip/"); len(keys) != n {
		t.Fatalf("%d members listed, want %d", len(keys), n)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		_, _, err := w.Get(ctx, "over.zip/m"+itoa(i)+".jpg", 0)
		if !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "inflates to only 348160 bytes, declares 67108864") {
			t.Fatalf("member %d: %v, want a bad archive inflating to only 348160 bytes", i, err)
		}
	}
	runtime.ReadMemStats(&after)
	got, limit := after.TotalAlloc-before.TotalAlloc, uint64(n)*4<<20
	t.Logf("%d reads of members inflating to 340 KiB, declaring 64 MiB: %.1f MiB allocated", n, float64(got)/(1<<20))
	if got > limit {
		t.Errorf("%d reads allocated %d MiB, want at most %d MiB (what they inflate, not what they declare)", n, got>>20, limit>>20)
	}
}

// TestInflateSizes: inflate gives exactly the declared bytes, and says
// which way a member that does not inflate to its declared size is off.
func TestInflateSizes(t *testing.T) {
	data := payload(4, 100_000)
	z, err := archivetest.Zip(zip.Deflate, []string{"x.jpg"}, [][]byte{data})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newBucket(t, map[string][]byte{"x.zip": z})
	x, err := w.index(ctx, "x.zip")
	if err != nil || x.err != nil || len(x.members) != 1 {
		t.Fatalf("index: %v %v", err, x)
	}
	m := x.members[0]
	raw, err := w.getter(x)(ctx, m.off+localLen+5, m.size) // after the name x.jpg
	if err != nil {
		t.Fatal(err)
	}
	if got, err := inflate(raw, int64(len(data))); err != nil || string(got) != string(data) {
		t.Errorf("inflate at the declared size: %d bytes, %v", len(got), err)
	}
	if _, err := inflate(raw, int64(len(data))+1); err == nil || !strings.Contains(err.Error(), "inflates to only 100000 bytes, declares 100001") {
		t.Errorf("declaring one byte more: %v", err)
	}
	if _, err := inflate(raw, int64(len(data))-1); err == nil || !strings.Contains(err.Error(), "more than the 99999 bytes") {
		t.Errorf("declaring one byte less: %v", err)
	}
	if _, err := inflate(raw[:len(raw)/2], int64(len(data))); !errors.Is(err, ErrBadArchive) {
		t.Errorf("a cut stream: %v", err)
	}
}

// TestParserPanicIsTheArchivesError: whatever panics while an archive's
// bytes are parsed (here the range reader itself) is that archive's
// error, naming the panic, never the process's end.
func TestParserPanicIsTheArchivesError(t *testing.T) {
	boom := func(context.Context, int64, int64) ([]byte, error) {
		var b []byte
		return b[:3], nil // slice bounds out of range
	}
	note := func(string, string) {}
	for _, arch := range []string{"a.zip", "a.tar"} {
		if _, _, err := indexArchive(ctx, arch, boom, 4096, note); !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "parser panic: runtime error: slice bounds out of range") || !strings.Contains(err.Error(), "hostile_test.go") {
			t.Errorf("%s: %v", arch, err)
		}
	}
	for _, m := range []member{{path: "z", zip: true, size: 10, usize: 10}, {path: "t", size: 10, usize: 10}} {
		if _, err := memberBytes(ctx, boom, &m); !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "parser panic") {
			t.Errorf("member %s: %v", m.path, err)
		}
	}
}
