package bucket_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

// testStore checks a writable Store: Put then GetMeta round-trips the bytes
// and the metadata (under a prefix), overwrites replace both, a missing key
// is ErrNotFound, and Keys lists the keys of one directory that start with
// a string.
func testStore(t *testing.T, s bucket.Store) {
	t.Helper()
	ctx := context.Background()
	meta := map[string]string{"featurefs-etag": "e1", "featurefs-sha256": "abc"}
	if err := s.Put(ctx, "m-123/layer1/d/a.npy", []byte("one"), meta); err != nil {
		t.Fatal(err)
	}
	data, obj, got, err := s.GetMeta(ctx, "m-123/layer1/d/a.npy", 0)
	if err != nil || string(data) != "one" || obj.Size != 3 || got["featurefs-etag"] != "e1" || got["featurefs-sha256"] != "abc" {
		t.Fatalf("GetMeta: %q %+v %v %v", data, obj, got, err)
	}
	if err := s.Put(ctx, "m-123/layer1/d/a.npy", []byte("two!"), map[string]string{"featurefs-etag": "e2"}); err != nil {
		t.Fatal(err)
	}
	data, _, got, err = s.GetMeta(ctx, "m-123/layer1/d/a.npy", 0)
	if err != nil || string(data) != "two!" || got["featurefs-etag"] != "e2" || got["featurefs-sha256"] != "" {
		t.Fatalf("after overwrite: %q %v %v", data, got, err)
	}
	if _, _, _, err := s.GetMeta(ctx, "m-123/layer1/d/none.npy", 0); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("missing key: %v, want ErrNotFound", err)
	}
	if _, _, _, err := s.GetMeta(ctx, "m-123/layer1/d/a.npy", 2); !errors.Is(err, bucket.ErrTooLarge) {
		t.Fatalf("over the bound: %v, want ErrTooLarge", err)
	}
	for _, k := range []string{"src/a.jpg", "src/a.png", "src/ab.jpg", "src/b.jpg", "src/a.x/c.jpg"} {
		if err := s.Put(ctx, k, []byte("img"), nil); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := s.Keys(ctx, "src/a.", 10)
	if err != nil || !slices.Equal(keys, []string{"src/a.jpg", "src/a.png"}) {
		t.Fatalf("Keys(src/a.) = %q, %v", keys, err)
	}
	if keys, err := s.Keys(ctx, "nothing/a.", 10); err != nil || len(keys) != 0 {
		t.Fatalf("Keys of a missing directory = %q, %v", keys, err)
	}
}

func TestStoreS3(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "fst")
	s, err := bucket.OpenStore(context.Background(), "s3://fst/prefix", m.S3Options())
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, s)
	// The prefix is the store's: the object is under it in the bucket.
	if _, err := s.Stat(context.Background(), "m-123/layer1/d/a.npy"); err != nil {
		t.Fatal(err)
	}
	plain, err := bucket.Open(context.Background(), "s3://fst", m.S3Options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Stat(context.Background(), "prefix/m-123/layer1/d/a.npy"); err != nil {
		t.Fatalf("the object is not under the prefix: %v", err)
	}
}

func TestStoreLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "store") // created by OpenStore
	s, err := bucket.OpenStore(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, s)
}
