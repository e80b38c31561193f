package features

// This file holds the figures behind the derived fields of .featurefs/stats
// and the Prometheus metrics: the bucket and the extractor are wrapped in New
// so that every caller (reads, prefetch, warm-up, the tree's listings) is
// counted once, where the work happens.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
)

// rateWindow is the span the extraction rate is measured over.
const rateWindow = 10 * time.Second

// observer holds the figures counted by the wrappers.
type observer struct {
	gets, getErrors, bytesFetched atomic.Int64
	lists, listErrors             atomic.Int64
	statCalls, statErrors         atomic.Int64

	extracted, extractFailed atomic.Int64
	rate                     rateMeter
	flightMu                 sync.Mutex
	flights                  map[string]*flight // GUARDED_BY(flightMu); features being extracted
}

// countingBucket counts the calls, errors and bytes of a bucket, and tells
// the store's health every outcome.
type countingBucket struct {
	bucket.Bucket
	o *observer
	h *StoreHealth
}

// List lists one page, counting it.
func (b countingBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	b.o.lists.Add(1)
	p, err := b.Bucket.List(ctx, prefix, token)
	b.h.observe(err)
	if err != nil {
		b.o.listErrors.Add(1)
		return p, &figures.StoreError{Op: "list", Err: err}
	}
	return p, nil
}

// Peek lists the first few entries under prefix, counting it as a listing.
func (b countingBucket) Peek(ctx context.Context, prefix string, n int) (bucket.Page, error) {
	b.o.lists.Add(1)
	p, err := bucket.Peek(ctx, b.Bucket, prefix, n)
	b.h.observe(err)
	if err != nil {
		b.o.listErrors.Add(1)
		return p, &figures.StoreError{Op: "list", Err: err}
	}
	return p, nil
}

// Stat stats one object, counting it.
func (b countingBucket) Stat(ctx context.Context, key string) (bucket.Object, error) {
	b.o.statCalls.Add(1)
	obj, err := b.Bucket.Stat(ctx, key)
	b.h.observe(err)
	if err != nil {
		if !errors.Is(err, bucket.ErrNotFound) {
			b.o.statErrors.Add(1)
		}
		return obj, &figures.StoreError{Op: "stat", Err: err}
	}
	return obj, nil
}

// Get fetches one object, counting it and its bytes.
func (b countingBucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	b.o.gets.Add(1)
	data, obj, err := b.Bucket.Get(ctx, key, maxBytes)
	b.h.observe(err)
	if err != nil {
		b.o.getErrors.Add(1)
		return data, obj, &figures.StoreError{Op: "get", Err: err}
	}
	b.o.bytesFetched.Add(int64(len(data)))
	return data, obj, nil
}

// observedExtractor counts the extractions that complete, for the rate.
// Every other method is the wrapped extractor's. Calls for the same feature
// while one is in flight (a read joining a prefetch) share one extraction in
// the extractor, and count once here too.
type observedExtractor struct {
	Extractor
	o   *observer
	now func() time.Time
}

// Extract extracts, counting the outcome once per shared extraction.
func (x observedExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	id := req.ID
	if id == "" {
		id = req.Key
	}
	k := fmt.Sprintf("%s\x00%d\x00%s", req.Model, req.Layer, id)
	x.o.begin(k)
	data, err := x.Extractor.Extract(ctx, req)
	if x.o.end(k, err == nil) {
		if err != nil {
			x.o.extractFailed.Add(1)
		} else {
			x.o.extracted.Add(1)
			x.o.rate.add(x.now(), 1)
		}
	}
	return data, err
}

// flight is the callers of one feature's extraction in flight.
type flight struct {
	callers int
	counted bool // its outcome has been counted
}

// begin registers a caller of feature k.
func (o *observer) begin(k string) {
	o.flightMu.Lock()
	defer o.flightMu.Unlock()
	if o.flights == nil {
		o.flights = map[string]*flight{}
	}
	f := o.flights[k]
	if f == nil {
		f = &flight{}
		o.flights[k] = f
	}
	f.callers++
}

// end unregisters a caller of k and reports whether its outcome is to be
// counted: the first success among the callers, else the last caller's
// failure when none succeeded.
func (o *observer) end(k string, ok bool) bool {
	o.flightMu.Lock()
	defer o.flightMu.Unlock()
	f := o.flights[k]
	f.callers--
	if f.callers == 0 {
		delete(o.flights, k)
	}
	if f.counted || (!ok && f.callers > 0) {
		return false
	}
	f.counted = true
	return true
}

// rateSlots is how many one-second slots the meter keeps (more than the
// window, so that a slot being filled is never one being read).
const rateSlots = 64

// rateMeter counts events in one-second slots of a ring.
type rateMeter struct {
	mu    sync.Mutex
	slots [rateSlots]rateSlot // GUARDED_BY(mu)
}

// rateSlot is the count of one second.
type rateSlot struct {
	sec int64 // Unix second the count belongs to
	n   int64
}

// add counts n events at time t.
func (m *rateMeter) add(t time.Time, n int64) {
	sec := t.Unix()
	s := &m.slots[uint64(sec)%rateSlots]
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case sec > s.sec: // the slot's second is over
		s.sec, s.n = sec, n
	case sec == s.sec:
		s.n += n
	} // an event older than the ring is dropped
}

// perSecond returns the events per second and the span in seconds they
// were counted over: the window's complete seconds before now's, or, when
// less than the window has passed since start, every second since start
// divided by the time since start (at least a second).
func (m *rateMeter) perSecond(now, start time.Time, window time.Duration) (float64, float64) {
	last := now.Unix()
	first, end, span := last-int64(window/time.Second), last-1, window
	if up := now.Sub(start); up < window {
		first, end, span = start.Unix(), last, max(up, time.Second)
	}
	var n int64
	m.mu.Lock()
	for _, s := range m.slots {
		if s.sec >= first && s.sec <= end {
			n += s.n
		}
	}
	m.mu.Unlock()
	return float64(n) / span.Seconds(), span.Seconds()
}
