package namespace

import (
	"sync"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/figures"
)

// What a feature file's reads remember between them: which version of its
// object to serve (CurrentVersion), the feature a read just computed
// (Recent), a slow failure kept for the kernel's retry of the request that
// failed (Retry), and the record of failed files (Failures).

// FailMemo is how long a slow failure of a file's computation answers the
// kernel's retry of the request that failed (Retry); SlowFailure is what
// slow means (a failure that comes quicker costs little to try again).
const (
	FailMemo    = time.Second
	SlowFailure = 100 * time.Millisecond
)

// FileKey names one object version's feature at one layer directory (each
// directory, a layer's or an alias's, has a View of its own).
type FileKey struct {
	View      *features.View
	Key, ETag string
}

// recentFeature is a computed feature, or the slow failures of its
// computation.
type recentFeature struct {
	data []byte
	fail *failedReads
}

// failedReads are the requests of a file whose computation failed slowly,
// each kept for one retry. When a readahead request fails, the kernel reads
// the first page the reader needs again with a plain read, once, in the
// same read(2): that request, which lies within a failed one, takes the
// failed one's error at once. A later read(2) finds no request left to
// answer it and computes again (when the kernel left pages unfilled after
// a failure, that read starts with a plain read of one page, so a failure
// cannot be told apart from the retry by its size, only by being one
// request's only retry).
type failedReads struct {
	mu     sync.Mutex
	err    error      // GUARDED_BY(mu)
	at     time.Time  // GUARDED_BY(mu): the last failure
	ranges [][2]int64 // GUARDED_BY(mu): failed requests not yet retried
}

// add records a failed request of size bytes at off.
func (fr *failedReads) add(off int64, size int, err error, now time.Time) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if now.Sub(fr.at) >= FailMemo {
		fr.ranges = fr.ranges[:0]
	}
	fr.err, fr.at = err, now
	if len(fr.ranges) < 64 { // a file's readahead is a few requests
		fr.ranges = append(fr.ranges, [2]int64{off, off + int64(max(size, 1))})
	}
}

// retry returns the error of a failed request within FailMemo that holds
// off, and forgets that request; nil when there is none.
func (fr *failedReads) retry(off int64) error {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if time.Since(fr.at) >= FailMemo {
		return nil
	}
	for i, r := range fr.ranges {
		if off >= r[0] && off < r[1] {
			fr.ranges = append(fr.ranges[:i], fr.ranges[i+1:]...)
			return fr.err
		}
	}
	return nil
}

// Recent returns the feature a read of k's file computed lately, if it is
// still kept (in a 32 MiB LRU).
func (ns *Namespace) Recent(k FileKey) ([]byte, bool) {
	if r, ok := ns.recent.Get(k); ok && r.fail == nil {
		return r.data, true
	}
	return nil, false
}

// Retry returns the error of a request of k's file that failed slowly
// (ReadFailed) within the last FailMemo and holds off, and forgets that
// request: the kernel's one retry of it fails at once. It returns nil when
// there is none.
func (ns *Namespace) Retry(k FileKey, off int64) error {
	if r, ok := ns.recent.Get(k); ok && r.fail != nil {
		return r.fail.retry(off)
	}
	return nil
}

// ReadDone records that file (prefix and name under its layer directory)
// was read well; data, if not nil, is the feature a read computed for k,
// kept for the file's next reads (Recent).
func (ns *Namespace) ReadDone(k FileKey, file string, data []byte) {
	ns.failed.clear(file)
	if data != nil {
		ns.recent.Put(k, recentFeature{data: data}, len(data))
	}
}

// ReadFailed records that the computation of file's feature, a request of
// size bytes at off started at started, failed with err: in the failures
// record, and when it took SlowFailure or longer, for the kernel's retry
// of that request (Retry).
func (ns *Namespace) ReadFailed(k FileKey, file string, off int64, size int, err error, started time.Time) {
	ns.failed.add(file, k.Key, figures.ErrReason(k.Key, err), ns.now())
	now := time.Now()
	if now.Sub(started) < SlowFailure {
		return
	}
	ns.failMu.Lock()
	defer ns.failMu.Unlock()
	r, ok := ns.recent.Get(k)
	if !ok || r.fail == nil {
		r = recentFeature{fail: &failedReads{}}
		ns.recent.Put(k, r, 1)
	}
	r.fail.add(off, size, err, now)
}

// CurrentVersion returns the version of the object named name under prefix
// that a read should serve, given the version obj the file was made for:
// the fresh listing's, or a newer one a read found since that listing was
// read (features.Pipeline.NewerVersion). It returns false when a fresh
// complete listing no longer has the name (the object was deleted or
// renamed). It asks only the caches.
func (ns *Namespace) CurrentVersion(prefix, name string, obj bucket.Object) (bucket.Object, bool) {
	listedAt := time.Time{}
	if l, ok := ns.listings.Get(prefix); ok && ns.fresh(l) {
		e, found, complete := l.find(name)
		switch {
		case found && !e.Dir:
			obj = e.Obj
		case complete:
			return obj, false
		}
		listedAt = l.listedAt
	}
	if nv, seen, ok := ns.p.NewerVersion(obj.Key); ok && seen.After(listedAt) {
		obj = nv
	}
	return obj, true
}
