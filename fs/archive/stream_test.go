package archive

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
)

// streamed is what one Stream call handed over.
type streamed struct {
	keys    []string
	data    map[string][]byte
	errs    map[string]error
	skipped []string
}

func streamAll(t *testing.T, w *Bucket, arch, dir string, tree bool, want func(bucket.Object) bool) (streamed, error) {
	t.Helper()
	got := streamed{data: map[string][]byte{}, errs: map[string]error{}}
	err := w.Stream(ctx, arch, dir, tree, want, func(m StreamMember) error {
		got.keys = append(got.keys, m.Object.Key)
		switch {
		case m.Skipped:
			got.skipped = append(got.skipped, m.Object.Key)
		case m.Err != nil:
			got.errs[m.Object.Key] = m.Err
		default:
			got.data[m.Object.Key] = m.Data
		}
		return nil
	})
	return got, err
}

// sameIndex fails unless a and b are the same index.
func sameIndex(t *testing.T, a, b *index) {
	t.Helper()
	if a == nil || b == nil {
		t.Fatalf("indexes %v, %v", a, b)
	}
	if !slices.Equal(a.members, b.members) || a.skipped != b.skipped || (a.err == nil) != (b.err == nil) ||
		a.etag != b.etag || a.size != b.size {
		t.Fatalf("the stream's index differs from the ranged walk's:\n%+v (%d skipped, %v, %s, %d)\n%+v (%d skipped, %v, %s, %d)",
			a.members, a.skipped, a.err, a.etag, a.size, b.members, b.skipped, b.err, b.etag, b.size)
	}
}

// streamFiles is a tar's worth of members: images of several sizes (one
// larger than MaxBlockSize), sidecars, a nested directory, names refused,
// a repeated path and a member that is not an image.
func streamFiles() []file {
	var fs []file
	for i := range 40 {
		fs = append(fs, file{"k" + itoa(100+i) + ".jpg", payload(i, 1000+i*997)})
		fs = append(fs, file{"k" + itoa(100+i) + ".cls", []byte(itoa(i % 3))})
	}
	return append(fs,
		file{"sub/deep.png", payload(99, 3000)},
		file{"big.jpg", payload(98, MaxBlockSize+5)},
		file{"../evil.jpg", payload(97, 10)},
		file{"/abs.jpg", payload(96, 10)},
		file{"notes.txt", []byte("not a sidecar")},
		file{"k100.cls", []byte("2")}, // repeated: the last wins
	)
}

// TestStreamIndexEqualsRangedWalk: a tar streamed with no index kept is
// read in one GET, hands over its image members in order with their
// bytes, and builds the index the ranged header walk builds.
func TestStreamIndexEqualsRangedWalk(t *testing.T) {
	files := streamFiles()
	tb := tarBytes(t, files)
	objs := map[string][]byte{"train/c.tar": tb}
	s, _ := newBucket(t, objs)
	r := rewrap(t, s)
	listAll(t, s, "train/") // the archive's version, as warm's walk has it
	got, err := streamAll(t, s, "train/c.tar", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.StreamGets != 1 || st.RangedGets != 0 || st.IndexStreamBuilds != 1 || st.IndexBuilds != 0 {
		t.Errorf("stats %+v: want 1 streaming GET, no ranged GET, the index built in the stream", st)
	}
	var want []string
	for _, f := range files {
		if strings.HasSuffix(f.name, ".jpg") || strings.HasSuffix(f.name, ".png") {
			if path, why := cleanPath(f.name); why == "" {
				want = append(want, "train/c.tar/"+path)
				if !bytes.Equal(got.data["train/c.tar/"+path], f.data) {
					t.Errorf("%s: %d bytes handed over, want its %d", path, len(got.data["train/c.tar/"+path]), len(f.data))
				}
			}
		}
	}
	if !slices.Equal(got.keys, want) {
		t.Errorf("handed over %q, want the images in archive order %q", got.keys, want)
	}
	x, ok := s.indexes.Get("train/c.tar")
	if !ok {
		t.Fatal("the stream kept no index")
	}
	y, err := r.index(ctx, "train/c.tar")
	if err != nil {
		t.Fatal(err)
	}
	sameIndex(t, x, y)

	// Streamed again: from the kept index, one GET, skipping what want
	// declines.
	before := s.Stats()
	got, err = streamAll(t, s, "train/c.tar", "", false, func(o bucket.Object) bool { return !strings.HasSuffix(o.Key, "7.jpg") })
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.StreamGets-before.StreamGets != 1 || st.RangedGets != 0 || st.IndexMemoryHits == before.IndexMemoryHits {
		t.Errorf("stats %+v after %+v: want 1 more streaming GET from the kept index", st, before)
	}
	if len(got.skipped) != 4 || len(got.data) != 40-4+1 || slices.Contains(got.keys, "train/c.tar/sub/deep.png") {
		t.Errorf("skipped %q, %d with bytes (want 4 skipped, 37 read, sub/ left out: not a tree)", got.skipped, len(got.data))
	}
}

// TestStreamTruncatedTar: a tar cut in a member's bytes keeps the members
// before the cut, in the stream as in the ranged walk; those past it are
// not members (they fail alone: no listing has them).
func TestStreamTruncatedTar(t *testing.T) {
	var files []file
	for i := range 30 {
		files = append(files, file{"m" + itoa(100+i) + ".jpg", payload(i, 5000)})
	}
	tb := tarBytes(t, files)
	cut := tb[:512+(512+5120)*20+700] // in member 20's bytes
	objs := map[string][]byte{"t.tar": cut}
	s, log := newBucket(t, objs)
	r := rewrap(t, s)
	got, err := streamAll(t, s, "t.tar", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.data) != 20 || len(got.errs) != 0 {
		t.Fatalf("%d members with bytes, %d failed: want the 20 before the cut", len(got.data), len(got.errs))
	}
	for i := range 20 {
		if !bytes.Equal(got.data["t.tar/"+files[i].name], files[i].data) {
			t.Fatalf("%s: other bytes", files[i].name)
		}
	}
	x, _ := s.indexes.Get("t.tar")
	y, err := r.index(ctx, "t.tar")
	if err != nil {
		t.Fatal(err)
	}
	sameIndex(t, x, y)
	if !strings.Contains(log.String(), "t.tar") {
		t.Errorf("no log line names the archive: %s", log)
	}
}

// breakingBucket's streams break after n bytes.
type breakingBucket struct {
	bucket.Bucket
	n int64
}

func (b breakingBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, bucket.Object, error) {
	return b.Bucket.(bucket.Ranger).GetRange(ctx, key, off, n)
}

func (b breakingBucket) GetStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, bucket.Object, error) {
	body, obj, err := b.Bucket.(bucket.Streamer).GetStream(ctx, key, off, n)
	if err != nil {
		return nil, obj, err
	}
	return &breakingBody{ReadCloser: body, left: b.n}, obj, nil
}

type breakingBody struct {
	io.ReadCloser
	left int64
}

var errReset = errors.New("connection reset by peer")

func (b *breakingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errReset
	}
	n, err := b.ReadCloser.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
}

// TestStreamBreakFallsBackToRangedReads: a stream that breaks part way is
// logged once with the archive key, and the members left come with
// ranged GETs: every member is handed over once, with its bytes, with an
// index (kept or not) and for a zip.
func TestStreamBreakFallsBackToRangedReads(t *testing.T) {
	var files []file
	for i := range 50 {
		files = append(files, file{"m" + itoa(100+i) + ".jpg", payload(i, 9000)})
	}
	for _, c := range []struct {
		name, arch string
		data       []byte
		indexed    bool
	}{
		{"tar, no index", "a.tar", tarBytes(t, files), false},
		{"tar, index kept", "a.tar", tarBytes(t, files), true},
		{"zip", "a.zip", zipBytes(t, files, 8), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := writeFile(dir, c.arch, c.data); err != nil {
				t.Fatal(err)
			}
			b, err := bucket.Open(ctx, dir, bucket.S3Options{})
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			w := Wrap(breakingBucket{b, int64(len(c.data)) / 3}, Config{Formats: Formats, Logger: slog.New(slog.NewTextHandler(&log, nil))}).(*Bucket)
			defer w.Close()
			if c.indexed {
				listAll(t, w, c.arch+"/")
			}
			got, err := streamAll(t, w, c.arch, "", true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.keys) != len(files) || len(got.errs) != 0 {
				t.Fatalf("%d handed over, %d failed (%v), want %d", len(got.keys), len(got.errs), got.errs, len(files))
			}
			for _, f := range files {
				if !bytes.Equal(got.data[c.arch+"/"+f.name], f.data) {
					t.Fatalf("%s: other bytes", f.name)
				}
			}
			st := w.Stats()
			if st.StreamBreaks != 1 || st.StreamGets != 1 || st.RangedGets == 0 {
				t.Errorf("stats %+v: want 1 stream, 1 break, the rest ranged", st)
			}
			if n := strings.Count(log.String(), "stream broke"); n != 1 || !strings.Contains(log.String(), "key="+c.arch) {
				t.Errorf("%d log lines of the break, want 1 naming %s:\n%s", n, c.arch, log.String())
			}
		})
	}
}

// TestStreamMemberOverTheBoundFailsAlone: a member larger than the
// object-size bound fails alone; the others are handed over.
func TestStreamMemberOverTheBoundFailsAlone(t *testing.T) {
	files := []file{{"a.jpg", payload(1, 100)}, {"huge.jpg", payload(2, 5000)}, {"c.jpg", payload(3, 100)}}
	dir := t.TempDir()
	if err := writeFile(dir, "x.tar", tarBytes(t, files)); err != nil {
		t.Fatal(err)
	}
	b, err := bucket.Open(ctx, dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, indexed := range []bool{false, true} {
		w := Wrap(b, Config{Formats: Formats, MaxMemberBytes: 1000, Logger: slog.New(slog.DiscardHandler)}).(*Bucket)
		if indexed {
			listAll(t, w, "x.tar/")
		}
		got, err := streamAll(t, w, "x.tar", "", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.data) != 2 || !errors.Is(got.errs["x.tar/huge.jpg"], bucket.ErrTooLarge) {
			t.Errorf("indexed %v: %d with bytes, errors %v: want 2, huge.jpg too large", indexed, len(got.data), got.errs)
		}
		w.owner.Close()
	}
}

// TestStreamBadArchive: a streamed archive that is no tar fails with
// ErrBadArchive, logged once, and hands nothing over.
func TestStreamBadArchive(t *testing.T) {
	w, log := newBucket(t, map[string][]byte{"bad.tar": bytes.Repeat([]byte("x"), 3000)})
	got, err := streamAll(t, w, "bad.tar", "", true, nil)
	if !errors.Is(err, ErrBadArchive) || len(got.keys) != 0 {
		t.Fatalf("err %v, %d handed over: want ErrBadArchive and none", err, len(got.keys))
	}
	if w.Stats().BadArchives != 1 || strings.Count(log.String(), "featurefs: bad archive") != 1 {
		t.Errorf("stats %+v, log %s: want one bad archive", w.Stats(), log)
	}
	if _, err := streamAll(t, w, "none.tar", "", true, nil); !errors.Is(err, ErrNoStream) {
		t.Errorf("no such archive: %v, want ErrNoStream", err)
	}
}

// writeFile writes data at key under dir.
func writeFile(dir, key string, data []byte) error {
	p := filepath.Join(dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// rewrap is another Bucket over w's bucket (nothing kept).
func rewrap(t *testing.T, w *Bucket) *Bucket {
	r := Wrap(w.b, Config{Formats: Formats, Logger: slog.New(slog.DiscardHandler)}).(*Bucket)
	t.Cleanup(func() { r.owner.Close() })
	return r
}

// TestStreamRepeatedPath: a tar that repeats a member path (appended to)
// has its copies handed over as they come, each later one under an ETag
// naming its offset; the index keeps the last copy, under the last one's
// ETag, so that a feature computed from an earlier copy is never taken
// for it. A stored index keeps the mark.
func TestStreamRepeatedPath(t *testing.T) {
	v1, v2 := payload(1, 700), payload(2, 900)
	w, _ := newBucket(t, map[string][]byte{"r.tar": tarBytes(t, []file{{"a.jpg", v1}, {"b.jpg", payload(3, 10)}, {"a.jpg", v2}})})
	store := &memStore{m: map[string][]byte{}}
	w.SetIndexStore(store)
	var etags []string
	var datas [][]byte
	err := w.Stream(ctx, "r.tar", "", true, nil, func(m StreamMember) error {
		if m.Object.Key == "r.tar/a.jpg" {
			etags, datas = append(etags, m.Object.ETag), append(datas, m.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(etags) != 2 || etags[0] == etags[1] || !bytes.Equal(datas[0], v1) || !bytes.Equal(datas[1], v2) {
		t.Fatalf("a.jpg handed over as %q: want both copies in order, under two ETags", etags)
	}
	for _, b := range []*Bucket{w, rewrap(t, w)} {
		b.SetIndexStore(store)
		obj, err := b.Stat(ctx, "r.tar/a.jpg")
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := b.Get(ctx, "r.tar/a.jpg", 0)
		if err != nil || obj.ETag != etags[1] || !bytes.Equal(data, v2) {
			t.Errorf("a.jpg: ETag %s, %v: want the last copy's %s and bytes", obj.ETag, err, etags[1])
		}
	}
	r := rewrap(t, w) // no store: the ranged walk
	if obj, err := r.Stat(ctx, "r.tar/a.jpg"); err != nil || obj.ETag != etags[1] {
		t.Errorf("the ranged walk's a.jpg: ETag %s, %v, want %s", obj.ETag, err, etags[1])
	}
}
