package features

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

func TestRateMeter(t *testing.T) {
	var m rateMeter
	start := time.Unix(1000, 0)
	for s := range 100 {
		m.add(start.Add(time.Duration(s)*time.Second), int64(s%3)) // 0,1,2,0,1,2,...
	}
	now := start.Add(100 * time.Second)
	rate, span := m.perSecond(now, start, 10*time.Second)
	// Seconds 90..99: 0,1,2,0,1,2,0,1,2,0 = 9 events.
	if span != 10 || rate != 0.9 {
		t.Errorf("rate %v over %v, want 0.9 over 10", rate, span)
	}
	// An event older than the ring does not overwrite a newer second.
	m.add(now.Add(-70*time.Second), 1000) // second 30, in second 94's slot
	if rate, _ := m.perSecond(now, start, 10*time.Second); rate != 0.9 {
		t.Errorf("an old second changed the rate: %v", rate)
	}
	// Long idle: the slots hold old seconds, none counts.
	if rate, _ := m.perSecond(now.Add(100*time.Second), start, 10*time.Second); rate != 0 {
		t.Errorf("rate after 100s idle = %v, want 0", rate)
	}
	// Right after start: every event since start over the time since start.
	var m2 rateMeter
	m2.add(start, 3)
	m2.add(start.Add(1500*time.Millisecond), 3)
	if rate, span := m2.perSecond(start.Add(2*time.Second), start, 10*time.Second); rate != 3 || span != 2 {
		t.Errorf("2s after start: %v over %v, want 3 over 2", rate, span)
	}
}

// gateExtractor blocks every Extract until gate is closed.
type gateExtractor struct {
	*fakeExtractor
	gate chan struct{}
}

func (x gateExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	<-x.gate
	if strings.HasPrefix(req.Key, "fail") {
		return nil, errors.New("failed")
	}
	return []byte("npy"), nil
}

func TestSharedExtractionCountsOnce(t *testing.T) {
	var o observer
	clock := fakes.NewClock()
	gate := make(chan struct{})
	x := observedExtractor{Extractor: gateExtractor{newFakeExtractor(), gate}, o: &o, now: clock.Now}
	var wg sync.WaitGroup
	// A prefetch and two reads of one feature, one read of another layer of
	// it, and two callers of a failing one.
	for _, r := range []api.Request{
		{Model: "tiny", Layer: 0, Key: "a", ID: "src\x00a\x00e1", Priority: api.Background},
		{Model: "tiny", Layer: 0, Key: "a", ID: "src\x00a\x00e1"},
		{Model: "tiny", Layer: 0, Key: "a", ID: "src\x00a\x00e1"},
		{Model: "tiny", Layer: 1, Key: "a", ID: "src\x00a\x00e1"},
		{Model: "tiny", Layer: 0, Key: "fail", ID: "f"},
		{Model: "tiny", Layer: 0, Key: "fail", ID: "f"},
	} {
		wg.Go(func() { x.Extract(context.Background(), r) })
	}
	for {
		o.flightMu.Lock()
		n := 0
		for _, f := range o.flights {
			n += f.callers
		}
		o.flightMu.Unlock()
		if n == 6 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	if got, failed := o.extracted.Load(), o.extractFailed.Load(); got != 2 || failed != 1 {
		t.Errorf("completed %d, failed %d; want 2 (two layers of a) and 1", got, failed)
	}
	if rate, _ := o.rate.perSecond(clock.Now(), clock.Now(), rateWindow); rate != 2 {
		t.Errorf("rate %v, want 2", rate)
	}
	if len(o.flights) != 0 {
		t.Errorf("%d flights left", len(o.flights))
	}
	// Later calls of the same feature are new extractions.
	x.Extract(context.Background(), api.Request{Model: "tiny", Key: "a", ID: "src\x00a\x00e1"})
	if got := o.extracted.Load(); got != 3 {
		t.Errorf("completed %d after a later call, want 3", got)
	}
}
