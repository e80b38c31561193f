package extractor

// JPEG decode on the GPU (--decode gpu|auto, issue 38). A gpuJPEG decodes
// batches of baseline JPEGs to full-size RGB on a GPU (nvjpeg.go: nvJPEG,
// its hardware backend where the GPU has JPEG engines, else its GPU
// backend); the CPU then resizes, crops and normalizes the pixels as it
// does libjpeg-turbo's (cropRGB), so only the decode moves. JPEGs the GPU
// decoder does not take (progressive, arithmetic-coded, 12-bit, CMYK/YCCK,
// anything its header check refuses) and PNGs stay on the CPU decoders,
// chosen per image from its header (jpegKindOf).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DecodeMode is --decode: where JPEGs are decoded.
type DecodeMode string

const (
	// DecodeCPU decodes every image on the CPU (libjpeg-turbo, bit-exact
	// with PIL): the default.
	DecodeCPU DecodeMode = "cpu"
	// DecodeGPU decodes the JPEGs the GPU decoder takes on the GPU; it
	// needs a GPU device and nvJPEG, else the CPU decodes, said in one line.
	DecodeGPU DecodeMode = "gpu"
	// DecodeAuto is DecodeGPU where nvJPEG is there and the GPU's type
	// passed the decode fidelity check (gpuDecodeFidelity), else DecodeCPU.
	DecodeAuto DecodeMode = "auto"
)

// errGPURefused is matched by a gpuJPEG's per-image error for an image the
// GPU decoder does not take: it is decoded on the CPU instead.
var errGPURefused = errors.New("not taken by the GPU JPEG decoder")

// gpuJPEG is a JPEG decoder on a GPU. One goroutine at a time calls its
// methods (the GPU decode loop owns it).
type gpuJPEG interface {
	// Decode decodes each imgs[i] to 8-bit interleaved RGB (RGBRGB...,
	// rows top to bottom, no padding) at its full size into dst[i], which
	// holds exactly 3*w*h bytes for the w x h its header gives. It returns
	// one error per image: nil; one matching errGPURefused when the decoder
	// does not take the image (it is then decoded on the CPU); or the
	// image's own error (corrupt, truncated). One image's error never
	// affects the others' pixels, nor later calls. len(imgs) is at most
	// MaxBatch.
	Decode(imgs [][]byte, dst [][]byte) []error
	// MaxBatch is the most images one Decode takes.
	MaxBatch() int
	// Describe names the decoder for logs and doctor, e.g. "nvJPEG 13.0.1
	// (hardware backend) on cuda:0".
	Describe() string
	// Close frees the decoder's GPU and host memory.
	Close() error
}

// gpuJPEGOpener opens the GPU JPEG decoder on GPU dev, its libraries
// looked for by search, for batches of at most maxBatch images (nvjpeg.go
// sets it; nil: this build has none). Tests replace it with a fake.
var gpuJPEGOpener func(dev int, search cudaSearch, maxBatch int) (gpuJPEG, error)

// gpuDecodeFidelity lists the GPU types (NVML's name) on which the decode
// fidelity step of `make gpu-check` passed (docs/GPU.md, "JPEG decode on
// the GPU": mean cosine >= 0.9999 and max relative L2 <= 1e-2 at ResNet-50
// layer12, layer18 and the last layer against PIL): --decode auto decodes
// on the GPU only there. Empty until a GPU host has run it.
var gpuDecodeFidelity = map[string]bool{}

// noFidelity says why --decode auto does not decode on GPU type name.
func noFidelity(name string) string {
	return fmt.Sprintf("no decode fidelity figures for %q yet (make gpu-check's decode step; docs/GPU.md): use --decode gpu to decode on it anyway", name)
}

// gpuGather is how long the GPU decode loop waits, after an image
// arrives, for more to fill its batch.
const gpuGather = 2 * time.Millisecond

// maxGPUDecodeBatch bounds the images of one GPU decode call.
const maxGPUDecodeBatch = 64

// resolveDecode decides where JPEGs are decoded: the GPU decoder it opened
// (nil: the CPU) and the one line that says which and why, for the log and
// doctor. dev is the first device inference runs on.
func resolveDecode(mode DecodeMode, dev deviceChoice, search cudaSearch, maxBatch int) (gpuJPEG, string) {
	switch {
	case mode == "" || mode == DecodeCPU:
		return nil, "cpu: --decode cpu (libjpeg-turbo, bit-exact with PIL)"
	case !dev.gpu:
		return nil, fmt.Sprintf("cpu: --decode %s needs a GPU and inference runs on the CPU", mode)
	case gpuJPEGOpener == nil:
		return nil, fmt.Sprintf("cpu: --decode %s: this build of featurefs has no GPU JPEG decoder", mode)
	case mode == DecodeAuto && !gpuDecodeFidelity[dev.name]:
		return nil, "cpu: --decode auto: " + noFidelity(dev.name)
	}
	dec, err := gpuJPEGOpener(dev.index, search, maxBatch)
	if err != nil {
		return nil, fmt.Sprintf("cpu: --decode %s: %v", mode, err)
	}
	return dec, fmt.Sprintf("gpu: %s (--decode %s; progressive, arithmetic-coded, 12-bit, CMYK and RGB JPEGs and PNGs on the CPU)", dec.Describe(), mode)
}

// gpuDecodeLoop owns a gpuJPEG: decode workers hand it JPEGs (decode),
// and its one goroutine runs them in batches of what arrived together.
type gpuDecodeLoop struct {
	dec gpuJPEG
	// pix bounds the bytes of the pixels decoded on the GPU and not yet
	// resized (--decode-memory, a budget apart from the CPU decodes': a
	// worker holds these pixels while it waits for a decode slot, and the
	// decoders in those slots may wait for room in theirs).
	pix    *decodeBudget
	jobs   chan *gpuJob // unbuffered: a job sent is a job the loop runs
	quit   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	gather time.Duration
	// Figures: images decoded on the GPU, refused by it (decoded on the
	// CPU instead), failed there (bad images), and the batches run.
	decoded, refused, failed, batches atomic.Int64
	nanos                             atomic.Int64
	// cpuKinds counts the JPEGs kept on the CPU by their kind
	// (jpegKind.gpuDecodable), never sent.
	cpuKinds atomic.Int64
}

// gpuJob is one image: its bytes, where its pixels go, and how it went.
type gpuJob struct {
	data, dst []byte
	err       error
	done      chan struct{}
}

func newGPUDecodeLoop(dec gpuJPEG, pix *decodeBudget) *gpuDecodeLoop {
	l := &gpuDecodeLoop{dec: dec, pix: pix, jobs: make(chan *gpuJob), quit: make(chan struct{}), gather: gpuGather}
	l.wg.Add(1)
	go l.run()
	return l
}

// decode decodes data, a JPEG of w x h pixels, into dst (3*w*h bytes) on
// the GPU: nil, an error matching errGPURefused (decode it on the CPU),
// ErrClosed, ctx's error before the loop took the job, or the image's own
// error. Once the loop has taken the job, decode waits for its batch to
// end whatever ctx does: the GPU writes into dst until then.
func (l *gpuDecodeLoop) decode(ctx context.Context, data, dst []byte) error {
	j := &gpuJob{data: data, dst: dst, done: make(chan struct{})}
	select {
	case l.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.quit:
		return ErrClosed
	}
	<-j.done
	return j.err
}

func (l *gpuDecodeLoop) run() {
	defer l.wg.Done()
	max := max(1, l.dec.MaxBatch())
	var batch []*gpuJob
	for {
		batch = batch[:0]
		select {
		case j := <-l.jobs:
			batch = append(batch, j)
		case <-l.quit:
			return
		}
		t := time.NewTimer(l.gather)
	gather:
		for len(batch) < max {
			select {
			case j := <-l.jobs:
				batch = append(batch, j)
			case <-t.C:
				break gather
			case <-l.quit:
				break gather
			}
		}
		t.Stop()
		l.runBatch(batch)
	}
}

// runBatch decodes batch in one call and tells each job how it went. A
// panic in the decoder fails the batch's jobs, not the process.
func (l *gpuDecodeLoop) runBatch(batch []*gpuJob) {
	imgs, dsts := make([][]byte, len(batch)), make([][]byte, len(batch))
	for i, j := range batch {
		imgs[i], dsts[i] = j.data, j.dst
	}
	t0 := time.Now()
	errs := func() (errs []error) {
		defer func() {
			if r := recover(); r != nil {
				errs = nil
				for range batch {
					errs = append(errs, fmt.Errorf("GPU JPEG decoder panicked: %v", r))
				}
			}
		}()
		return l.dec.Decode(imgs, dsts)
	}()
	l.nanos.Add(int64(time.Since(t0)))
	l.batches.Add(1)
	for i, j := range batch {
		switch {
		case i >= len(errs):
			j.err = fmt.Errorf("GPU JPEG decoder returned %d results for %d images", len(errs), len(batch))
		default:
			j.err = errs[i]
		}
		switch {
		case j.err == nil:
			l.decoded.Add(1)
		case errors.Is(j.err, errGPURefused):
			l.refused.Add(1)
		default:
			l.failed.Add(1)
		}
		close(j.done)
	}
}

// close stops the loop (after the batch it is running) and closes the
// decoder. Jobs not yet taken get ErrClosed.
func (l *gpuDecodeLoop) close() {
	l.once.Do(func() {
		close(l.quit)
		l.wg.Wait()
		_ = l.dec.Close()
	})
}

// gpuPixels are an image's pixels decoded on the GPU (pix nil: it is
// decoded on the CPU), held against the GPU pixel budget until release.
type gpuPixels struct {
	pix     []byte
	w, h    int
	release func()
}

// gpuDecode decodes c's object, data, on the GPU when its preprocessing
// decodes it whole and its header says the GPU takes it; otherwise, or
// when the GPU does not (refused, or failed: the CPU decoder then gives
// the image's verdict, as with --decode cpu), the pixels are nil and the
// CPU decodes it. The pixels' memory is taken from the GPU pixel budget
// (gpuDecodeLoop.pix), never from the CPU decodes' one: a worker holds it
// while it waits for a decode slot.
func (s *scheduler) gpuDecode(c *call, data []byte) (gpuPixels, error) {
	none := gpuPixels{release: func() {}}
	p := c.ln.g().m.Preprocess
	w, h, format, err := CheckImage(data, s.cfg.maxPixels)
	if err != nil || format != "jpeg" || dctDenom(p, w, h) > 1 {
		return none, nil
	}
	k, err := jpegKindOf(data)
	if err != nil {
		return none, nil
	}
	if ok, _ := k.gpuDecodable(); !ok {
		s.cfg.gpu.cpuKinds.Add(1)
		return none, nil
	}
	cost := 3 * int64(w) * int64(h)
	held, err := s.cfg.gpu.pix.acquire(c.ctx, cost)
	if err != nil {
		return none, ctxErr(c.ctx)
	}
	pix := getPix(int(cost))
	done := func() {
		putPix(pix)
		s.cfg.gpu.pix.release(held, cost)
	}
	err = s.cfg.gpu.decode(c.ctx, data, pix)
	switch {
	case err == nil:
		return gpuPixels{pix: pix, w: w, h: h, release: done}, nil
	case errors.Is(err, ErrClosed) || c.ctx.Err() != nil:
		done()
		return none, ctxErr(c.ctx)
	}
	done()
	if !errors.Is(err, errGPURefused) {
		s.cfg.log.Debug("GPU JPEG decode failed: decoding on the CPU", "key", c.req.Key, "err", err)
	}
	return none, nil
}

// applyPreprocessFull is applyPreprocess of an image the GPU decoded:
// full holds its w x h RGB pixels.
func applyPreprocessFull(ctx context.Context, p Preprocess, full []byte, w, h int, dst []float32) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return decodeNormalize(ctx, p, "preprocess", p.Crop, nil, 0, dst, nil, nil,
		func(sc *preprocScratch) ([]byte, error) { return cropRGBFull(p, full, w, h, sc) })
}

// pixPool keeps the GPU's decoded pixel buffers of images up to
// maxPooledPix bytes for reuse; larger ones are the collector's.
var pixPool sync.Pool

const maxPooledPix = 16 << 20

func getPix(n int) []byte {
	if n <= maxPooledPix {
		if b, ok := pixPool.Get().(*[]byte); ok && cap(*b) >= n {
			return (*b)[:n]
		}
	}
	return make([]byte, n)
}

func putPix(b []byte) {
	if cap(b) <= maxPooledPix {
		pixPool.Put(&b)
	}
}

// gpuDecodeReserve is the GPU memory the batch sizing leaves to the GPU
// JPEG decoder: its device buffers (kept up to nvjpeg.go's
// maxKeptGPUBytes) and nvJPEG's own state.
const gpuDecodeReserve = 512 << 20

// reserveGPU returns the free-memory estimate and measurement less
// reserve bytes (never below 0).
func reserveGPU(est uint64, free func() (uint64, error), reserve uint64) (uint64, func() (uint64, error)) {
	less := func(n uint64) uint64 {
		if n < reserve {
			return 0
		}
		return n - reserve
	}
	return less(est), func() (uint64, error) {
		n, err := free()
		return less(n), err
	}
}
