package extractor

// The scheduler: requests become calls (identical in-flight requests share
// one call), calls are fetched and preprocessed by a bounded pool of workers
// (foreground first), decoded inputs wait in one lane per segment (model,
// layer, and the layer split execution starts from), and inference loops
// take batches of up to the lane's batch size, waiting at most MaxWait for
// a batch to fill while more of its inputs are on the way.
// The CPU has one inference loop (ONNX Runtime's threads use every core);
// a GPU has several (schedConfig.inflight), so that one batch uploads while
// another computes and a third downloads and is encoded: ONNX Runtime runs
// concurrent Run calls of one session on separate CUDA streams. Each loop
// owns its batch buffers (pinned host memory on a GPU), reused across
// batches.
//
// Several GPUs: each device has a lane of its own (device lane: its
// runner, hence its session pool, its inflight loops and a batch size per
// segment, chosen on that device), all fed from the same segment queues
// by the same workers. A device's loop takes a batch only when it has a
// loop free, so work goes where there is capacity; when loops of several
// devices are free, the batch goes to the device with the fewest items
// running relative to its batch size for the segment (a loop of a busier
// device yields it to the idle one: lessLoadedLocked). One device is
// exactly the single-device scheduler.
//
// A call's input is an image (Request.Fetch, then preprocessing) or, in
// split execution (splitexec.go), the .npy tensor of an earlier layer, which a
// worker decodes like an image; such a call is never shared and waits in
// the lane of its (model, from, to). Both kinds share every bound below.
//
// Bounds: at most maxCalls calls exist at once (Extract and ExtractFrom
// wait for a slot); at most `tokens` decoded inputs exist at once (a worker
// waits for a token before fetching or decoding a tensor); at most
// `decoders` of the `workers` preprocess at once (enterDecode, foreground
// first), the others fetching meanwhile, so that at most workers fetched
// objects are held; the session pool
// bounds sessions (one pool per device); lanes are at most layers (images)
// plus layers^2 (split) per model; at most inflight batches run per device.
//
// Lock order: scheduler.mu, then nothing (sessionPool.mu is never taken under
// it; no fetch, decode or inference runs under it). Split execution has no
// lock of its own.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
)

// runner computes segment g for n inputs (packed in in, g.inputElems()
// each) into out (g.l.Elements() each).
type runner interface {
	run(ctx context.Context, g segment, n int, in, out []float32) error
}

// segment is what one lane computes: layer l of model m, from the model's
// input (an image), or, in split execution, from the output of layer from.
type segment struct {
	m    *model
	l    Layer
	from *Layer // nil: from the model's input
}

// key names the segment's session (and lane). A layer computed from the
// model's input is named by its layer digest, which versions of the model
// that compute it alike share (docs/MODELS.md): a reload that leaves a
// layer's digest as it was keeps its lane, batch size and session. A split
// segment is named by the model file's digest.
func (g segment) key() sessionKey {
	k := sessionKey{model: g.m.Name, version: g.m.Digest, layer: g.l.Index}
	if g.from != nil {
		k.from = g.from.Tensor
	} else if g.l.Digest != "" {
		k.version = g.l.Digest
	}
	return k
}

// inputElems is the number of input elements per sample.
func (g segment) inputElems() int {
	if g.from != nil {
		return int(g.from.Elements())
	}
	return g.m.InputElements()
}

type stage int

const (
	stageFetchQ   stage = iota // waiting for a worker
	stageDecoding              // a worker is fetching and preprocessing it
	stageLane                  // decoded, waiting for a batch
	stageRunning               // in a batch being run
	stageDone
)

// callKey identifies identical requests. A tensor call has a key of its
// own (tensor, a serial number): it is never shared.
type callKey struct {
	model  string
	digest string // the layer's digest: versions never share a call
	layer  int
	id     string
	tensor uint64
}

// tensorInput is a split call's input: the data bytes of a .npy file whose
// header and size were checked against the lane's from layer.
type tensorInput struct {
	dt   DType
	data []byte
}

// call is one computation shared by every identical in-flight request.
type call struct {
	key    callKey
	req    Request
	ln     *lane
	tensor *tensorInput    // nil: the input is req's image
	ctx    context.Context // cancelled when every waiter gave up, or on Close
	cancel context.CancelFunc
	done   chan struct{} // closed when out/err are set
	out    []byte
	err    error

	waiters int       // GUARDED_BY(scheduler.mu)
	prio    Priority  // GUARDED_BY(scheduler.mu)
	stage   stage     // GUARDED_BY(scheduler.mu)
	input   []float32 // GUARDED_BY(scheduler.mu); decoded input while in stageLane
	since   time.Time // GUARDED_BY(scheduler.mu); when it entered its lane
}

// lane holds the decoded inputs of one segment. A lane lives as long as a
// version the service holds has its key (forgetLanes).
type lane struct {
	key sessionKey
	// seg is the segment it computes, on the newest version seen with its
	// key (laneLocked): the versions that share a key compute alike, and a
	// replaced one is not kept alive by a lane that goes on.
	seg      atomic.Pointer[segment]
	ie       int        // input elements per sample
	bufs     *floatPool // where its calls' inputs come from and go back to
	q        [2][]*call // GUARDED_BY(scheduler.mu); by priority
	pending  int        // GUARDED_BY(scheduler.mu); calls of this lane not yet decoded
	bs       []int      // GUARDED_BY(scheduler.mu); batch size per device, 0 until chosen
	choosing []bool     // GUARDED_BY(scheduler.mu); per device: a loop is choosing bs
}

func (ln *lane) len() int { return len(ln.q[0]) + len(ln.q[1]) }

// schedConfig is what the scheduler needs from Config.
type schedConfig struct {
	// workers is the number of goroutines that fetch and preprocess
	// calls; at most decoders of them preprocess at once (foreground
	// first), so that the others fetch the next objects meanwhile: a
	// fetch waits on the store, not on a core.
	workers   int
	decoders  int
	maxWait   time.Duration
	maxCalls  int
	tokens    int
	maxPixels int64
	// decode bounds the memory of the images being decoded at once (nil:
	// unbounded).
	decode *decodeBudget
	// fetch bounds the bytes of the objects fetched (or being fetched)
	// and not yet decoded (nil: unbounded).
	fetch *decodeBudget
	dtype DType
	log   *slog.Logger
	// batchSize chooses the batch size of a lane on device dev (an index
	// into the scheduler's runners); called once per lane and device from
	// one of the device's inference loops (it may run measurements through
	// the device's runner).
	batchSize func(ctx context.Context, g segment, dev int) int
	// inflight is the number of inference loops per device, hence of
	// batches run at once on each (default 1).
	inflight int
	// alloc returns a buffer of n float32s for a batch of a loop of device
	// dev and the function that frees it (nil: nothing to free). Default:
	// make.
	alloc func(dev, n int) ([]float32, func())
	// idle is called once the inference loops have found no work for
	// idleAfter (default defaultIdleAfter) since the last batch ran (nil:
	// nothing is called): the service hands the C heap's free pages back
	// then (memtrim.go).
	idle      func()
	idleAfter time.Duration
	// afterBatch, when set, is called by an inference loop after each
	// batch it ran (memtrim.go: the C heap's free chunks are bounded
	// while the mount works, not only once it is idle).
	afterBatch func()
	// gpu, when set, decodes the JPEGs it takes on a GPU (--decode gpu).
	gpu *gpuDecodeLoop
	// entered, when set (tests), is called with each call that passes
	// enterDecode, under the scheduler's lock.
	entered func(Request)
}

// defaultIdleAfter is how long the inference loops wait without work,
// after a batch, before they call schedConfig.idle.
const defaultIdleAfter = time.Second

// counters are the scheduler's figures (atomics: read by Stats).
type counters struct {
	requests, shared, completed, failed, badImages, cancelled atomic.Int64
	batches, batchedItems, retries                            atomic.Int64
	decodeNanos, inferNanos, fetchNanos                       atomic.Int64
	splitBatches, splitItems                                  atomic.Int64 // of split lanes only
}

// devLane is one device's share of the scheduler.
type devLane struct {
	run  runner
	wake chan struct{} // buffered 1: kicks one of the device's inference loops
	// batches and items are the batches this device ran and their items.
	batches, items atomic.Int64
	running        int // GUARDED_BY(scheduler.mu); items in its batches being run
	waiting        int // GUARDED_BY(scheduler.mu); its loops waiting for work
}

type scheduler struct {
	cfg    schedConfig
	devs   []*devLane // one per runner; never empty
	slots  chan struct{}
	tokens chan struct{}
	ctx    context.Context
	stop   context.CancelCauseFunc
	wg     sync.WaitGroup
	n      counters
	// ranSinceIdle is set by every batch run and cleared when idle is
	// called.
	ranSinceIdle atomic.Bool
	serial       atomic.Uint64 // the last tensor call's callKey.tensor

	mu       sync.Mutex
	cond     *sync.Cond           // workers wait on it for the fetch queue
	gate     *sync.Cond           // fetched calls wait on it to preprocess
	decoding int                  // GUARDED_BY(mu); calls preprocessing (<= cfg.decoders)
	gateWait [2]int               // GUARDED_BY(mu); fetched calls waiting, by priority
	closed   bool                 // GUARDED_BY(mu)
	inflight map[callKey]*call    // GUARDED_BY(mu)
	fetchQ   [2][]*call           // GUARDED_BY(mu)
	lanes    map[sessionKey]*lane // GUARDED_BY(mu)
	running  int                  // GUARDED_BY(mu); items in the batches being run
}

// hostBuf is a batch buffer an inference loop owns and reuses.
type hostBuf struct {
	b    []float32
	free func()
}

// get returns the buffer as n elements, reallocating it on device dev
// (for at least want elements) when it is too small.
func (h *hostBuf) get(alloc func(int, int) ([]float32, func()), dev, n, want int) []float32 {
	if cap(h.b) < n {
		h.release()
		h.b, h.free = alloc(dev, max(n, want))
	}
	return h.b[:n]
}

func (h *hostBuf) release() {
	if h.free != nil {
		h.free()
	}
	h.b, h.free = nil, nil
}

// floatPool recycles one sample's input buffers of one size; its zero
// value is ready for use.
type floatPool struct{ p sync.Pool }

// get returns a buffer of n elements.
func (f *floatPool) get(n int) []float32 {
	if b, ok := f.p.Get().(*[]float32); ok && len(*b) == n {
		return *b
	}
	return make([]float32, n)
}

// put takes b back when it has n elements; another size is left to the GC.
func (f *floatPool) put(b []float32, n int) {
	if len(b) == n {
		f.p.Put(&b)
	}
}

// newScheduler starts a scheduler running batches on runs, one runner per
// device (at least one).
func newScheduler(cfg schedConfig, runs ...runner) *scheduler {
	if len(runs) == 0 {
		panic("extractor: newScheduler without a runner")
	}
	if cfg.workers < 1 {
		cfg.workers = 1
	}
	if cfg.decoders < 1 || cfg.decoders > cfg.workers {
		cfg.decoders = cfg.workers
	}
	if cfg.maxCalls < 1 {
		cfg.maxCalls = 4096
	}
	if cfg.tokens < 1 {
		cfg.tokens = cfg.workers + 32
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.dtype == "" {
		cfg.dtype = Float32
	}
	if cfg.inflight < 1 {
		cfg.inflight = 1
	}
	if cfg.idleAfter <= 0 {
		cfg.idleAfter = defaultIdleAfter
	}
	if cfg.alloc == nil {
		cfg.alloc = func(_, n int) ([]float32, func()) { return make([]float32, n), nil }
	}
	ctx, stop := context.WithCancelCause(context.Background())
	s := &scheduler{
		cfg:      cfg,
		slots:    make(chan struct{}, cfg.maxCalls),
		tokens:   make(chan struct{}, cfg.tokens),
		ctx:      ctx,
		stop:     stop,
		inflight: map[callKey]*call{},
		lanes:    map[sessionKey]*lane{},
	}
	for _, r := range runs {
		s.devs = append(s.devs, &devLane{run: r, wake: make(chan struct{}, 1)})
	}
	s.cond = sync.NewCond(&s.mu)
	s.gate = sync.NewCond(&s.mu)
	for i := 0; i < cfg.workers; i++ {
		s.wg.Add(1)
		go s.worker()
	}
	for dev := range s.devs {
		for i := 0; i < cfg.inflight; i++ {
			s.wg.Add(1)
			go s.inferLoop(dev)
		}
	}
	return s
}

// close stops the workers and the inference loops; calls still queued fail
// with ErrClosed. It waits for the batches being run to finish.
func (s *scheduler) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.stop(ErrClosed)
	var queued []*call
	for p := range s.fetchQ {
		queued = append(queued, s.fetchQ[p]...)
		s.fetchQ[p] = nil
	}
	for _, ln := range s.lanes {
		for p := range ln.q {
			for _, c := range ln.q[p] {
				s.dropInputLocked(c)
			}
			queued = append(queued, ln.q[p]...)
			ln.q[p] = nil
		}
	}
	for _, c := range queued {
		s.finishLocked(c, nil, ErrClosed)
	}
	s.cond.Broadcast()
	s.gate.Broadcast()
	s.mu.Unlock()
	s.kick()
	s.wg.Wait()
}

// kick wakes one inference loop of each device.
func (s *scheduler) kick() {
	for _, d := range s.devs {
		kickDev(d)
	}
}

func kickDev(d *devLane) {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// extract runs req for layer l of m, sharing identical in-flight requests.
func (s *scheduler) extract(ctx context.Context, m *model, l Layer, req Request) ([]byte, error) {
	id := req.ID
	if id == "" {
		id = req.Key
	}
	if v := req.View; v != nil {
		id += fmt.Sprintf("\x00view %d %d %d %d %d %t %d", v.View, v.Top, v.Left, v.Height, v.Width, v.Flip, v.Size)
	} else if a := req.Augment; a != nil {
		id += "\x00" + a.Key() + "\x00" + a.Identity
	}
	return s.submit(ctx, callKey{model: m.Name, digest: l.Digest, layer: l.Index, id: id}, segment{m: m, l: l}, req, nil)
}

// extractFrom runs one tensor of layer g.from (its header and size checked
// by the caller) through g, in the lane of g, as a call of its own. It is
// foreground work: a reader waits for it.
func (s *scheduler) extractFrom(ctx context.Context, g segment, t *tensorInput) ([]byte, error) {
	k := callKey{model: g.m.Name, layer: g.l.Index, tensor: s.serial.Add(1)}
	return s.submit(ctx, k, g, Request{Model: g.m.Name, Layer: g.l.Index, Priority: Foreground}, t)
}

// submit waits for the call of k (a new one computing g from req's image,
// or from t when not nil) and returns its result.
func (s *scheduler) submit(ctx context.Context, k callKey, g segment, req Request, t *tensorInput) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.n.requests.Add(1)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	c := s.inflight[k]
	if c == nil {
		// Take a slot (bounded calls) without holding the lock.
		s.mu.Unlock()
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return nil, ErrClosed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			<-s.slots
			return nil, ErrClosed
		}
		if c = s.inflight[k]; c != nil {
			<-s.slots
		} else {
			c = s.newCallLocked(k, g, req, t)
		}
	}
	c.waiters++
	if c.waiters > 1 {
		s.n.shared.Add(1)
	}
	if req.Priority == Foreground && c.prio == Background {
		s.promoteLocked(c)
	}
	s.mu.Unlock()

	select {
	case <-c.done:
		s.mu.Lock()
		c.waiters--
		s.mu.Unlock()
		return c.out, c.err
	case <-ctx.Done():
		s.mu.Lock()
		c.waiters--
		if c.waiters == 0 && c.stage != stageDone {
			s.abandonLocked(c)
		}
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// newCallLocked creates a call, registers it and queues it for a worker.
func (s *scheduler) newCallLocked(k callKey, g segment, req Request, t *tensorInput) *call {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &call{key: k, req: req, ln: s.laneLocked(g), tensor: t, ctx: ctx, cancel: cancel, done: make(chan struct{}), prio: req.Priority, stage: stageFetchQ}
	if c.prio != Foreground {
		c.prio = Background
	}
	s.inflight[k] = c
	c.ln.pending++
	s.fetchQ[c.prio] = append(s.fetchQ[c.prio], c)
	s.cond.Signal()
	return c
}

// laneLocked returns the lane of g, made on first use: an image lane takes
// its inputs from the model's pool, a split lane (another size) from its
// own.
func (s *scheduler) laneLocked(g segment) *lane {
	k := g.key()
	ln := s.lanes[k]
	if ln == nil {
		ln = &lane{key: k, ie: g.inputElems(), bufs: g.m.bufs, bs: make([]int, len(s.devs)), choosing: make([]bool, len(s.devs))}
		if g.from != nil {
			ln.bufs = &floatPool{}
		}
		ln.seg.Store(&g)
		s.lanes[k] = ln
	} else if cur := ln.g(); cur.m != g.m && cur.m.gen < g.m.gen {
		ln.seg.Store(&g)
	}
	return ln
}

// g returns the segment ln computes.
func (ln *lane) g() segment { return *ln.seg.Load() }

// forgetLanes drops, after a reload, what the lanes hold of versions the
// service no longer holds. version returns the held version a lane's key
// is for (registry.forKey): a lane whose key no version holds is removed
// when it has nothing queued, decoding or choosing a batch size (a batch
// of it that is running finishes on it); a lane that runs on a version no
// longer held is moved to the held one with its key, which computes alike,
// so that it does not keep that version (its file, 100 MB for ResNet-50)
// alive until its next request.
func (s *scheduler) forgetLanes(version func(sessionKey) (*model, bool), held func(*model) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ln := range s.lanes {
		m, ok := version(k)
		if !ok {
			if ln.len() == 0 && ln.pending == 0 && !slices.Contains(ln.choosing, true) {
				delete(s.lanes, k)
			}
			continue
		}
		if g := ln.g(); g.m != m && !held(g.m) && g.from == nil {
			ln.seg.Store(&segment{m: m, l: m.Layers[k.layer]})
		}
	}
}

func removeCall(q []*call, c *call) ([]*call, bool) {
	i := slices.Index(q, c)
	if i < 0 {
		return q, false
	}
	return slices.Delete(q, i, i+1), true
}

// promoteLocked moves a background call to the foreground queues.
func (s *scheduler) promoteLocked(c *call) {
	var ok bool
	switch c.stage {
	case stageFetchQ:
		if s.fetchQ[Background], ok = removeCall(s.fetchQ[Background], c); ok {
			s.fetchQ[Foreground] = append(s.fetchQ[Foreground], c)
		}
	case stageLane:
		ln := c.ln
		if ln.q[Background], ok = removeCall(ln.q[Background], c); ok {
			ln.q[Foreground] = append(ln.q[Foreground], c)
			s.kick()
		}
	}
	c.prio = Foreground
	s.gate.Broadcast() // it may be waiting to preprocess
}

// abandonLocked cancels a call nobody waits for any more.
func (s *scheduler) abandonLocked(c *call) {
	s.n.cancelled.Add(1)
	c.cancel()
	if s.inflight[c.key] == c {
		delete(s.inflight, c.key)
	}
	var ok bool
	switch c.stage {
	case stageFetchQ:
		if s.fetchQ[c.prio], ok = removeCall(s.fetchQ[c.prio], c); ok {
			s.finishLocked(c, nil, context.Canceled)
		}
	case stageLane:
		ln := c.ln
		if ln.q[c.prio], ok = removeCall(ln.q[c.prio], c); ok {
			s.dropInputLocked(c)
			s.finishLocked(c, nil, context.Canceled)
		}
	}
	// Decoding or running: the worker or the inference loop finishes it
	// (one waiting to preprocess wakes to see it cancelled).
	s.gate.Broadcast()
}

// enterDecode waits until c may preprocess: fewer than cfg.decoders calls
// are preprocessing, and c is foreground or no foreground call waits. It
// reports false, having waited for nothing more, when c was cancelled or
// the scheduler closed meanwhile. leaveDecode gives the place back.
func (s *scheduler) enterDecode(c *call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := c.prio
	s.gateWait[p]++
	for {
		if s.closed || c.ctx.Err() != nil {
			s.gateWait[p]--
			return false
		}
		if c.prio != p { // promoted while waiting
			s.gateWait[p]--
			p = c.prio
			s.gateWait[p]++
		}
		if s.decoding < s.cfg.decoders && (p == Foreground || s.gateWait[Foreground] == 0) {
			s.gateWait[p]--
			s.decoding++
			if s.cfg.entered != nil {
				s.cfg.entered(c.req)
			}
			return true
		}
		s.gate.Wait()
	}
}

func (s *scheduler) leaveDecode() {
	s.mu.Lock()
	s.decoding--
	s.mu.Unlock()
	s.gate.Broadcast()
}

// dropInputLocked frees a queued call's decoded input and its token.
func (s *scheduler) dropInputLocked(c *call) {
	if c.input != nil {
		c.ln.bufs.put(c.input, c.ln.ie)
		c.input = nil
		<-s.tokens
	}
}

// finishLocked completes c once.
func (s *scheduler) finishLocked(c *call, out []byte, err error) {
	if c.stage == stageDone {
		return
	}
	if c.stage == stageFetchQ || c.stage == stageDecoding {
		c.ln.pending--
		s.kick()
	}
	c.stage = stageDone
	c.out, c.err = out, err
	if s.inflight[c.key] == c {
		delete(s.inflight, c.key)
	}
	switch {
	case err == nil:
		s.n.completed.Add(1)
	case errors.Is(err, ErrBadImage):
		s.n.badImages.Add(1)
		s.n.failed.Add(1)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed):
	default:
		s.n.failed.Add(1)
	}
	c.cancel()
	close(c.done)
	<-s.slots
}

func (s *scheduler) finish(c *call, out []byte, err error) {
	s.mu.Lock()
	s.finishLocked(c, out, err)
	s.mu.Unlock()
}

// worker fetches and preprocesses calls, foreground first.
func (s *scheduler) worker() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		for !s.closed && len(s.fetchQ[Foreground])+len(s.fetchQ[Background]) == 0 {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		p := Foreground
		if len(s.fetchQ[p]) == 0 {
			p = Background
		}
		c := s.fetchQ[p][0]
		s.fetchQ[p] = slices.Delete(s.fetchQ[p], 0, 1)
		c.stage = stageDecoding
		s.mu.Unlock()
		s.decode(c)
	}
}

// decode fetches and preprocesses c, then hands it to its lane.
func (s *scheduler) decode(c *call) {
	select {
	case s.tokens <- struct{}{}:
	case <-c.ctx.Done():
		s.finish(c, nil, ctxErr(c.ctx))
		return
	}
	input, err := s.prepare(c)
	if err != nil {
		<-s.tokens
		s.finish(c, nil, err)
		return
	}
	s.mu.Lock()
	ln := c.ln
	if c.ctx.Err() != nil || c.stage == stageDone {
		ln.bufs.put(input, ln.ie)
		<-s.tokens
		s.finishLocked(c, nil, ctxErr(c.ctx))
		s.mu.Unlock()
		return
	}
	ln.pending--
	c.stage = stageLane
	c.input = input
	c.since = time.Now()
	ln.q[c.prio] = append(ln.q[c.prio], c)
	s.mu.Unlock()
	s.kick()
}

func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		if errors.Is(context.Cause(ctx), ErrClosed) {
			return ErrClosed
		}
		return err
	}
	return context.Canceled
}

// prepare fetches c's object and preprocesses it, or decodes c's tensor,
// into a new input buffer.
func (s *scheduler) prepare(c *call) ([]float32, error) {
	ln := c.ln
	if t := c.tensor; t != nil {
		if int64(len(t.data)) != int64(ln.ie)*t.dt.Size() {
			return nil, c.runError(fmt.Errorf("%w: %d data bytes, want %d of %s", ErrBadTensor, len(t.data), ln.ie, t.dt))
		}
		if !s.enterDecode(c) {
			return nil, ctxErr(c.ctx)
		}
		defer s.leaveDecode()
		buf := ln.bufs.get(ln.ie)
		t0 := time.Now()
		api.DecodeNPYBody(t.data, t.dt, buf)
		s.n.decodeNanos.Add(int64(time.Since(t0)))
		return buf, nil
	}
	if c.req.Fetch == nil {
		return nil, fmt.Errorf("extract %s: request has no Fetch function", c.req.Key)
	}
	// The object's bytes are held from its GET to the end of its decode:
	// its listed size is taken from the fetch budget before the GET, or
	// what it turned out to be once fetched (never waiting for more while
	// holding some: what was taken is given back first).
	var held, cost int64
	defer func() { s.cfg.fetch.release(held, cost) }()
	take := func(n int64) error {
		s.cfg.fetch.release(held, cost)
		held, cost = 0, 0
		got, err := s.cfg.fetch.acquire(c.ctx, n)
		if err != nil {
			return ctxErr(c.ctx)
		}
		held, cost = got, n
		return nil
	}
	if c.req.Size > 0 {
		if err := take(c.req.Size); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	data, err := c.req.Fetch(c.ctx)
	s.n.fetchNanos.Add(int64(time.Since(t0)))
	if err != nil {
		if c.ctx.Err() != nil {
			return nil, ctxErr(c.ctx)
		}
		return nil, fmt.Errorf("fetch %s: %w", c.req.Key, err)
	}
	if len(data) == 0 {
		return nil, &ImageError{Key: c.req.Key, Reason: "empty object"}
	}
	if n := int64(len(data)); n > cost && held < s.cfg.fetch.max() {
		if err := take(n); err != nil {
			return nil, err
		}
	}
	// JPEGs the GPU decodes are decoded before a decode slot is taken:
	// the CPU's part, the resize, waits for one; the GPU's does not.
	var full gpuPixels
	if s.cfg.gpu != nil && c.req.View == nil && c.req.Augment == nil {
		if full, err = s.gpuDecode(c, data); err != nil {
			return nil, err
		}
		defer full.release()
	}
	if !s.enterDecode(c) {
		return nil, ctxErr(c.ctx)
	}
	defer s.leaveDecode()
	buf := ln.bufs.get(ln.ie)
	t1 := time.Now()
	view := c.req.View
	if a := c.req.Augment; view == nil && a != nil {
		var p augment.Params
		if p, err = ViewParams(*a, data, ln.g().m.Preprocess.Crop, s.cfg.maxPixels); err == nil {
			view = &p
		}
	}
	switch {
	case err != nil:
	case full.pix != nil:
		err = applyPreprocessFull(c.ctx, ln.g().m.Preprocess, full.pix, full.w, full.h, buf)
	case view != nil:
		err = applyViewPreprocess(c.ctx, ln.g().m.Preprocess, *view, data, s.cfg.maxPixels, buf, s.cfg.decode)
	default:
		err = applyPreprocess(c.ctx, ln.g().m.Preprocess, data, s.cfg.maxPixels, buf, s.cfg.decode)
	}
	s.n.decodeNanos.Add(int64(time.Since(t1)))
	if err != nil {
		ln.bufs.put(buf, ln.ie)
		if errors.Is(err, ErrBadImage) {
			return nil, &ImageError{Key: c.req.Key, Reason: "cannot use as image", Err: err}
		}
		if c.ctx.Err() != nil {
			return nil, ctxErr(c.ctx)
		}
		return nil, fmt.Errorf("preprocess %s: %w", c.req.Key, err)
	}
	return buf, nil
}

// inferLoop runs batches on device dev until close, in buffers of its own.
func (s *scheduler) inferLoop(dev int) {
	defer s.wg.Done()
	var in, out hostBuf
	defer in.release()
	defer out.release()
	for {
		ln, batch, bs := s.nextBatch(dev)
		if ln == nil {
			return
		}
		s.runBatch(dev, ln, batch, bs, &in, &out)
	}
}

// pickLaneLocked returns the lane device dev serves next: the one whose
// oldest foreground input is oldest, else the one whose oldest background
// input is. A lane whose batch size another loop of dev is choosing waits.
func (s *scheduler) pickLaneLocked(dev int) *lane {
	for p := Foreground; p <= Background; p++ {
		var best *lane
		for _, ln := range s.lanes {
			if ln.choosing[dev] {
				continue
			}
			if len(ln.q[p]) > 0 && (best == nil || ln.q[p][0].since.Before(best.q[p][0].since)) {
				best = ln
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// lessLoadedLocked returns another device that should take ln's next
// batch instead of dev, or -1: one with a loop waiting for work, ln's
// batch size chosen and fewer items running relative to it than dev has
// relative to dev's (the least loaded such device). Strictly fewer: two
// devices never yield to each other.
func (s *scheduler) lessLoadedLocked(dev int, ln *lane) int {
	best := -1
	for e, d := range s.devs {
		if e == dev || d.waiting == 0 || ln.bs[e] == 0 || ln.choosing[e] {
			continue
		}
		// d.running/bs[e] < running[dev]/bs[dev], without division.
		if d.running*ln.bs[dev] >= s.devs[dev].running*ln.bs[e] {
			continue
		}
		if best < 0 || d.running*ln.bs[best] < s.devs[best].running*ln.bs[e] {
			best = e
		}
	}
	return best
}

// nextBatch blocks until a batch is due for device dev and returns it with
// the lane's batch size on dev (nil lane on close).
func (s *scheduler) nextBatch(dev int) (*lane, []*call, int) {
	d := s.devs[dev]
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// waited: this loop counted itself in d.waiting before its last wait;
	// it takes itself off under the next lock.
	waited := false
	for {
		s.mu.Lock()
		if waited {
			d.waiting--
			waited = false
		}
		if s.closed {
			s.mu.Unlock()
			return nil, nil, 0
		}
		ln := s.pickLaneLocked(dev)
		if ln == nil {
			d.waiting++
			waited = true
			s.mu.Unlock()
			s.waitIdle(dev)
			continue
		}
		if ln.bs[dev] == 0 {
			ln.choosing[dev] = true
			s.mu.Unlock()
			bs := s.cfg.batchSize(s.ctx, ln.g(), dev)
			if bs < 1 {
				bs = 1
			}
			s.mu.Lock()
			ln.bs[dev], ln.choosing[dev] = bs, false
			s.mu.Unlock()
			s.kick() // loops that skipped the lane meanwhile
			continue
		}
		if n := ln.len(); n < ln.bs[dev] && ln.pending > 0 {
			oldest := time.Time{}
			for p := range ln.q {
				if len(ln.q[p]) > 0 && (oldest.IsZero() || ln.q[p][0].since.Before(oldest)) {
					oldest = ln.q[p][0].since
				}
			}
			if wait := s.cfg.maxWait - time.Since(oldest); wait > 0 {
				d.waiting++
				waited = true
				s.mu.Unlock()
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-d.wake:
				case <-timer.C:
				case <-s.ctx.Done():
				}
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				continue
			}
		}
		if len(s.devs) > 1 {
			if e := s.lessLoadedLocked(dev, ln); e >= 0 {
				// Yield: a loop of e takes this batch; this loop waits
				// for the next kick (a batch taken with more left, an
				// input decoded, a batch done).
				d.waiting++
				waited = true
				s.mu.Unlock()
				kickDev(s.devs[e])
				select {
				case <-d.wake:
				case <-s.ctx.Done():
				}
				continue
			}
		}
		var batch []*call
		for p := range ln.q {
			for len(ln.q[p]) > 0 && len(batch) < ln.bs[dev] {
				c := ln.q[p][0]
				ln.q[p] = slices.Delete(ln.q[p], 0, 1)
				c.stage = stageRunning
				batch = append(batch, c)
			}
		}
		s.running += len(batch)
		d.running += len(batch)
		more := false
		if s.cfg.inflight > 1 || len(s.devs) > 1 {
			for _, l := range s.lanes {
				more = more || l.len() > 0
			}
		}
		bs := ln.bs[dev]
		s.mu.Unlock()
		if more {
			s.kick() // another loop may take the next batch
		}
		return ln, batch, bs
	}
}

// runBatch runs one batch on device dev in the loop's buffers inb and outb
// (sized for the lane's batch size bs on dev); when the batch run fails,
// each item is retried alone so that one poisoned input fails only its
// own request.
func (s *scheduler) runBatch(dev int, ln *lane, batch []*call, bs int, inb, outb *hostBuf) {
	d := s.devs[dev]
	g := ln.g()
	l := g.l
	n := len(batch)
	ie, oe := ln.ie, int(l.Elements())
	in := inb.get(s.cfg.alloc, dev, n*ie, bs*ie)
	out := outb.get(s.cfg.alloc, dev, n*oe, bs*oe)
	// A running call's input is this loop's alone: it is packed without
	// the lock (which the workers need to hand over what they decode), in
	// parallel when the batch is large, and freed under the lock once.
	inChunks(n, n*ie*4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			copy(in[i*ie:(i+1)*ie], batch[i].input)
		}
	})
	s.mu.Lock()
	for _, c := range batch {
		s.dropInputLocked(c)
	}
	s.mu.Unlock()

	t0 := time.Now()
	err := d.run.run(s.ctx, g, n, in, out)
	s.n.inferNanos.Add(int64(time.Since(t0)))
	s.n.batches.Add(1)
	s.n.batchedItems.Add(int64(n))
	d.batches.Add(1)
	d.items.Add(int64(n))
	s.ranSinceIdle.Store(true)
	if s.cfg.afterBatch != nil {
		s.cfg.afterBatch()
	}
	if g.from != nil {
		s.n.splitBatches.Add(1)
		s.n.splitItems.Add(int64(n))
	}
	if err == nil {
		// Encoding copies every output out of the loop's buffer: in
		// parallel when large (a GPU batch of layer12 is 200 MB), so the
		// loop is soon back for the next batch.
		npys := make([][]byte, n)
		inChunks(n, n*oe*4, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				npys[i] = api.EncodeNPY(l.Shape, out[i*oe:(i+1)*oe], s.cfg.dtype)
			}
		})
		s.mu.Lock()
		for i, c := range batch {
			s.finishLocked(c, npys[i], nil)
		}
		s.running -= n
		d.running -= n
		s.mu.Unlock()
		if len(s.devs) > 1 {
			s.kick() // see doneRunning
		}
		return
	}
	if n > 1 {
		attrs := []any{"model", g.m.Name, "layer", l.Name}
		if g.from != nil {
			attrs = append(attrs, "from", g.from.Name)
		}
		s.cfg.log.Warn("batch failed; retrying its items one by one", append(attrs, "batch", n, "err", err)...)
		for i, c := range batch {
			if c.ctx.Err() != nil {
				s.finish(c, nil, ctxErr(c.ctx))
				continue
			}
			s.n.retries.Add(1)
			t := time.Now()
			err := d.run.run(s.ctx, g, 1, in[i*ie:(i+1)*ie], out[:oe])
			s.n.inferNanos.Add(int64(time.Since(t)))
			if err != nil {
				s.finish(c, nil, c.runError(err))
				continue
			}
			s.finish(c, api.EncodeNPY(l.Shape, out[:oe], s.cfg.dtype), nil)
		}
		s.doneRunning(dev, n)
		return
	}
	s.finish(batch[0], nil, batch[0].runError(err))
	s.doneRunning(dev, n)
}

// runError names c in an error of its computation: the object key and the
// layer, or, for a tensor, the model and the split segment.
func (c *call) runError(err error) error {
	g := c.ln.g()
	if g.from != nil {
		return fmt.Errorf("extract %s %s..%s: %w", g.m.Name, g.from.Name, g.l.Name, err)
	}
	return fmt.Errorf("extract %s (%s %s): %w", c.req.Key, g.m.Name, g.l.Name, err)
}

// chunkBytes is the least work, in bytes copied, worth a goroutine of
// inChunks; maxChunks the most goroutines one batch uses.
const (
	chunkBytes = 4 << 20
	maxChunks  = 8
)

// inChunks calls f over [0, n) split into ranges, on up to maxChunks
// goroutines at once when the batch's bytes are worth it, else once on
// this one; it returns when every call has.
func inChunks(n, bytes int, f func(lo, hi int)) {
	k := min(n, maxChunks, bytes/chunkBytes)
	if k <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for j := range k {
		lo, hi := j*n/k, (j+1)*n/k
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// waitIdle blocks an inference loop that found no batch until it is
// woken or the scheduler closes; when a batch ran since the last idle
// call, it calls schedConfig.idle after cfg.idleAfter without work (once,
// whichever loop gets there first).
func (s *scheduler) waitIdle(dev int) {
	wake := s.devs[dev].wake
	if s.cfg.idle == nil || !s.ranSinceIdle.Load() {
		select {
		case <-wake:
		case <-s.ctx.Done():
		}
		return
	}
	t := time.NewTimer(s.cfg.idleAfter)
	defer t.Stop()
	select {
	case <-wake:
	case <-s.ctx.Done():
	case <-t.C:
		if s.ranSinceIdle.Swap(false) {
			s.cfg.idle()
		}
	}
}

// doneRunning takes n items of a batch of device dev off the running
// counts; with several devices it kicks the others' loops, one of which
// may have yielded a batch to this device (lessLoadedLocked) that it can
// now take.
func (s *scheduler) doneRunning(dev, n int) {
	s.mu.Lock()
	s.running -= n
	s.devs[dev].running -= n
	s.mu.Unlock()
	if len(s.devs) > 1 {
		s.kick()
	}
}

// queueFigures returns queue lengths for Stats.
func (s *scheduler) queueFigures() (fetchFG, fetchBG, decoded, running, inflight int, batchSizes map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	batchSizes = map[string]int{}
	for k, ln := range s.lanes {
		decoded += ln.len()
		if ln.bs[0] > 0 {
			batchSizes[k.String()] = ln.bs[0]
		}
	}
	return len(s.fetchQ[Foreground]), len(s.fetchQ[Background]), decoded, s.running, len(s.inflight), batchSizes
}

// devFigures are one device's figures for Stats.
type devFigures struct {
	batches, items int64
	running        int
	batchSizes     map[string]int
}

// deviceFigures returns each device's figures, in the runners' order.
func (s *scheduler) deviceFigures() []devFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]devFigures, len(s.devs))
	for i, d := range s.devs {
		f := devFigures{batches: d.batches.Load(), items: d.items.Load(), running: d.running, batchSizes: map[string]int{}}
		for k, ln := range s.lanes {
			if ln.bs[i] > 0 {
				f.batchSizes[k.String()] = ln.bs[i]
			}
		}
		out[i] = f
	}
	return out
}

// measureBatchSize picks the batch size with the best throughput per image
// among 1, 2, 4, ... maxBatch, running zero inputs through r (each size twice,
// keeping the faster) within about budget of compute. A larger batch must
// beat the best smaller one by 10% to be chosen: it costs latency and memory.
// now is the clock (time.Now; tests pass a fake one).
func measureBatchSize(ctx context.Context, r runner, m *model, l Layer, maxBatch int, budget time.Duration, now func() time.Time) (best int, perImage map[int]time.Duration, err error) {
	g := segment{m: m, l: l}
	ie, oe := m.InputElements(), int(l.Elements())
	in := make([]float32, maxBatch*ie)
	out := make([]float32, maxBatch*oe)
	perImage = map[int]time.Duration{}
	start := now()
	// Warm-up: the first run pays for lazy allocations.
	if err := r.run(ctx, g, 1, in[:ie], out[:oe]); err != nil {
		return 1, nil, err
	}
	best = 1
	var bestPer time.Duration
	for b := 1; b <= maxBatch; b *= 2 {
		if b > 1 && now().Sub(start)+2*time.Duration(b)*bestPer > budget {
			break
		}
		var per time.Duration
		for range 2 {
			if err := ctx.Err(); err != nil {
				return best, perImage, err
			}
			t := now()
			if err := r.run(ctx, g, b, in[:b*ie], out[:b*oe]); err != nil {
				return best, perImage, err
			}
			if d := now().Sub(t) / time.Duration(b); per == 0 || d < per {
				per = d
			}
		}
		perImage[b] = per
		if b == 1 || per < bestPer*90/100 {
			best, bestPer = b, per
		}
	}
	return best, perImage, nil
}
