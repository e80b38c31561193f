package fs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/views"
)

// A stat of a predictions file after --metadata-ttl, whose prefix's
// listing the namespace dropped (the metadata budget), waits at most
// views.PredStaleGrace for the new listing: past it the last snapshot answers,
// and the new one, read on in the background, replaces it when it comes.
// Before, the stat read the whole prefix again page by page first
// (issue 40: a first-after-TTL stat took 39 s on a loaded store); here
// that read takes 20 pages x 400 ms = 8 s.
func TestPredictionsStatAfterTTLIsBounded(t *testing.T) {
	b := newFakeBucket(50)
	for i := range 1000 {
		b.put(fmt.Sprintf("d/img%04d.jpg", i), []byte{byte(i)})
	}
	clock := newFakeClock()
	// A metadata budget of 64 nodes' worth: d/'s listing (1,000 entries)
	// is not kept, so a stat after the TTL reads it again page by page.
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{
		Bucket: b, Extractor: newFakeExtractor(), Cache: newFakeCache(),
		MetadataTTL: time.Minute, NegativeTTL: time.Minute, ReadTimeout: time.Minute, Now: clock.Now,
	}, Config: Config{MetadataBytes: 64 * nodeBytes}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pf := f.preds.Model(f.models[0]).File("d/")
	stat := func() (int64, time.Duration) {
		t.Helper()
		t0 := time.Now()
		size, _, err := pf.Stat(context.Background())
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		return size, time.Since(t0)
	}
	size0, _ := stat()
	if size0 == 0 {
		t.Fatal("empty predictions file")
	}

	b.put("d/img9999.jpg", []byte("new"))
	b.ListDelay = 400 * time.Millisecond
	clock.Advance(2 * time.Minute)
	size1, took := stat()
	if took > views.PredStaleGrace+3*time.Second {
		t.Errorf("stat after the TTL took %v: it waited for the whole listing (bound %v)", took, views.PredStaleGrace)
	}
	if size1 != size0 {
		t.Errorf("stat within the grace: size %d, want the last snapshot's %d", size1, size0)
	}
	// The refresh goes on and replaces the snapshot: the new image shows.
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, ok := pf.Held()
		if ok && s.Images() == 1001 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background refresh never replaced the snapshot")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if size2, _ := stat(); size2 <= size0 {
		t.Errorf("after the refresh: size %d, want more than %d", size2, size0)
	}
}
