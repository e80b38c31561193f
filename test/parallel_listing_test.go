package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// parallelListingObjects is how many objects TestParallelListingOfALargePrefix
// puts under one prefix: five ListObjectsV2 pages of 1,000.
const parallelListingObjects = 4_500

// TestParallelListingOfALargePrefix walks an S3 source (real MinIO) whose
// second directory holds 4,500 objects: the walk lists that directory
// ahead, whole, in key ranges read at once (StartAfter) rather than one
// continuation token after another, and the directory read then lists
// every object once, in key order, as a listing one page at a time would.
// Then ls of that directory alone through a fresh mount (a directory
// reader streaming it) lists the same. The mount's count of List calls
// shows the ranges were read: more requests than the five pages.
func TestParallelListingOfALargePrefix(t *testing.T) {
	srv, env := minioBucket(t, "wide", "", "")
	put := func(keys <-chan string, errc chan<- error) {
		for k := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("wide"), Key: aws.String(k),
				Body: bytes.NewReader([]byte(k)), ContentLength: aws.Int64(int64(len(k)))})
			cancel()
			if err != nil {
				select {
				case errc <- fmt.Errorf("put %s: %w", k, err):
				default:
				}
			}
		}
	}
	keys := make(chan string)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { put(keys, errc) })
	}
	keys <- "a/first.jpg"
	for i := range parallelListingObjects {
		keys <- fmt.Sprintf("b/img%05d.jpg", i)
	}
	close(keys)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}

	m := testMount(t, mountConfig{Source: "s3://wide", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off", "--list-ranges"}})
	root := m.Layer(testLayer)
	// A walk: the root, then a/ (which lists b/ ahead), then b/.
	if des, err := os.ReadDir(root); err != nil || len(des) != 2 {
		t.Fatalf("ls root: %d entries, %v", len(des), err)
	}
	before := statsField(t, mountStats(t, m), "store.list_calls")
	if des, err := os.ReadDir(filepath.Join(root, "a")); err != nil || len(des) != 1 {
		t.Fatalf("ls a: %d entries, %v", len(des), err)
	}
	des, err := os.ReadDir(filepath.Join(root, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != parallelListingObjects {
		t.Fatalf("ls b: %d entries, want %d", len(des), parallelListingObjects)
	}
	for i, de := range des {
		if want := fmt.Sprintf("img%05d.npy", i); de.Name() != want {
			t.Fatalf("ls b: entry %d = %q, want %q (key order, each once)", i, de.Name(), want)
		}
	}
	calls := statsField(t, mountStats(t, m), "store.list_calls") - before
	t.Logf("listing a/ and b/ (%d objects) made %d List calls", parallelListingObjects, calls)
	// a/ is one call; b/ read a page at a time would be five.
	if calls <= 6 {
		t.Errorf("listing a/ and b/ made %d List calls: b/ was read one page at a time, not in key ranges", calls)
	}

	// ls of b/ on its own (a fresh mount, no walk): the directory reader
	// reads its third page on in key ranges, in the background.
	m2 := testMount(t, mountConfig{Source: "s3://wide", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off", "--list-ranges"}})
	b := filepath.Join(m2.Layer(testLayer), "b")
	if _, err := os.Stat(b); err != nil {
		t.Fatal(err)
	}
	before = statsField(t, mountStats(t, m2), "store.list_calls")
	des, err = os.ReadDir(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != parallelListingObjects {
		t.Fatalf("ls b (fresh mount): %d entries, want %d", len(des), parallelListingObjects)
	}
	for i, de := range des {
		if want := fmt.Sprintf("img%05d.npy", i); de.Name() != want {
			t.Fatalf("ls b (fresh mount): entry %d = %q, want %q (key order, each once)", i, de.Name(), want)
		}
	}
	calls = statsField(t, mountStats(t, m2), "store.list_calls") - before
	t.Logf("ls of b/ (%d objects) on its own made %d List calls", parallelListingObjects, calls)
	if calls <= 5 {
		t.Errorf("ls of b/ on its own made %d List calls: read one page at a time, not in key ranges", calls)
	}
}
