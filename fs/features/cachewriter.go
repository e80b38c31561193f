package features

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// Cache write-behind defaults (Config.CacheWriteBytes, Config.CacheWriters,
// Config.CacheDrainTimeout).
const (
	// defaultCacheWriteBytes bounds the features queued for the cache: 80
	// layer12-sized features (800KB), several seconds of a CPU's epoch and
	// tens of milliseconds of a GPU's, enough to ride out a burst (a
	// batch of 256 answered at once) without the queue filling; at most
	// Prefetch.MaxBytes when that is set (the user bounded memory).
	defaultCacheWriteBytes = 64 << 20
	// maxCacheWriters bounds the writer goroutines: a quarter of the
	// cores (compression is CPU work that competes with decoding and the
	// model), at least 1 and at most maxCacheWriters. One S2 writer
	// stores a few hundred 800KB features a second; a GPU epoch needs
	// more than one.
	maxCacheWriters = 4
	// defaultCacheDrainTimeout bounds Close's wait for the queued writes:
	// 64MiB at a slow disk's 10MB/s, with room; beyond it the cache is
	// stuck and what is left is dropped (and logged).
	defaultCacheDrainTimeout = 20 * time.Second
)

// defaultCacheWriters is Config.CacheWriters's default: a quarter of the
// cores, between 1 and maxCacheWriters.
func defaultCacheWriters() int {
	return min(max(runtime.NumCPU()/4, 1), maxCacheWriters)
}

// pendingWrite is one feature waiting for its cache write.
type pendingWrite struct {
	id   string    // key.ID()
	key  cache.Key // the cache key
	obj  string    // the object key, for logs
	data []byte    // the .npy bytes: read-only, shared with the reader
}

// cacheWriter is the pipeline's write-behind queue of cache writes. A
// feature just computed (by a read, prefetch or warm-up, or taken from the
// feature store) is queued and its producer goes on at once; a few writer
// goroutines compress and store the queued features, oldest first. Until
// its write returns, a queued feature is answered from the queue (get), so
// a read right after a write finds it, and the cache then has it: there is
// no moment when neither does.
//
// Bounds: the bytes queued never pass maxBytes. When a foreground
// producer's feature (a reader's own) finds no room, the cache is not
// keeping up with extraction (on a GPU host the store's disk and the codec
// fall behind the extractor): the feature is served and not cached
// (counted as skipped, said once in the log), so a reader never waits on
// the cache. A background producer (prefetch, warm-up: what fills the
// cache for later mounts) waits for room, and may fill only bgBytes
// (three quarters of the bound), so that a reader's feature still finds
// room while prefetch runs ahead of the writers; its wait ends with its
// context, and it then writes inline. A feature larger than the bound is
// written inline. At most writers goroutines
// write, started when work is queued and gone when the queue is empty.
//
// close stops queueing (later features are written inline) and waits for
// the queued ones to be written, within a timeout. Safe for concurrent
// use.
type cacheWriter struct {
	// Constant after newCacheWriter.
	put      func(*pendingWrite) // stores one feature, handling its error
	log      *slog.Logger
	maxBytes int64 // the bound on the bytes queued
	bgBytes  int64 // background producers queue up to this
	writers  int

	mu      sync.Mutex
	pending map[string]*pendingWrite // GUARDED_BY(mu): queued or being written, by id
	queue   []*pendingWrite          // GUARDED_BY(mu): not yet taken by a writer, oldest first
	bytes   int64                    // GUARDED_BY(mu): the bytes of pending
	peak    int64                    // GUARDED_BY(mu)
	running int                      // GUARDED_BY(mu): writer goroutines
	closed  bool                     // GUARDED_BY(mu)
	changed chan struct{}            // GUARDED_BY(mu): closed (and replaced) when a write ends

	closeOnce sync.Once
	// owner counts the writer goroutines (run); close waits for them once
	// the queue is written, and not past its timeout: a writer stuck in
	// the cache is left behind, as its feature is.
	owner *lifetime.Owner

	background, inline, skipped, waits, reads, dropped atomic.Int64
	skipOnce                                           sync.Once
}

// newCacheWriter returns an empty queue of at most maxBytes, written by at
// most writers goroutines calling put.
func newCacheWriter(put func(*pendingWrite), log *slog.Logger, maxBytes int64, writers int) *cacheWriter {
	return &cacheWriter{
		put: put, log: log, maxBytes: maxBytes, bgBytes: maxBytes / 4 * 3, writers: max(writers, 1),
		pending: map[string]*pendingWrite{}, changed: make(chan struct{}), owner: lifetime.New(),
	}
}

// What enqueue did with a feature.
type enqueued int

const (
	queued   enqueued = iota // queued (or the same key's bytes are)
	noRoom                   // a foreground producer found the queue full: not cached
	writeNow                 // the caller writes it itself: too large, closing, or a wait that ended
)

// enqueue queues w for a writer and says what the caller does next. With
// wait (a background producer) it waits for room until ctx ends; without,
// it never waits.
func (c *cacheWriter) enqueue(ctx context.Context, w *pendingWrite, wait bool) enqueued {
	n := int64(len(w.data))
	limit := c.maxBytes
	if wait {
		limit = c.bgBytes
	}
	if n > limit {
		return writeNow // never fits
	}
	waited := false
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return writeNow
		}
		if _, ok := c.pending[w.id]; ok {
			c.mu.Unlock()
			return queued // the same key's bytes are queued
		}
		if c.bytes+n <= limit {
			break
		}
		if !wait {
			c.mu.Unlock()
			return noRoom
		}
		if !waited {
			waited = true
			c.waits.Add(1)
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return writeNow
		}
		c.mu.Lock()
	}
	c.pending[w.id] = w
	c.queue = append(c.queue, w)
	c.bytes += n
	c.peak = max(c.peak, c.bytes)
	if c.running < c.writers {
		c.running++
		c.owner.Go(c.run) // open: close marks closed first, under mu
	}
	c.mu.Unlock()
	return queued
}

// run writes queued features until the queue is empty.
func (c *cacheWriter) run() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		w := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.mu.Unlock()

		c.put(w) // the feature stays in pending, readable, until stored

		c.mu.Lock()
		c.background.Add(1) // under mu: stats sees it written or queued, once
		if c.pending[w.id] == w {
			delete(c.pending, w.id)
			c.bytes -= int64(len(w.data))
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
}

// get returns the queued feature id, if it is queued or being written.
func (c *cacheWriter) get(id string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.pending[id]
	if !ok {
		return nil, false
	}
	return w.data, true
}

// flush waits until nothing is queued or ctx ends.
func (c *cacheWriter) flush(ctx context.Context) error {
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.mu.Unlock()
			return nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close stops queueing and waits, at most timeout, for every queued
// feature to be written; past it, the features not yet taken by a writer
// are dropped and a warning says how many (a write in progress ends when
// the cache gives up on it, its owner closing it). Concurrent and later
// calls wait for the first.
func (c *cacheWriter) close(timeout time.Duration) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if c.flush(ctx) == nil {
			c.owner.Close() // the writers are leaving: nothing is queued
			return
		}
		c.mu.Lock()
		dropped := len(c.queue)
		for _, w := range c.queue {
			delete(c.pending, w.id)
			c.bytes -= int64(len(w.data))
		}
		c.queue = nil
		writing := len(c.pending)
		c.mu.Unlock()
		c.dropped.Add(int64(dropped))
		c.log.Warn("featurefs: cache writes did not finish before closing; features dropped (they are computed again when read)",
			slog.Int("dropped", dropped), slog.Int("writing", writing), slog.Duration("waited", timeout))
	})
}

// stats returns the queue's figures.
func (c *cacheWriter) stats() figures.CacheWriteStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return figures.CacheWriteStats{
		WriteQueued: len(c.pending), WriteQueuedBytes: c.bytes, WriteQueuePeakBytes: c.peak, WriteQueueMaxBytes: c.maxBytes,
		BackgroundWrites: c.background.Load(), InlineWrites: c.inline.Load(), SkippedWrites: c.skipped.Load(), WriteWaits: c.waits.Load(),
		WriteQueueReads: c.reads.Load(), DroppedWrites: c.dropped.Load(),
	}
}
