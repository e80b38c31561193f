package cache

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// loop is the background cleaner: it retries evictions that pinned entries
// postponed, persists the access order in batches, and reclaims disk space
// after evictions.
func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.kick:
		case <-t.C:
		}
		s.gate.RLock()
		if !s.closed {
			s.maintain()
		}
		s.gate.RUnlock()
	}
}

func (s *Store) maintain() {
	if s.checkDir(); s.gone.Load() || s.readOnly.Load() {
		return
	}
	s.updateReserve()
	if err := privatizeFiles(s.dir, s.log); err != nil {
		s.log.Debug("cache: make the cache files private", "dir", s.dir, "err", err)
	}
	s.mu.Lock()
	victims := s.pickVictimsLocked(nil)
	flushDue := s.idx.dirty > 0 && (s.idx.dirty >= accessFlushDirty || time.Since(s.lastFlush) >= accessFlushInterval)
	s.mu.Unlock()
	s.deleteVictims(victims)
	if flushDue {
		s.flushAccess()
	}
	s.mu.Lock()
	reclaimDue := s.evictedSinceReclaim >= s.reclaimAfter ||
		(s.evictedSinceReclaim > 0 && time.Since(s.lastReclaim) >= reclaimInterval)
	s.mu.Unlock()
	if reclaimDue {
		if err := s.reclaim(); err != nil {
			s.log.Warn("cache: reclaim disk space", "dir", s.dir, "err", err)
		}
	}
}

// flushAccess persists the access order of entries read since the last
// flush: walking the LRU list from its cold end, each dirty entry gets the
// next sequence number, so a restart rebuilds the same order.
func (s *Store) flushAccess() {
	type upd struct {
		id   id
		meta metaRecord
	}
	s.mu.Lock()
	ups := make([]upd, 0, s.idx.dirty)
	for p := s.idx.tail; p != nilSlot && s.idx.dirty > 0; p = s.idx.slots[p].prev {
		e := &s.idx.slots[p]
		if e.flags&flagDirty != 0 {
			e.flags &^= flagDirty
			s.idx.dirty--
			s.seq++
			ups = append(ups, upd{id: e.id, meta: metaRecord{size: e.size, seq: s.seq, kind: slotKind(e)}})
		}
	}
	s.lastFlush = time.Now()
	s.mu.Unlock()
	if len(ups) == 0 {
		return
	}
	// Write stripe by stripe, holding the stripe so that an entry evicted
	// or replaced meanwhile is not resurrected or given a wrong size.
	slices.SortFunc(ups, func(a, b upd) int { return int(a.id[IDLen-1]%numStripes) - int(b.id[IDLen-1]%numStripes) })
	for len(ups) > 0 {
		n := 1
		for n < len(ups) && ups[n].id[IDLen-1]%numStripes == ups[0].id[IDLen-1]%numStripes {
			n++
		}
		group := ups[:n]
		ups = ups[n:]
		st := s.stripe(group[0].id)
		st.Lock()
		s.mu.Lock()
		live := group[:0]
		for _, u := range group {
			if sl, ok := s.idx.lookup(u.id); ok && s.idx.slots[sl].size == u.meta.size {
				live = append(live, u)
			}
		}
		s.mu.Unlock()
		for len(live) > 0 {
			var done int
			err := s.commit(func(txn *badger.Txn) error {
				done = 0
				for _, u := range live {
					if err := txn.Set(dbKey(prefixMeta, u.id), u.meta.encode()); err != nil {
						if errors.Is(err, badger.ErrTxnTooBig) && done > 0 {
							return nil
						}
						return err
					}
					done++
				}
				return nil
			})
			if errors.Is(err, ErrDiskFull) || errors.Is(err, ErrDirRemoved) {
				s.log.Debug("cache: persist access order", "dir", s.dir, "err", err)
				break
			}
			if err != nil {
				s.log.Warn("cache: persist access order", "dir", s.dir, "err", err)
				break
			}
			live = live[done:]
		}
		st.Unlock()
	}
}

// Reclaim makes Badger reclaim the disk space of deleted and evicted
// entries now: it flushes and compacts the LSM tree (so the value log's
// discard statistics are current) and runs value-log GC until no file is at
// least half garbage. The background cleaner does this by itself after
// enough evictions; Reclaim is for tools and measurements.
func (s *Store) Reclaim() error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.reclaim()
}

func (s *Store) reclaim() error {
	s.mu.Lock()
	s.evictedSinceReclaim = 0
	s.lastReclaim = time.Now()
	s.mu.Unlock()

	// Badger flushes a memtable only when it is full and learns which
	// value-log bytes are dead only in compactions. DropPrefix of a
	// sentinel key flushes the memtables and compacts level 0 into the
	// next level, which merges deletions with the values they delete.
	// The flush writes a table and the compaction rewrites level 0: the
	// reserve covers them, admit checks it is there.
	release, err := s.admitWrite(smallWrite, 0, false)
	if errors.Is(err, ErrDiskFull) {
		s.log.Debug("cache: reclaim postponed: filesystem full", "dir", s.dir)
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache: flush %s: %w", s.dir, err)
	}
	s.writeGate.Lock()
	err = s.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte{prefixSentinel}, []byte{1})
	})
	if err == nil {
		err = s.db.DropPrefix([]byte{prefixSentinel})
	}
	s.writeGate.Unlock()
	release()
	if err != nil {
		return fmt.Errorf("cache: flush %s: %w", s.dir, err)
	}
	for range 10000 {
		// A rewrite copies the live half (at most) of a value-log file.
		release, err := s.admitWrite(s.vlogSize/2+writeSlack, s.memTable, false)
		if errors.Is(err, ErrDiskFull) {
			s.log.Debug("cache: value-log GC postponed: filesystem full", "dir", s.dir)
			return nil
		}
		if err != nil {
			return err
		}
		// Writers wait while a file is rewritten: Badger's GC reads the
		// memtable's max version without the lock its writers hold, a data
		// race with concurrent writes.
		s.writeGate.Lock()
		err = s.db.RunValueLogGC(gcDiscardRatio)
		s.writeGate.Unlock()
		release()
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cache: value-log GC in %s: %w", s.dir, err)
		}
		s.gcRewrites.Add(1)
	}
	return nil
}
