package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/cache/codec"
)

// Auto compression of the values in files of their own (Options.RawFiles:
// the mount's --cache-compression auto; docs/CACHE.md, "Compression of
// file-stored features", issue 49 item 7).
//
// The codec costs CPU (zeros-elision about 0.5 ms per 803 KB layer12
// feature) to halve the disk a feature takes. Where the model costs tens
// of milliseconds per image (a CPU host), that is a few per cent of the
// extraction and the disk is worth it; where it costs a fraction of a
// millisecond (a GPU host, whose epoch 1 runs out of CPU), it is not. So
// the store measures both and decides per Put:
//
//   - the extraction's compute time per feature comes from the caller
//     (Workload.Extraction: the extractor's inference seconds over the
//     images it batched, sampled at most once a second, over the images
//     since the last sample);
//   - the codec's CPU per byte is measured on this host (the thread's CPU
//     time around each encode of autoMethod, averaged);
//   - a large value is compressed with autoMethod on the write path when
//     its codec CPU is at most autoShare of one feature's extraction, and
//     written raw otherwise (and while the extraction is not known).
//
// Raw files are compacted at rest: once the store has seen no work
// (no read, Put, Has or Delete, and no change in Workload.Activity) for
// Options.CompactAfter, one goroutine re-encodes them one at a time, at
// most half of one core (it sleeps as long as each file took), and stops
// at the first sign of work, abandoning the file in hand. A compaction
// writes exactly what a Put of the same key under autoMethod writes (the
// same record, its CRCs over the same bytes, checked against the raw
// file's chunk table first) the way a Put writes it: a temporary file,
// renamed into place, then the index entry. Between the rename and the
// index entry the file no longer matches its entry; a read that finds it
// so waits for the key's stripe, which the compactor holds until the
// entry is committed, and reads again. A kill -9 between the two leaves
// an intent record (intentKey: the ID and the new pointer) that the next
// Open resolves: the file is the compacted record (roll forward) or still
// the raw one (drop the intent). Either way the entry is valid, old or new.
//
// A compacted value is no longer a file of exactly its bytes, so it can
// no longer be handed to the kernel (FUSE passthrough, OpenFile): the
// compactor skips every value OpenFile has handed out in this process.
// The mount uses passthrough only with --cache-compression off, where
// nothing is compacted.

// The auto policy's constants.
const (
	// autoMethod is the codec for large values under auto: zeros-elision,
	// which keeps a ReLU's output at about half its bytes (1.60x on
	// ResNet-50 layer12's real features, 1.94x on the activation-like
	// set) for about a quarter of S2's CPU (docs/CODEC.md).
	autoMethod = codec.Zeros
	// autoShare is the largest share of a feature's extraction time the
	// codec may cost on the write path.
	autoShare = 0.05
	// DefaultCompactAfter is Options.CompactAfter's default: how long the
	// store sees no work before it compacts raw files.
	DefaultCompactAfter = 10 * time.Second
	// minCodecPsPerByte is a floor under any codec's CPU per byte (in
	// picoseconds: 20 GB/s); an extraction so cheap that even this would
	// cost more than autoShare keeps values raw without a measurement.
	minCodecPsPerByte = 50
	// extractionSampleEvery is how often a Put samples the extraction
	// cost once it is known, and extractionProbeEvery before.
	extractionSampleEvery = time.Second
	extractionProbeEvery  = 50 * time.Millisecond
	// compactBatch is how many index entries a compaction pass reads from
	// Badger at a time.
	compactBatch = 64
	// handedOutSize bounds the set of values OpenFile handed out.
	handedOutSize = 1 << 16
)

// intentKey holds the compaction in progress, if any: the ID, then the
// pointer record its file gets (a flagsFile pointer). One compactor, one
// file at a time: at most one intent.
var intentKey = []byte{prefixSetting, 'c', 'o', 'm', 'p', 'a', 'c', 't'}

// Workload is what the store learns of the work around it (SetWorkload),
// for the auto policy of Options.RawFiles. Either function may be nil.
type Workload struct {
	// Activity returns a count that grows with every request the caller
	// serves (lookups, reads, fetches, extractions): the store compacts
	// only while neither it nor its own operations change.
	Activity func() int64
	// Extraction returns the extractor's compute time so far and the
	// features (images) it computed in it: the store's measure of what a
	// feature costs to make.
	Extraction func() (compute time.Duration, features int64)
}

// autoState is the auto policy's and the compactor's state.
type autoState struct {
	// Constant after Open.
	on    bool          // Options.RawFiles, with files: the auto policy applies
	after time.Duration // Options.CompactAfter; <= 0: no compaction

	workMu      sync.Mutex
	work        Workload      // GUARDED_BY(workMu)
	lastCompute time.Duration // GUARDED_BY(workMu); the last sample
	lastN       int64         // GUARDED_BY(workMu)

	sampledAt atomic.Int64 // unix nanoseconds of the last extraction sample
	extractNs atomic.Int64 // compute nanoseconds per feature; 0 unknown
	codecPs   atomic.Int64 // autoMethod's CPU picoseconds per raw byte (average); 0 unknown

	ops     atomic.Int64 // the store's reads, Puts, Has and Deletes
	pending atomic.Int64 // raw Puts (and 1 at open): raw files may wait
	passGen atomic.Int64 // pending's value at the start of the last full pass

	handed handedOut

	autoPuts, compactions, compactSaved, compactAborts atomic.Int64

	done chan struct{} // closed when the compactor returns; nil: none started
	// testStep, when set by a test, runs at each step of a compaction
	// ("intent", "renamed", "committed") with the key's stripe held.
	testStep atomic.Pointer[func(step string, i id)]
}

// SetWorkload tells the store what the work around it looks like (the
// mount's pipeline, at its start; a zero Workload at its end). Under
// Options.RawFiles, Activity keeps the compactor off while the caller is
// busy, and Extraction decides whether large values are compressed on the
// write path.
func (s *Store) SetWorkload(w Workload) {
	a := &s.auto
	a.workMu.Lock()
	a.work, a.lastCompute, a.lastN = w, 0, 0
	a.workMu.Unlock()
	a.extractNs.Store(0)
	s.sampleExtraction(time.Now())
}

// sampleExtraction reads the caller's extraction figures and, when
// features were computed since the last sample, sets the compute time per
// feature to theirs.
func (s *Store) sampleExtraction(now time.Time) {
	a := &s.auto
	a.sampledAt.Store(now.UnixNano())
	a.workMu.Lock()
	f := a.work.Extraction
	a.workMu.Unlock()
	if f == nil {
		return
	}
	c, n := f() // no lock held across a call into the caller
	a.workMu.Lock()
	defer a.workMu.Unlock()
	if n > a.lastN && c > a.lastCompute {
		a.extractNs.Store(int64((c - a.lastCompute) / time.Duration(n-a.lastN)))
	}
	a.lastCompute, a.lastN = c, n // figures that went back (a new extractor) start over
}

// maybeSampleExtraction samples the extraction at most once per
// extractionSampleEvery (extractionProbeEvery while it is not known).
func (s *Store) maybeSampleExtraction() {
	a := &s.auto
	every := extractionSampleEvery
	if a.extractNs.Load() == 0 {
		every = extractionProbeEvery
	}
	now := time.Now()
	last := a.sampledAt.Load()
	if now.UnixNano()-last < int64(every) || !a.sampledAt.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.sampleExtraction(now)
}

// autoCompresses reports whether a Put of a large value of n bytes
// compresses it (with autoMethod) on the write path: when the codec's CPU
// for it is at most autoShare of a feature's extraction. An unknown codec
// cost is measured by compressing the value, unless even the floor of any
// codec's cost would be too much.
func (s *Store) autoCompresses(n int) bool {
	a := &s.auto
	s.maybeSampleExtraction()
	ex := a.extractNs.Load()
	if ex <= 0 {
		return false
	}
	budget := autoShare * float64(ex) * 1000 // picoseconds
	ps := a.codecPs.Load()
	if ps == 0 {
		ps = minCodecPsPerByte
	}
	return float64(ps)*float64(n) <= budget
}

// threadCPU returns the calling thread's CPU time in nanoseconds.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// encodeAuto is encodeCompressedTo with autoMethod, its CPU time measured
// (on the calling thread, which it holds meanwhile) into the codec cost.
func (s *Store) encodeAuto(dst []byte, i id, v []byte, elemSize int) ([]byte, error) {
	runtime.LockOSThread()
	c0, t0 := threadCPU(), time.Now()
	rec, err := encodeCompressedTo(dst, i, v, elemSize, autoMethod)
	c1 := threadCPU()
	runtime.UnlockOSThread()
	s.compressNanos.Add(int64(time.Since(t0)))
	if err == nil && c0 > 0 && c1 > c0 && len(v) > 0 {
		s.auto.noteCodec((c1 - c0) * 1000 / int64(len(v)))
	}
	return rec, err
}

// noteCodec adds one measurement of the codec's picoseconds per byte to
// its running average (an eighth of the way).
func (a *autoState) noteCodec(ps int64) {
	ps = max(ps, 1)
	for {
		old := a.codecPs.Load()
		nw := ps
		if old > 0 {
			nw = old + (ps-old)/8
		}
		if a.codecPs.CompareAndSwap(old, nw) {
			return
		}
	}
}

// activity is a count that changes with any work: the store's own
// operations and the caller's (Workload.Activity).
func (s *Store) activity() int64 {
	a := &s.auto
	n := a.ops.Load()
	a.workMu.Lock()
	f := a.work.Activity
	a.workMu.Unlock()
	if f != nil {
		n += f()
	}
	return n
}

// npyElemSize returns the element size of a .npy file of float32 ('<f4':
// 4) or float16 ('<f2': 2), the dtypes features have and the sizes a Put
// takes from the key's dtype; 0 for anything else.
func npyElemSize(b []byte) int {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return 0
	}
	var hl, at int
	switch b[6] {
	case 1:
		hl, at = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return 0
		}
		hl, at = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return 0
	}
	if hl > 1<<16 || at+hl > len(b) {
		return 0
	}
	h := b[at : at+hl]
	switch {
	case bytes.Contains(h, []byte("'descr': '<f4'")):
		return 4
	case bytes.Contains(h, []byte("'descr': '<f2'")):
		return 2
	}
	return 0
}

// handedOut remembers, up to handedOutSize, the values OpenFile handed
// out as files (an arbitrary one forgotten to make room): the compactor
// leaves them raw, so that a backing file the kernel holds stays the
// file of its entry.
type handedOut struct {
	mu sync.Mutex
	m  map[id]struct{}
}

func (h *handedOut) add(i id) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[id]struct{})
	}
	if _, ok := h.m[i]; !ok && len(h.m) >= handedOutSize {
		for o := range h.m {
			delete(h.m, o)
			break
		}
	}
	h.m[i] = struct{}{}
}

func (h *handedOut) has(i id) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[i]
	return ok
}

// compactLoop is the compactor: it waits for the store to see no work
// for CompactAfter, then compacts raw files one at a time until work
// appears or none is left.
func (s *Store) compactLoop() {
	a := &s.auto
	defer close(a.done)
	t := time.NewTicker(min(max(a.after/4, 5*time.Millisecond), time.Second))
	defer t.Stop()
	last := int64(-1)
	var quiet time.Time
	var cursor []byte // where an interrupted pass resumes
	var gen int64     // pending when the pass began at the start
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		now := time.Now()
		if n := s.activity(); n != last {
			last, quiet = n, now
			continue
		}
		if now.Sub(quiet) < a.after || a.pending.Load() == a.passGen.Load() {
			continue
		}
		if cursor == nil {
			// Raw Puts from now on may land before where a resumed
			// pass goes on: they are left to the next pass.
			gen = a.pending.Load()
		}
		var done bool
		cursor, done = s.compactPass(cursor, last)
		if done {
			a.passGen.Store(gen)
			cursor = nil
		}
	}
}

// stopCompacting reports whether the compactor stops: the store is
// closing, or work appeared since it saw the count idle.
func (s *Store) stopCompacting(idle int64) bool {
	select {
	case <-s.quit:
		return true
	default:
	}
	return s.activity() != idle
}

// rawCandidate is an entry whose value is a raw file: its ID and its
// pointer record as the index held it.
type rawCandidate struct {
	id  id
	ptr []byte
}

// compactPass compacts the raw files whose index entries come at or after
// from, until it is interrupted (returning where to resume) or reaches
// the end (done).
func (s *Store) compactPass(from []byte, idle int64) (resume []byte, done bool) {
	if from == nil {
		from = []byte{prefixValue}
	}
	for {
		if s.stopCompacting(idle) {
			return from, false
		}
		cands, next, err := s.rawCandidates(from, compactBatch)
		if err != nil {
			s.log.Debug("cache: compaction: list entries", "dir", s.dir, "err", err)
			return from, false
		}
		for k, c := range cands {
			if s.stopCompacting(idle) {
				return dbKey(prefixValue, cands[k].id), false
			}
			t0 := time.Now()
			if !s.compactOne(c.id, c.ptr, idle) {
				return dbKey(prefixValue, c.id), false // abandoned: work appeared
			}
			// At most half a core: as long asleep as it worked.
			pause := time.NewTimer(time.Since(t0))
			select {
			case <-s.quit:
				pause.Stop()
				return dbKey(prefixValue, c.id), false
			case <-pause.C:
			}
		}
		if next == nil {
			return nil, true
		}
		from = next
	}
}

// rawCandidates returns up to n entries at or after from whose value is
// a raw file's pointer, and the key to continue from (nil at the end).
func (s *Store) rawCandidates(from []byte, n int) ([]rawCandidate, []byte, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	var out []rawCandidate
	var next []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixValue}, PrefetchValues: false})
		defer it.Close()
		for it.Seek(from); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(out) >= n {
				next = item.KeyCopy(nil)
				return nil
			}
			// A raw file's pointer is 32 bytes and 4 per chunk: inline
			// in the tree. Anything longer is a value, never read here.
			if len(k) != 1+IDLen || item.ValueSize() > 4<<10 {
				continue
			}
			if err := item.Value(func(b []byte) error {
				if len(b) >= headerLen && [4]byte(b[:4]) == magic && binary.LittleEndian.Uint32(b[12:]) == flagsRawFile {
					out = append(out, rawCandidate{id: id(k[1:]), ptr: bytes.Clone(b)})
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return out, next, err
}

// compactOne re-encodes i's raw file with autoMethod, if it still is the
// file of the pointer ptr, nobody was handed it, it verifies, and it
// shrinks; it gives up as soon as work appears (the count is no longer
// idle) before the file takes its place, and then returns false.
func (s *Store) compactOne(i id, ptr []byte, idle int64) bool {
	a := &s.auto
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed || s.readOnly.Load() || s.gone.Load() || a.handed.has(i) {
		return true
	}
	p, err := parseRawPtr(i, ptr)
	if err != nil {
		return true // a read finds it and drops it
	}
	s.mu.Lock()
	sl, ok := s.idx.lookup(i)
	ok = ok && slotKind(&s.idx.slots[sl]) == kindFeature
	s.mu.Unlock()
	if !ok {
		return true
	}
	abort := func() bool { a.compactAborts.Add(1); return false }
	f, err := s.openFile(i, p)
	if f == nil {
		return true // missing, or not what the index says: a read drops it
	}
	bp := getBuf(int(p.recLen))
	defer putBuf(bp)
	v := *bp
	err = preadFull(f, v, 0)
	f.Close()
	if err != nil {
		return true
	}
	// The record is made from bytes that verify against the entry's
	// chunk table: a damaged file is left for a read to find and drop.
	fr := frame{seed: crc32.Update(0, castagnoli, i[:]), table: []byte(p.head[headerLen:])}
	for k := range numChunks(len(v)) {
		if fr.verifyChunk(k, v[k*chunkSize:min((k+1)*chunkSize, len(v))]) != nil {
			return true
		}
	}
	es := npyElemSize(v)
	if es == 0 {
		return true
	}
	if s.stopCompacting(idle) {
		return abort()
	}
	rbp := recordBuf(recordCap(len(v)))
	rec, err := s.encodeAuto(*rbp, i, v, es)
	defer func() {
		if cap(rec) == cap(*rbp) {
			*rbp = rec[:0]
			recPool.Put(rbp)
		}
	}()
	if err != nil || len(rec)-headerLen >= len(v) {
		return true
	}
	if s.stopCompacting(idle) {
		return abort()
	}
	release, err := s.admitWrite(int64(len(rec))+writeSlack, s.memTable, false)
	if err != nil {
		return true
	}
	defer release()
	tmp, err := s.writeFile(i, rec)
	if err != nil {
		return true
	}
	if s.stopCompacting(idle) {
		os.Remove(tmp.path)
		return abort()
	}
	if err := s.placeCompacted(i, ptr, tmp, rec); err != nil {
		s.log.Warn("cache: compaction", "id", i.String(), "err", err)
	}
	return true
}

// placeCompacted puts the compacted record rec, written to tmp, in place
// of i's raw file whose pointer is ptr, as a Put would (rename, then the
// index entry), under an intent record that Open resolves after a crash
// between the two. It leaves everything as it was, removing tmp, when the
// entry changed since ptr was read.
func (s *Store) placeCompacted(i id, ptr []byte, tmp tmpFile, rec []byte) error {
	a := &s.auto
	newPtr := encodePtr(i, rec, len(rec))
	stored := uint32(len(rec) - headerLen)
	st := s.stripe(i)
	st.Lock()
	defer st.Unlock()
	var cur []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(dbKey(prefixValue, i))
		if err != nil {
			return err
		}
		cur, err = item.ValueCopy(nil)
		return err
	})
	s.mu.Lock()
	_, live := s.idx.lookup(i)
	s.mu.Unlock()
	if err != nil || !live || !bytes.Equal(cur, ptr) {
		os.Remove(tmp.path) // evicted, deleted or replaced meanwhile
		return nil
	}
	intent := append(append(make([]byte, 0, IDLen+len(newPtr)), i[:]...), newPtr...)
	if err := s.update(func(txn *badger.Txn) error { return txn.Set(intentKey, intent) }); err != nil {
		os.Remove(tmp.path)
		return err
	}
	s.step("intent", i)
	if err := s.placeFile(i, tmp); err != nil {
		// Not renamed (placeFile removed tmp): the raw file stands.
		if derr := s.update(func(txn *badger.Txn) error { return txn.Delete(intentKey) }); derr != nil {
			s.log.Debug("cache: compaction: drop intent", "err", derr)
		}
		return err
	}
	s.step("renamed", i)
	if err := s.update(func(txn *badger.Txn) error { return commitCompacted(txn, i, newPtr, stored) }); err != nil {
		// The file is the compacted record, the entry still the raw
		// pointer: a read finds them apart and drops the entry; the
		// intent, if Badger has it, rolls it forward at the next Open.
		return fmt.Errorf("commit: %w", err)
	}
	s.step("committed", i)
	s.mu.Lock()
	if sl, ok := s.idx.lookup(i); ok {
		old := s.idx.slots[sl].size
		s.bytes += int64(stored) - int64(old)
		s.idx.slots[sl].size = stored
		a.compactSaved.Add(int64(old) - int64(stored))
	}
	s.mu.Unlock()
	a.compactions.Add(1)
	return nil
}

// commitCompacted points i's entry at its compacted file (newPtr) with
// its stored size, keeping its access sequence number, and drops the
// intent.
func commitCompacted(txn *badger.Txn, i id, newPtr []byte, stored uint32) error {
	item, err := txn.Get(dbKey(prefixMeta, i))
	if err != nil {
		return err
	}
	var m metaRecord
	if err := item.Value(func(b []byte) (err error) {
		m, err = decodeMeta(b)
		return err
	}); err != nil {
		return err
	}
	m.size = stored
	if err := txn.Set(dbKey(prefixValue, i), newPtr); err != nil {
		return err
	}
	if err := txn.Set(dbKey(prefixMeta, i), m.encode()); err != nil {
		return err
	}
	return txn.Delete(intentKey)
}

func (s *Store) step(name string, i id) {
	if f := s.auto.testStep.Load(); f != nil {
		(*f)(name, i)
	}
}

// recoverCompaction resolves a compaction a crash interrupted (Open,
// before the index is loaded): if the entry's file is the compacted
// record the intent names, the entry is pointed at it; otherwise the
// raw file still stands. The intent is dropped either way.
func (s *Store) recoverCompaction() error {
	var intent []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(intentKey)
		if err != nil {
			return err
		}
		intent, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache: read compaction intent in %s: %w", s.dir, err)
	}
	forward := false
	var i id
	var newPtr []byte
	var stored uint32
	if len(intent) == IDLen+ptrLen {
		i, newPtr = id(intent[:IDLen]), intent[IDLen:]
		if p, err := parsePtr(i, newPtr); err == nil && !p.raw() && p.recLen > headerLen {
			if f, st, err := openRegular(s.filePath(i)); err == nil {
				head := make([]byte, headerLen)
				forward = st.Size == p.recLen && preadFull(f, head, 0) == nil && [4]byte(head[4:8]) == p.crc
				f.Close()
			}
			stored = uint32(p.recLen - headerLen)
		}
	}
	err = s.db.Update(func(txn *badger.Txn) error {
		if forward {
			// Only over the entry the intent was made for: a raw
			// pointer (a Delete or eviction since leaves none).
			item, err := txn.Get(dbKey(prefixValue, i))
			if err == nil {
				err = item.Value(func(b []byte) error {
					if len(b) < headerLen || binary.LittleEndian.Uint32(b[12:]) != flagsRawFile {
						forward = false
					}
					return nil
				})
			}
			if errors.Is(err, badger.ErrKeyNotFound) {
				forward, err = false, nil
			}
			if err != nil {
				return err
			}
			if forward {
				err := commitCompacted(txn, i, newPtr, stored)
				if !errors.Is(err, badger.ErrKeyNotFound) {
					return err
				}
				forward = false
			}
		}
		return txn.Delete(intentKey)
	})
	if err != nil {
		return fmt.Errorf("cache: resolve compaction intent in %s: %w", s.dir, err)
	}
	if forward {
		s.log.Info("cache: finished a compaction interrupted by a crash", "dir", s.dir, "id", i.String())
	}
	return nil
}
