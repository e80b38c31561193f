package extractor

// This file bounds the memory that image decodes hold at once, in bytes,
// across all decode workers of a Service: before an image is decoded its
// cost is estimated from its header (decodeCost) and that many bytes are
// taken from one weighted semaphore (decodeBudget); they are given back
// when the resized crop is ready. An image that costs more than the whole
// budget is decoded alone (it takes the whole budget); one over
// --max-pixels is refused from its header as before. A large decode waits
// for room rather than adding to the peak: 12 reads of a 9000x9000 16-bit
// RGBA PNG at once (891 MB each to decode with image/png) took a mount to
// 4.4 GB before; with the default budget they run one after another.
//
// Go's heap does not shrink when a decode ends: its buffers are garbage
// until the next collection, and the next decode would allocate beside
// them. So a decode of at least gcAfterBytes drops its buffers and
// collects before it gives its bytes back, and once the budget has been
// idle for freeAfter after such a decode the heap is handed back to the
// operating system (debug.FreeOSMemory; at most once per freeAfter, and
// not between the decodes of a burst, which would fault the pages in
// again).

import (
	"context"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/featurefs/featurefs/extractor/spec"
)

// DefaultDecodeMemory is the default decode budget (Config.DecodeMemory):
// the bytes that the images being decoded at once may hold.
const DefaultDecodeMemory = spec.DefaultDecodeMemory

// DefaultFetchMemory is the default budget of fetched objects
// (Config.FetchMemory), a decodeBudget too: the bytes of the objects the
// workers hold between their GET and the end of their decode.
const DefaultFetchMemory = spec.DefaultFetchMemory

const (
	// gcAfterBytes is the decode cost from which a decode collects
	// garbage before giving its bytes back.
	gcAfterBytes = 64 << 20
	// freeAfter is how long the budget stays idle, after a large decode,
	// before the heap is handed back to the operating system.
	freeAfter = time.Second
	// maxKeptRGB bounds the decoded-RGB buffer a preprocessing scratch
	// keeps for the next image (a 4000x3000 photo's is 36 MB); a larger
	// one is dropped after its decode.
	maxKeptRGB = 48 << 20
	// decodeSlack is the decoder's fixed cost beside its pixel buffers:
	// zlib's window and row buffers, libjpeg's row groups and tables.
	decodeSlack = 1 << 20
)

// decodeBudget is the semaphore of decode memory, in bytes.
type decodeBudget struct {
	size int64
	sem  *semaphore.Weighted

	mu      sync.Mutex
	used    int64  // GUARDED_BY(mu); bytes held
	takes   uint64 // GUARDED_BY(mu); acquires so far
	large   bool   // GUARDED_BY(mu); a decode of gcAfterBytes or more ended since the last free
	freeing bool   // GUARDED_BY(mu); a free is scheduled
	// free hands memory back to the operating system (releaseMemory).
	free func()
}

// newDecodeBudget returns a budget of size bytes (DefaultDecodeMemory when
// size <= 0).
func newDecodeBudget(size int64) *decodeBudget {
	if size <= 0 {
		size = DefaultDecodeMemory
	}
	return &decodeBudget{size: size, sem: semaphore.NewWeighted(size), free: releaseMemory}
}

// acquire waits until cost bytes (at most the whole budget) are free and
// takes them; it returns what it took, for release.
func (b *decodeBudget) acquire(ctx context.Context, cost int64) (int64, error) {
	if b == nil {
		return 0, nil // no budget: unbounded
	}
	n := min(max(cost, 1), b.size)
	if err := b.sem.Acquire(ctx, n); err != nil {
		return 0, err
	}
	b.mu.Lock()
	b.used += n
	b.takes++
	b.mu.Unlock()
	return n, nil
}

// inUse returns the bytes held by decodes now (0 for no budget: nil).
func (b *decodeBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// max returns the budget's size (0 for no budget: nil, unbounded).
func (b *decodeBudget) max() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// release gives back n bytes taken by acquire for a decode that cost cost.
// The caller has dropped the decode's buffers: a large decode collects
// them first, so that the next one reuses their memory.
func (b *decodeBudget) release(n, cost int64) {
	if b == nil || n == 0 {
		return
	}
	if cost >= gcAfterBytes {
		runtime.GC()
	}
	b.mu.Lock()
	b.used -= n
	if cost >= gcAfterBytes {
		b.large = true
	}
	idle := b.used == 0 && b.large && !b.freeing
	if idle {
		b.freeing = true
	}
	takes := b.takes
	b.mu.Unlock()
	b.sem.Release(n)
	if idle {
		time.AfterFunc(freeAfter, func() { b.freeIfIdle(takes) })
	}
}

// freeIfIdle hands the heap back to the operating system when no decode
// has started since the budget went idle (takes acquires then);
// otherwise it waits freeAfter more.
func (b *decodeBudget) freeIfIdle(takes uint64) {
	b.mu.Lock()
	if !b.large {
		b.freeing = false
		b.mu.Unlock()
		return
	}
	if b.used != 0 || b.takes != takes {
		takes = b.takes
		b.mu.Unlock()
		time.AfterFunc(freeAfter, func() { b.freeIfIdle(takes) })
		return
	}
	b.large, b.freeing = false, false
	b.mu.Unlock()
	b.free()
}

// decodeCost estimates the bytes that decoding a w x h image of format
// ("png" or "jpeg", as CheckImage returns them) holds at its peak: the
// decoder's image and the 8-bit RGB copy that the resize reads.
//   - PNG (image/png): the whole image at Go's bytes per pixel for the
//     IHDR's color type and depth: 1 for paletted, up to 4 for gray (a
//     tRNS chunk makes it NRGBA), 4 for 8-bit color or gray+alpha, 8 for
//     16-bit RGB, RGBA and gray (RGBA64, NRGBA64); an interlaced image
//     also holds its passes (counted as a second copy).
//   - JPEG (libjpeg-turbo): a progressive image's whole coefficient buffer
//     (2 bytes per sample, counted at full resolution for every
//     component) beside the decoded rows, 3 bytes per pixel at the
//     decode's scale 1/denom.
func decodeCost(data []byte, format string, w, h, denom int) int64 {
	px := int64(w) * int64(h)
	switch format {
	case "png":
		bpp := int64(4)
		depth, ctype := byte(8), pngColorType(data)
		if len(data) >= 26 {
			depth = data[24]
		}
		switch {
		case ctype == 3:
			bpp = 1
		case depth == 16:
			bpp = 8
		}
		if len(data) >= 29 && data[28] != 0 {
			bpp *= 2 // Adam7: the passes beside the image
		}
		return px*(bpp+3) + decodeSlack
	case "jpeg":
		sw, sh := scaledSize(w, h, max(denom, 1))
		cost := 3*int64(sw)*int64(sh) + decodeSlack
		if progressive, comps := jpegSOF(data); progressive {
			cost += 2 * int64(comps) * px
		}
		return cost
	}
	return decodeSlack
}

// jpegSOF says whether a JPEG's frame is progressive and how many
// components it has, from its markers (jpegKindOf). A header it cannot
// read counts as progressive with 4 components (the costliest).
func jpegSOF(data []byte) (progressive bool, components int) {
	k, err := jpegKindOf(data)
	if err != nil {
		return true, 4
	}
	return k.progressive(), k.components
}
