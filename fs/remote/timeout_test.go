package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// TestSilentServerFailsWithinTimeoutAndCacheStillServes: through an fs.FS
// with a local cache, as the remote mount has it: once the server stops
// answering, an uncached feature fails with ErrUnavailable within about the
// timeout, while a cached feature and the listing seen before are still
// served.
func TestSilentServerFailsWithinTimeoutAndCacheStillServes(t *testing.T) {
	ts := startServer(t, map[string]string{"p/a.jpg": "aaaa", "p/b.jpg": "bbbb"}, nil)
	const timeout = 300 * time.Millisecond
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, Timeout: timeout})
	_, pipe, mc := mountTree(t, c)
	ctx := context.Background()

	page, err := c.Bucket().List(ctx, "p/", "")
	if err != nil || len(page.Objects) != 2 {
		t.Fatalf("list: %v %+v", err, page)
	}
	a, b := page.Objects[0], page.Objects[1]
	got, err := pipe.Feature(ctx, "tiny", 0, a)
	if err != nil || !bytes.Equal(got, expectedFeature([]byte("aaaa"), 0)) {
		t.Fatalf("first read: %v", err)
	}

	ts.hang.Store(true)
	start := time.Now()
	_, err = pipe.Feature(ctx, "tiny", 0, b)
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("silent server: %v, want ErrUnavailable", err)
	}
	if took < timeout || took > 3*timeout {
		t.Errorf("silent server: failed after %v, want about %v", took, timeout)
	}

	hits := mc.Hits.Load()
	start = time.Now()
	got, err = pipe.Feature(ctx, "tiny", 0, a)
	if err != nil || !bytes.Equal(got, expectedFeature([]byte("aaaa"), 0)) {
		t.Errorf("cached feature with the server silent: %v", err)
	}
	if mc.Hits.Load() != hits+1 || time.Since(start) > timeout/2 {
		t.Errorf("cached feature not served from the cache at once (%v)", time.Since(start))
	}
	page2, err := c.Bucket().List(ctx, "p/", "")
	if err != nil || len(page2.Objects) != 2 || c.Stats().StaleAnswers != 1 {
		t.Errorf("listing with the server silent: %v, %d objects, %d stale answers", err, len(page2.Objects), c.Stats().StaleAnswers)
	}
	if _, err := c.Bucket().List(ctx, "never-listed/", ""); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unseen listing with the server silent: %v, want ErrUnavailable", err)
	}
}

// TestHeartbeatsKeepASlowBatchAlive: a batch whose extraction takes three
// times the client's timeout succeeds, because the server sends heartbeats
// while it computes: the timeout measures silence, not work.
func TestHeartbeatsKeepASlowBatchAlive(t *testing.T) {
	ts := startServer(t, map[string]string{"s.jpg": "slow"}, func(c *testConfig) { c.Heartbeat = 40 * time.Millisecond })
	ts.Ex.Delay = 600 * time.Millisecond
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, Timeout: 200 * time.Millisecond})
	got, err := c.Extractor().Extract(context.Background(), featureReq("s.jpg", 0, ""))
	if err != nil || !bytes.Equal(got, expectedFeature([]byte("slow"), 0)) {
		t.Fatalf("slow batch: %v", err)
	}
	if ts.Stats().Heartbeats < 3 {
		t.Errorf("%d heartbeats during a 600ms extraction at 40ms", ts.Stats().Heartbeats)
	}
}

// TestDownServerFailsFastAndListingFallsOver: with two servers, one closed,
// keys routed to the closed one fail with ErrUnavailable while keys routed
// to the live one work, and listings fall over to the live one.
func TestDownServerFailsFastAndListingFallsOver(t *testing.T) {
	objs := map[string]string{}
	for i := range 20 {
		objs[fmt.Sprintf("%c/%02d.jpg", 'p'+i%8, i)] = fmt.Sprintf("v%d", i)
	}
	dir := writeObjects(t, objs)
	live := startServerIn(t, dir, nil)
	dead := startServerIn(t, dir, nil)
	c := dial(t, ClientConfig{URLs: []string{live.URL, dead.URL}, Timeout: 2 * time.Second})
	dead.http.Close()
	ok, failed := 0, 0
	for k, v := range objs {
		start := time.Now()
		got, err := c.Extractor().Extract(context.Background(), featureReq(k, 0, ""))
		switch c.Route(k) {
		case live.URL:
			if err != nil || !bytes.Equal(got, expectedFeature([]byte(v), 0)) {
				t.Errorf("%s on the live server: %v", k, err)
			}
			ok++
		case dead.URL:
			if !errors.Is(err, ErrUnavailable) || time.Since(start) > time.Second {
				t.Errorf("%s on the closed server: %v after %v, want ErrUnavailable at once", k, err, time.Since(start))
			}
			var ie *api.ImageError
			if errors.As(err, &ie) {
				t.Errorf("%s: an unavailable server must not look like a bad image", k)
			}
			failed++
		}
	}
	if ok == 0 || failed == 0 {
		t.Errorf("routing put %d keys on the live server and %d on the closed one", ok, failed)
	}
	for _, prefix := range []string{"", "p/", "q/", "r/", "s/", "t/", "u/", "v/", "w/"} {
		if _, err := c.Bucket().List(context.Background(), prefix, ""); err != nil {
			t.Errorf("list %q with one server closed: %v", prefix, err)
		}
	}
}
