package views

import (
	"context"
	"sync"
	"time"
)

// File is a generated file: its size and modification time known without
// computing its bytes, its bytes at any offset, and a Version that
// changes whenever what it was made from did (the mount gives each
// version its own inode number: a changed file is a new file, and an
// open one keeps its bytes).
type File interface {
	Size() int64
	ModTime() time.Time
	Version() uint64
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
}

// Snapshots keeps the Datasets scanned lately, each for ttl, within a
// bound on the bytes they hold all together (the oldest dropped first), so
// that an array's data, labels and rows files looked up together share one
// scan, and one snapshot per directory is held at most.
type Snapshots struct {
	ttl   time.Duration
	max   int64
	clock func() time.Time

	mu    sync.Mutex
	held  int64                // GUARDED_BY(mu)
	order []string             // GUARDED_BY(mu): keys, oldest first
	snaps map[string]*snapshot // GUARDED_BY(mu)
	scans map[string]*scan     // GUARDED_BY(mu): scans in flight
}

type snapshot struct {
	ds    *Dataset
	at    time.Time
	bytes int64
}

type scan struct {
	done chan struct{}
	ds   *Dataset
	err  error
}

// NewSnapshots returns a Snapshots keeping each for ttl within max bytes.
func NewSnapshots(ttl time.Duration, max int64, clock func() time.Time) *Snapshots {
	if clock == nil {
		clock = time.Now
	}
	return &Snapshots{ttl: ttl, max: max, clock: clock, snaps: map[string]*snapshot{}, scans: map[string]*scan{}}
}

// Get returns the snapshot of key scanned within the ttl, or scans it
// (one scan per key at a time: concurrent callers share it).
func (s *Snapshots) Get(ctx context.Context, key string, scanFn func(context.Context) (*Dataset, error)) (*Dataset, error) {
	s.mu.Lock()
	if sn, ok := s.snaps[key]; ok && s.clock().Sub(sn.at) < s.ttl {
		s.mu.Unlock()
		return sn.ds, nil
	}
	sc, ok := s.scans[key]
	if !ok {
		sc = &scan{done: make(chan struct{})}
		s.scans[key] = sc
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-sc.done:
			return sc.ds, sc.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	sc.ds, sc.err = scanFn(ctx)
	s.mu.Lock()
	delete(s.scans, key)
	if sc.err == nil {
		s.put(key, sc.ds)
	}
	s.mu.Unlock()
	close(sc.done)
	return sc.ds, sc.err
}

// put keeps ds under key, dropping the oldest past max. Callers hold mu.
func (s *Snapshots) put(key string, ds *Dataset) {
	if old, ok := s.snaps[key]; ok {
		s.held -= old.bytes
		delete(s.snaps, key)
		for i, k := range s.order {
			if k == key {
				s.order = append(s.order[:i], s.order[i+1:]...)
				break
			}
		}
	}
	b := ds.bytes()
	if b > s.max {
		return
	}
	for s.held+b > s.max && len(s.order) > 0 {
		k := s.order[0]
		s.order = s.order[1:]
		s.held -= s.snaps[k].bytes
		delete(s.snaps, k)
	}
	s.snaps[key] = &snapshot{ds: ds, at: s.clock(), bytes: b}
	s.order = append(s.order, key)
	s.held += b
}

// Held returns the bytes the kept snapshots hold, by Dataset's estimate.
func (s *Snapshots) Held() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}
