package featurestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/leakcheck"
)

func openDir(t *testing.T) (bucket.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := bucket.OpenStore(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

func ref(name string) Ref {
	return Ref{Model: "tiny", ModelDigest: strings.Repeat("ab", 32), Layer: "layer1", Name: name, ETag: "e1", Digest: "d1"}
}

func TestRoundTripAndLayout(t *testing.T) {
	bs, dir := openDir(t)
	s, err := New(Config{Store: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetManifest(ModelDir("tiny", strings.Repeat("ab", 32)), []byte(`{"model":"tiny"}`))
	data := []byte("feature bytes")
	r := ref("train/cat/a.npy")
	if _, ok, _ := s.Get(context.Background(), r, int64(len(data))); ok {
		t.Fatal("hit before any write")
	}
	if !s.Put(r, data) {
		t.Fatal("put dropped")
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "tiny-abababababab", "layer1", "train", "cat", "a.npy"))
	if err != nil || string(got) != string(data) {
		t.Fatalf("layout: %q, %v", got, err)
	}
	if m, err := os.ReadFile(filepath.Join(dir, "tiny-abababababab", ManifestName)); err != nil || string(m) != `{"model":"tiny"}` {
		t.Fatalf("manifest: %q, %v", m, err)
	}
	back, ok, err := s.Get(context.Background(), r, int64(len(data)))
	if !ok || err != nil || string(back) != string(data) {
		t.Fatalf("get: %q %v %v", back, ok, err)
	}
	st := s.Stats()
	if st.Hits != 1 || st.Misses != 1 || st.Puts != 1 || st.PutBytes != int64(len(data)) {
		t.Fatalf("stats %+v", st)
	}
}

func TestMismatchesAreMisses(t *testing.T) {
	bs, dir := openDir(t)
	s, _ := New(Config{Store: bs})
	defer s.Close()
	data := []byte("0123456789")
	r := ref("a.npy")
	s.Put(r, data)
	s.Flush(context.Background())
	for name, r2 := range map[string]Ref{
		"other etag":   {Model: r.Model, ModelDigest: r.ModelDigest, Layer: r.Layer, Name: r.Name, ETag: "e2", Digest: r.Digest},
		"other digest": {Model: r.Model, ModelDigest: r.ModelDigest, Layer: r.Layer, Name: r.Name, ETag: r.ETag, Digest: "d2"},
	} {
		if _, ok, err := s.Get(context.Background(), r2, int64(len(data))); ok || err == nil {
			t.Errorf("%s: ok %v err %v, want a mismatch", name, ok, err)
		}
	}
	if _, ok, _ := s.Get(context.Background(), r, int64(len(data))+1); ok {
		t.Error("wrong size served")
	}
	// Flip one byte of the object: the checksum no longer matches.
	p := filepath.Join(dir, "tiny-abababababab", "layer1", "a.npy")
	os.WriteFile(p, []byte("0123456780"), 0o644)
	if _, ok, err := s.Get(context.Background(), r, int64(len(data))); ok || err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("flipped byte: ok %v err %v", ok, err)
	}
	if got := s.Stats().Mismatches; got != 4 {
		t.Fatalf("mismatches %d, want 4", got)
	}
}

// slowStore blocks every Put until released, or fails when broken.
type slowStore struct {
	bucket.Store
	mu      sync.Mutex
	release chan struct{}
	broken  bool
	puts    int
}

func (f *slowStore) Put(ctx context.Context, key string, data []byte, meta map[string]string) error {
	f.mu.Lock()
	broken, rel := f.broken, f.release
	f.mu.Unlock()
	if broken {
		return errors.New("connection refused")
	}
	if rel != nil {
		select {
		case <-rel:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	f.puts++
	f.mu.Unlock()
	return nil
}

func (f *slowStore) GetMeta(ctx context.Context, key string, max int64) ([]byte, bucket.Object, map[string]string, error) {
	f.mu.Lock()
	broken := f.broken
	f.mu.Unlock()
	if broken {
		return nil, bucket.Object{}, nil, errors.New("connection refused")
	}
	return nil, bucket.Object{}, nil, bucket.ErrNotFound
}

func (f *slowStore) Identity() string { return "fake://" }

func TestQueueBoundedInCountAndBytes(t *testing.T) {
	f := &slowStore{release: make(chan struct{})}
	s, _ := New(Config{Store: f, MaxQueue: 3, MaxQueueBytes: 1000, MaxPuts: 1})
	accepted := 0
	for i := range 10 {
		if s.Put(ref("x"+string(rune('a'+i))+".npy"), make([]byte, 100)) {
			accepted++
		}
	}
	// One taken by the writer (blocked), three queued.
	if accepted > 4 || accepted < 3 {
		t.Fatalf("accepted %d of 10 with a queue of 3 and 1 writer", accepted)
	}
	if s.Put(ref("big.npy"), make([]byte, 2000)) {
		t.Fatal("a write over the byte bound was queued")
	}
	st := s.Stats()
	if st.Dropped != int64(10-accepted+1) {
		t.Fatalf("dropped %d, want %d", st.Dropped, 10-accepted+1)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a blocked PUT")
	}
	if s.Put(ref("late.npy"), []byte("x")) {
		t.Fatal("put after Close queued")
	}
	if q := s.Stats(); q.Queued != 0 || q.QueuedBytes != 0 {
		t.Fatalf("after Close: %+v", q)
	}
}

func TestFailingStoreIsLeftAloneThenResumes(t *testing.T) {
	f := &slowStore{broken: true}
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, _ := New(Config{Store: f, Backoff: time.Minute, Now: clock})
	defer s.Close()
	if _, ok, err := s.Get(context.Background(), ref("a.npy"), 4); ok || err == nil {
		t.Fatalf("get of a broken store: %v %v", ok, err)
	}
	// Within the backoff: reads are skipped, writes dropped, at once.
	if _, ok, err := s.Get(context.Background(), ref("a.npy"), 4); ok || err != nil {
		t.Fatalf("get while failing: %v %v", ok, err)
	}
	if s.Put(ref("a.npy"), []byte("data")) {
		t.Fatal("put queued while the store is failing")
	}
	st := s.Stats()
	if st.GetErrors != 1 || st.Skipped != 1 || st.Dropped != 1 {
		t.Fatalf("stats while failing %+v", st)
	}
	// The store comes back and the backoff passes: writes resume.
	f.mu.Lock()
	f.broken = false
	f.mu.Unlock()
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if _, ok, err := s.Get(context.Background(), ref("a.npy"), 4); ok || err != nil {
		t.Fatalf("get after recovery: %v %v", ok, err)
	}
	if !s.Put(ref("a.npy"), []byte("data")) {
		t.Fatal("put dropped after recovery")
	}
	s.Flush(context.Background())
	if st := s.Stats(); st.Puts != 1 || st.Misses != 1 {
		t.Fatalf("stats after recovery %+v", st)
	}
}

// PutWait waits for room instead of dropping, and gives up when its
// context ends.
func TestPutWaitWaitsForRoom(t *testing.T) {
	f := &slowStore{release: make(chan struct{})}
	s, _ := New(Config{Store: f, MaxQueue: 1, MaxPuts: 1})
	defer s.Close()
	for i := range 2 { // one in the writer, one queued
		if !s.PutWait(context.Background(), ref(string(rune('a'+i))+".npy"), []byte("x")) {
			t.Fatalf("put %d dropped", i)
		}
	}
	waited := make(chan bool)
	go func() { waited <- s.PutWait(context.Background(), ref("c.npy"), []byte("x")) }()
	select {
	case <-waited:
		t.Fatal("PutWait returned with the queue full")
	case <-time.After(100 * time.Millisecond):
	}
	close(f.release)
	if !<-waited {
		t.Fatal("PutWait dropped once there was room")
	}
	s.Flush(context.Background())
	if st := s.Stats(); st.Puts != 3 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	f.mu.Lock()
	f.release = make(chan struct{}) // block again
	f.mu.Unlock()
	s.PutWait(context.Background(), ref("d.npy"), []byte("x"))
	s.PutWait(context.Background(), ref("e.npy"), []byte("x"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if s.PutWait(ctx, ref("f.npy"), []byte("x")) {
		t.Fatal("PutWait queued with the queue full and its context ended")
	}
}

// Close leaves no writer behind, even with a PUT blocked in flight and
// writes queued.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	defer leakcheck.Check(t)()
	f := &slowStore{release: make(chan struct{})}
	s, _ := New(Config{Store: f, MaxPuts: 3})
	for i := range 6 {
		s.Put(ref(string(rune('a'+i))+".npy"), []byte("x"))
	}
	s.Close()
	if st := s.Stats(); st.Queued != 0 || st.Puts != 0 {
		t.Fatalf("after Close: %+v", st)
	}
}

// TestCompressedObjects: with Compression, a feature is stored as a
// cache/codec blob (schema 2, encoding ffz1) smaller than it, and read back
// as the .npy bytes; a plain object of schema 1 (written before
// compression) still reads; a damaged blob is a mismatch.
func TestCompressedObjects(t *testing.T) {
	bs, dir := openDir(t)
	s, err := New(Config{Store: bs, Compression: codec.S2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := append([]byte("\x93NUMPY header..."), make([]byte, 100_000)...) // zeros: compresses
	data[len(data)-1] = 7
	r := ref("train/cat/z.npy")
	if !s.Put(r, data) {
		t.Fatal("put dropped")
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tiny-abababababab", "layer1", "train", "cat", "z.npy")
	obj, err := os.ReadFile(path)
	if err != nil || !codec.IsBlob(obj) || len(obj) >= len(data)/10 {
		t.Fatalf("stored object: %d bytes (a blob: %v), %v; want a blob far smaller than %d", len(obj), codec.IsBlob(obj), err, len(data))
	}
	_, _, meta, err := bs.GetMeta(context.Background(), r.Key(), 1<<20)
	if err != nil || meta[MetaEncoding] != EncodingFFZ1 || meta[MetaSchema] != SchemaVersion || meta[MetaSHA256] != checksum(data) {
		t.Fatalf("metadata %v, %v", meta, err)
	}
	back, ok, err := s.Get(context.Background(), r, int64(len(data)))
	if !ok || err != nil || !bytes.Equal(back, data) {
		t.Fatalf("get of a compressed object: ok %v, %v", ok, err)
	}
	if st := s.Stats(); st.PutBytes != int64(len(obj)) {
		t.Errorf("put bytes %d, the object has %d", st.PutBytes, len(obj))
	}

	// A plain object of schema 1.
	old := ref("train/cat/old.npy")
	if err := bs.Put(context.Background(), old.Key(), data, map[string]string{MetaSchema: SchemaPlain, MetaETag: old.ETag,
		MetaKey: old.Digest, MetaSHA256: checksum(data)}); err != nil {
		t.Fatal(err)
	}
	if back, ok, err := s.Get(context.Background(), old, int64(len(data))); !ok || err != nil || !bytes.Equal(back, data) {
		t.Fatalf("get of a schema 1 object: ok %v, %v", ok, err)
	}

	// A damaged blob.
	obj[len(obj)-2] ^= 0x55
	if err := bs.Put(context.Background(), r.Key(), obj, meta); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(context.Background(), r, int64(len(data))); ok || err == nil {
		t.Fatalf("get of a damaged blob: ok %v, %v; want a mismatch", ok, err)
	}
	if s.Stats().Mismatches != 1 {
		t.Errorf("mismatches %d, want 1", s.Stats().Mismatches)
	}
}
