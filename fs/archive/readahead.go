package archive

import (
	"context"
	"fmt"
)

// Read-ahead: a walk (prefetch, warm) reads an archive's members in key
// order, which is the order of their offsets in an archive written in
// that order; reading each with its own GET costs one request per sample.
// Once the reads of an archive have followed each other (seqStreak reads
// in a row each starting within seqNear of the last one's end: a walk's
// concurrent reads come a little out of order), a member is read
// through the aligned chunks of ChunkSize that hold it: one GET per chunk,
// kept in an LRU bounded by Config.ReadaheadBytes, so that the next
// members come from memory. Random reads (a shuffled epoch) never start a
// streak and read just their member.

// ChunkSize is the size of one read-ahead GET (and its alignment).
const ChunkSize = 16 << 20

// DefaultReadaheadBytes bounds the chunks kept (4 chunks).
const DefaultReadaheadBytes = 4 * ChunkSize

// seqStreak is how many reads in a row must follow each other before
// reads go through chunks. Random reads of a 140 MB archive (an ImageNet
// class) follow each other by chance with a probability of some 6% each
// (seqNear), so three in a row in 0.02% of reads.
const seqStreak = 3

// seqNear is how far from the last read's end a read that follows it may
// start.
const seqNear = 4 << 20

// maxSeqArchives bounds the archives whose last read is remembered; past
// it, the record starts afresh.
const maxSeqArchives = 4096

// seqState is where an archive's last read ended and how many reads in a
// row followed each other.
type seqState struct {
	end    int64
	streak int
}

// chunkKey names one chunk of one archive version.
type chunkKey struct {
	arch, etag string
	i          int64
}

// sequential records a read of [off, off+n) of x and reports whether the
// reads of x have been sequential.
func (w *Bucket) sequential(x *index, off, n int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seq) >= maxSeqArchives {
		clear(w.seq)
	}
	s := w.seq[x.key]
	if s.end > 0 && off >= s.end-seqNear && off <= s.end+seqNear {
		s.streak++
	} else {
		s.streak = 0
	}
	s.end = off + n
	w.seq[x.key] = s
	return s.streak >= seqStreak
}

// readMember returns n bytes of x at off: from kept chunks, or through
// chunks when the reads are sequential, else with one GET of just them.
func (w *Bucket) readMember(ctx context.Context, x *index, get getRange, off, n int64) ([]byte, error) {
	first, last := off/ChunkSize, (off+n-1)/ChunkSize
	if n <= 0 {
		return nil, nil
	}
	seq := w.sequential(x, off, n)
	cached := true
	for i := first; i <= last && cached; i++ {
		_, cached = w.chunks.Get(chunkKey{x.key, x.etag, i})
	}
	if !cached && (!seq || last-first >= 2) {
		return get(ctx, off, n) // random, or a member of several chunks
	}
	out := make([]byte, 0, n)
	for i := first; i <= last; i++ {
		c, err := w.chunk(ctx, x, get, i)
		if err != nil {
			return nil, err
		}
		lo := max(off, i*ChunkSize) - i*ChunkSize
		hi := min(off+n, i*ChunkSize+int64(len(c))) - i*ChunkSize
		if lo > hi {
			return nil, fmt.Errorf("member at %d: past the archive's end: %w", off, ErrBadArchive)
		}
		out = append(out, c[lo:hi]...)
	}
	return out, nil
}

// chunk returns chunk i of x, kept or read now (one read per chunk at a
// time, detached from its callers: concurrent callers share it).
func (w *Bucket) chunk(ctx context.Context, x *index, get getRange, i int64) ([]byte, error) {
	k := chunkKey{x.key, x.etag, i}
	if c, ok := w.chunks.Get(k); ok {
		return c, nil
	}
	id := fmt.Sprintf("%s\x00%s\x00%d", k.arch, k.etag, k.i)
	return w.chunkReads.Do(ctx, id, func(ctx context.Context) ([]byte, error) {
		if c, ok := w.chunks.Get(k); ok {
			return c, nil
		}
		c, err := get(ctx, i*ChunkSize, min(ChunkSize, x.size-i*ChunkSize))
		if err == nil {
			w.chunks.Put(k, c, len(c))
		}
		return c, err
	})
}
