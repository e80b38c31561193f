package extractor

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Service. Zero fields take DefaultConfig's values.
type Config struct {
	// ORTLib is the path of libonnxruntime.so. Default: $FEATUREFS_ORT_LIB,
	// else ~/.cache/featurefs/lib/onnxruntime-1.29.0/libonnxruntime.so.1.
	// The GPU providers are looked for in its directory.
	ORTLib string
	// Device is auto, cpu, cuda, cuda:N or cuda:N,M,... auto uses every
	// usable GPU (chooseDevice: the probe session runs on it and, beside
	// another GPU, it has 1 GiB free) when NVML, the CUDA libraries and ONNX
	// Runtime's CUDA provider are there, the CPU otherwise; cuda is auto
	// that fails (ErrNoDevice) without a GPU; cuda:N,M uses exactly those
	// GPUs. With several GPUs, each runs its own inference loops, session
	// pool and batch sizes (a device lane), fed by the same decode workers.
	Device string
	// TensorRT puts ONNX Runtime's TensorRT provider before CUDA; without
	// TensorRT's libraries it runs on CUDA, saying so in one WARN line.
	TensorRT bool
	// Precision is the GPU's arithmetic: FP32 (default), TF32 (cuDNN and
	// cuBLAS on TF32 tensor cores) or FP16 (TensorRT only). The CPU always
	// computes in float32.
	Precision Precision
	// CUDALibDir lists directories (colon-separated) searched first for the
	// CUDA libraries, before $FEATUREFS_CUDA_LIB_DIR, the loader's paths,
	// /usr/local/cuda* and Python environments' nvidia/*/lib (cudalibs.go).
	CUDALibDir string
	// InFlight is how many batches run at once per device: 0 is 1 on the
	// CPU and 3 on each GPU (upload, compute and download overlap).
	InFlight int
	// AllowCPUFallback runs on the CPU when an explicitly asked-for GPU
	// (Device cuda or cuda:N, or TensorRT) cannot be had; New then fails
	// with ErrNoDevice without it. Service.Fallback says why.
	AllowCPUFallback bool
	// BatchSize is the most inputs run together. 0 chooses per (model, layer):
	// on a GPU from free memory and the layer's activation memory, on the
	// CPU by a short measurement on first use. A model whose graph fixes
	// its batch size (Model.FixedBatch) always runs batches of that size.
	BatchSize int
	// MaxWait is how long a batch waits to fill while more of its inputs are
	// being decoded.
	MaxWait time.Duration
	// Workers is the number of images preprocessed (decoded, resized,
	// normalized) at once; as many more are fetched meanwhile
	// (fetchAhead).
	Workers int
	// MaxSessions bounds the ONNX Runtime sessions kept open per device
	// (one per model and layer in use); the least recently used idle one
	// is closed first.
	MaxSessions int
	// MemoryLimit is the process's memory target in bytes (the mount's
	// --memory-limit; 0: none). Before a session opens on the CPU, idle
	// sessions are closed, least recently used first, while the process's
	// resident set plus what the opening takes for a moment
	// (SessionOpenFactor halves of the pruned model's bytes) would pass it.
	MemoryLimit int64
	// IntraOpThreads is ONNX Runtime's thread count per run (default: cores).
	IntraOpThreads int
	// MaxPixels rejects images with more pixels (width*height) than this.
	MaxPixels int64
	// DecodeMemory bounds the bytes that the images being decoded at once
	// hold, estimated from each image's header (decodemem.go): a decode
	// waits for room; one image larger than the whole budget is decoded
	// alone. Default DefaultDecodeMemory (1 GiB).
	DecodeMemory int64
	// FetchMemory bounds the bytes of the objects the workers have fetched
	// (or are fetching: an object's listed size is taken before its GET)
	// and not yet decoded: a fetch waits for room; one object larger than
	// the whole budget is held alone. Default DefaultFetchMemory (64 MiB).
	FetchMemory int64
	// DType is the element type of the .npy files returned.
	DType DType
	// Decode is where JPEGs are decoded (gpujpeg.go): DecodeCPU (the
	// default), DecodeGPU or DecodeAuto.
	Decode DecodeMode
	// Logger receives the service's logs (default slog.Default()).
	Logger *slog.Logger
	// MaxPending bounds the distinct requests in flight, Extract's and
	// ExtractFrom's together; each waits for room beyond it. Default 4096.
	MaxPending int
	// NVMLLib is the NVML library to load. Default: libnvidia-ml.so.1 where
	// the CUDA libraries are searched for (CUDALibDir), else from the
	// loader's paths.
	NVMLLib string
}

// DefaultConfig returns the defaults: auto device, automatic batch size,
// 5 ms batch wait, one decode worker per core (at least 2), 4 sessions,
// intra-op threads = cores, 64 megapixels, float32.
func DefaultConfig() Config {
	cores := runtime.NumCPU()
	return Config{
		ORTLib:         DefaultORTLib(),
		Device:         "auto",
		MaxWait:        5 * time.Millisecond,
		Workers:        max(2, cores),
		MaxSessions:    4,
		IntraOpThreads: cores,
		MaxPixels:      DefaultMaxPixels,
		DecodeMemory:   DefaultDecodeMemory,
		FetchMemory:    DefaultFetchMemory,
		DType:          Float32,
		MaxPending:     4096,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.ORTLib == "" {
		c.ORTLib = d.ORTLib
	}
	if c.Device == "" {
		c.Device = d.Device
	}
	if c.MaxWait <= 0 {
		c.MaxWait = d.MaxWait
	}
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.IntraOpThreads <= 0 {
		c.IntraOpThreads = d.IntraOpThreads
	}
	if c.MaxPixels <= 0 {
		c.MaxPixels = d.MaxPixels
	}
	if c.DecodeMemory <= 0 {
		c.DecodeMemory = d.DecodeMemory
	}
	if c.FetchMemory <= 0 {
		c.FetchMemory = d.FetchMemory
	}
	if c.DType == "" {
		c.DType = d.DType
	}
	if c.Decode == "" {
		c.Decode = DecodeCPU
	}
	if c.MaxPending <= 0 {
		c.MaxPending = d.MaxPending
	}
	if c.Precision == "" {
		c.Precision = FP32
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DType != Float32 && c.DType != Float16 {
		return c, fmt.Errorf("dtype %q: want float32 or float16", c.DType)
	}
	if c.BatchSize < 0 {
		return c, fmt.Errorf("batch size %d: want 0 (auto) or more", c.BatchSize)
	}
	switch c.Precision {
	case FP32, TF32:
	case FP16:
		if !c.TensorRT {
			return c, fmt.Errorf("precision fp16 needs TensorRT (the CUDA provider runs fp32 or tf32)")
		}
	default:
		return c, fmt.Errorf("precision %q: want fp32, tf32 or fp16", c.Precision)
	}
	return c, nil
}

// maxAutoBatch is the largest CPU batch size the measurement tries.
const maxAutoBatch = 16

// Service extracts features: it owns the models, the ONNX Runtime sessions
// and the scheduler. It is safe for concurrent use.
type Service struct {
	cfg   Config
	log   *slog.Logger
	pick  devicePick   // every device inference runs on
	dev   deviceChoice // pick.devs[0]: RunBatch, profiles, HostBuffer
	noGPU string       // why an asked-for GPU is not used (Fallback)
	// reg is the models: a new registry replaces it on each Reload
	// (reload.go); readers load it without a lock.
	reg     atomic.Pointer[registry]
	reloads sync.Mutex     // serializes Reload
	pools   []*sessionPool // one per device, in pick.devs' order
	pool    *sessionPool   // pools[0]
	sched   *scheduler
	// gpuDec decodes JPEGs on the GPU (--decode gpu; nil: the CPU does);
	// decodeWhy says where JPEGs are decoded and why (Stats.JPEGDecode).
	gpuDec    *gpuDecodeLoop
	decodeWhy string
	once      sync.Once
	prof      profileState // compute profiles (profile.go)
	// opening serializes opening sessions, on every device (newPool).
	opening sync.Mutex
}

// New loads the models and starts the service. The ONNX Runtime library is
// loaded once per process; a missing library is an error matching
// ErrORTLibrary.
func New(cfg Config, specs []ModelSpec) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := initORT(cfg.ORTLib); err != nil {
		return nil, err
	}
	search := defaultCUDASearch(cfg.CUDALibDir)
	env := ortGPUEnv(cfg.ORTLib, cfg.NVMLLib, search)
	pick, noGPU, err := chooseDevice(cfg.Device, cfg.TensorRT, cfg.AllowCPUFallback, cfg.Precision, env, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if pick.gpu() {
		cfg.NVMLLib = resolveNVML(cfg.NVMLLib, search)
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 1
		if pick.gpu() {
			cfg.InFlight = gpuInflight
		}
	}
	s := &Service{cfg: cfg, log: cfg.Logger, pick: pick, dev: pick.devs[0], noGPU: noGPU}
	gpuDec, why := resolveDecode(cfg.Decode, s.dev, search, min(maxGPUDecodeBatch, cfg.Workers+fetchAhead(cfg.Workers)))
	s.decodeWhy = why
	if gpuDec != nil || cfg.Decode == DecodeGPU {
		level := slog.LevelInfo
		if gpuDec == nil {
			level = slog.LevelWarn
		}
		s.log.Log(context.Background(), level, "jpeg decode", "decode", why)
	}
	if gpuDec != nil {
		s.gpuDec = newGPUDecodeLoop(gpuDec, newDecodeBudget(cfg.DecodeMemory))
	}
	reg := &registry{models: map[string]*model{}, prev: map[string]*model{}}
	for _, spec := range specs {
		if gpuDec != nil {
			// Features decoded on the GPU differ from the CPU's by a
			// little: they are cached under a key of their own.
			p := DefaultPreprocess()
			if spec.Preprocess != nil {
				p = *spec.Preprocess
			}
			p.Decoder = "nvjpeg"
			spec.Preprocess = &p
		}
		if _, dup := reg.models[spec.Name]; dup {
			return nil, fmt.Errorf("model %q given twice", spec.Name)
		}
		m, err := loadModel(spec)
		if err != nil {
			return nil, &modelError{err}
		}
		m.spec, m.Loaded = spec, time.Now()
		reg.models[m.Name] = m
		reg.order = append(reg.order, m)
		s.logFixedBatch(m)
	}
	s.reg.Store(reg)
	releaseMemory()
	var runs []runner
	for _, dev := range pick.devs {
		p := s.newPool(dev)
		s.pools = append(s.pools, p)
		runs = append(runs, ortRunner{pool: p})
	}
	s.pool = s.pools[0]
	s.sched = newScheduler(s.schedConfig(), runs...)
	return s, nil
}

// SessionOpenFactor is, in halves, what opening a CPU session takes for a
// moment over the pruned model's bytes: ONNX Runtime's parse of it and its
// reordered weights, and the batches running meanwhile. Measured in a
// mount warming five ResNet-50 layers under --memory-limit 512MiB: the
// openings of layer17 and layer18 (94 MiB pruned) took the resident set
// up by 242-264 MiB, 2.6-2.8 times (docs/records/memory.md); 2.5 let the
// peak pass the limit. mountopts.MemorySessionOpenFactor (2.5 times the
// model's file) is the least a lone opening needs, for the refusal at
// start.
const SessionOpenFactor = 6

// newPool returns the session pool of device dev.
func (s *Service) newPool(dev deviceChoice) *sessionPool {
	sc := sessionConfig{threads: s.cfg.IntraOpThreads, gpu: dev.gpu, gpuIndex: dev.index, tensorRT: dev.tensorRT, precision: s.cfg.Precision}
	p := s.newSessionPool(sc, dev)
	if s.cfg.MemoryLimit > 0 && !dev.gpu {
		p.pressure = s.memoryPressure
	}
	return p
}

// memoryPressure reports whether opening the session of k now would take
// the process past Config.MemoryLimit: its resident set plus
// SessionOpenFactor halves of k's pruned model.
func (s *Service) memoryPressure(k sessionKey) bool {
	m, ok := s.reg.Load().forKey(k)
	if !ok {
		return false
	}
	to := m.Layers[k.layer]
	n, err := m.g.PrunedSize(k.from, to.Tensor)
	if err != nil {
		return false
	}
	rss, need := rssBytes(), n*SessionOpenFactor/2
	if rss == 0 || rss+need <= s.cfg.MemoryLimit {
		return false
	}
	s.log.Info("opening a session would pass --memory-limit: idle sessions close first, least recently used", "opening", k.String(), "rss", rss, "opening_takes", need, "limit", s.cfg.MemoryLimit)
	return true
}

func (s *Service) newSessionPool(sc sessionConfig, dev deviceChoice) *sessionPool {
	return newSessionPool(s.cfg.MaxSessions, func(k sessionKey) (inferSession, error) {
		m, ok := s.reg.Load().forKey(k)
		if !ok {
			return nil, fmt.Errorf("model %s (%.12s): %w", k.model, k.version, ErrModelReplaced)
		}
		if k.from != "" {
			return s.openSplitSession(m, k, sc)
		}
		l := m.Layers[k.layer]
		// Sessions open one at a time, with Go's garbage and the C heap's
		// free pages handed back before and after: opening ResNet-50 to
		// layer18 (90 MiB of weights) takes about 220 MiB more for a
		// moment (ONNX Runtime's parse and its reordered weights; the
		// pruned model is piped to it, never held whole: openSession), and
		// two at once, or beside the last batch's free chunks, had the
		// mount's peak over --memory-limit.
		s.opening.Lock()
		defer s.opening.Unlock()
		releaseMemory()
		t := time.Now()
		in0, _ := cHeap()
		sess, err := m.openSession("", l, nil, sc)
		peak := rssBytes()
		releaseMemory()
		if err != nil {
			return nil, fmt.Errorf("model %s %s: %w", m.Name, l.Name, err)
		}
		in1, _ := cHeap()
		sess.cost = max(in1-in0, 0)
		s.log.Debug("session opened", "model", m.Name, "layer", l.Name, "device", dev.String(), "took", time.Since(t),
			"c_heap_bytes", sess.cost, "rss_after_open", peak)
		return sess, nil
	})
}

// schedConfig is the scheduler's configuration. Decoded inputs (tokens)
// are bounded by the workers plus one batch of the largest size per device
// and one more: 2 batches on one device, as before several GPUs.
func (s *Service) schedConfig() schedConfig {
	largest := max(s.cfg.BatchSize, maxAutoBatch)
	if s.dev.gpu && s.cfg.BatchSize == 0 {
		largest = maxGPUBatch
	}
	for _, m := range s.reg.Load().order {
		largest = max(largest, m.FixedBatch)
	}
	allocs := make([]func(int) ([]float32, func()), len(s.pick.devs))
	for i, d := range s.pick.devs {
		allocs[i] = hostAllocator(d.gpu, d.index, func(err error) {
			s.log.Warn("pinned host memory unavailable; GPU batches use ordinary memory", "device", d.String(), "err", err)
		})
	}
	return schedConfig{
		workers:    s.cfg.Workers + fetchAhead(s.cfg.Workers),
		decoders:   s.cfg.Workers,
		maxWait:    s.cfg.MaxWait,
		maxCalls:   s.cfg.MaxPending,
		tokens:     s.cfg.Workers + fetchAhead(s.cfg.Workers) + (len(s.pick.devs)+1)*largest,
		maxPixels:  s.cfg.MaxPixels,
		decode:     newDecodeBudget(s.cfg.DecodeMemory),
		fetch:      newDecodeBudget(s.cfg.FetchMemory),
		dtype:      s.cfg.DType,
		log:        s.log,
		batchSize:  s.chooseBatch,
		inflight:   s.cfg.InFlight,
		alloc:      func(dev, n int) ([]float32, func()) { return allocs[dev](n) },
		idle:       trimCHeap,
		afterBatch: trimBusy,
		gpu:        s.gpuDec,
	}
}

// fetchAhead is how many more workers than decoders the scheduler runs:
// while the decoders preprocess, these fetch the next objects, so that a
// core never waits on the store for its next image. Before, every worker
// fetched and then decoded: on 2 cores with MinIO on the same host, the
// workers spent 37% of an epoch waiting for GETs (docs/bench/delivery.md,
// "extractor fetch s") and the cores sat idle meanwhile. Each holds at
// most one fetched object.
func fetchAhead(workers int) int { return max(workers, 2) }

// logFixedBatch says, once per model at load, that the model's graph fixes
// its batch size and what that means for the batch size asked for.
func (s *Service) logFixedBatch(m *model) {
	if m.FixedBatch == 0 {
		return
	}
	attrs := []any{"model", m.Name, "batch", m.FixedBatch}
	if s.cfg.BatchSize > 0 && s.cfg.BatchSize != m.FixedBatch {
		attrs = append(attrs, "batch_size_asked", s.cfg.BatchSize)
	}
	if m.FixedBatch == 1 {
		s.log.Info("model input has a fixed batch size of 1; running one image at a time (export with a dynamic batch axis for batching)", attrs...)
		return
	}
	s.log.Info("model input has a fixed batch size; every run feeds exactly that many images, padding a short batch", attrs...)
}

// chooseBatch picks the batch size of a lane on device dev (an index into
// s.pick.devs); see Config.BatchSize. A model whose graph fixes the batch
// size runs batches of exactly that size, whatever was asked: nothing is
// measured. Nor is a split lane's (defaultSplitBatch). On a GPU the size
// comes from that GPU's free memory, measured through its own sessions.
func (s *Service) chooseBatch(ctx context.Context, g segment, dev int) int {
	m, l := g.m, g.l
	if m.FixedBatch > 0 {
		return m.FixedBatch
	}
	if s.cfg.BatchSize > 0 {
		return s.cfg.BatchSize
	}
	if g.from != nil {
		return defaultSplitBatch
	}
	d := s.pick.devs[dev]
	if d.gpu {
		log := s.log
		if len(s.pick.devs) > 1 {
			log = log.With("device", d.String())
		}
		est, free := d.free, nvmlFree(s.cfg.NVMLLib, d.index)
		if s.gpuDec != nil && dev == 0 {
			// The GPU JPEG decoder's buffers grow on this GPU after the
			// batch size is chosen: their bound is not the batches'.
			est, free = reserveGPU(est, free, gpuDecodeReserve)
		}
		return chooseGPUBatch(ctx, ortRunner{pool: s.pools[dev]}, m, l, est, s.cfg.InFlight, free, log)
	}
	b, ran := chooseCPUBatch(ctx, ortRunner{pool: s.pools[dev]}, m, l, s.log)
	// The session's arena holds the largest batch measured; the lane's
	// batches need b's.
	if ran > b && s.pools[dev].drop(g.key()) {
		s.log.Debug("session closed after the batch-size measurement", "model", m.Name, "layer", l.Name, "measured_up_to", ran, "batch", b)
	}
	return b
}

// cpuPipelineBatch is the CPU batch size taken when the measurement finds
// it no slower per image than a smaller pick (within cpuPipelineSlack). The
// measurement times bare model runs, where per-image cost hardly depends on
// the batch on a CPU; in the extractor each run also pays a fixed cost the
// measurement cannot see (handing a batch over, waking ONNX Runtime's
// threads between runs while decode shares the cores). Measured with
// `featurefs bench --modes extract --batch-size N` on 2 cores, ResNet-50, 4
// interleaved rounds: batch 4 over batch 1 gave layer12 46.2 vs 42.7 and
// layer18 33.8 vs 29.9 images/s (+8%, +13%). A lone read does not wait for a
// batch to fill (MaxWait applies only while more inputs are on the way).
const (
	cpuPipelineBatch = 4
	cpuPipelineSlack = 1.10
)

// preferPipelineBatch returns cpuPipelineBatch instead of a smaller
// measured pick when its measured per-image time is within
// cpuPipelineSlack of the pick's.
func preferPipelineBatch(best int, per map[int]time.Duration) int {
	if best >= cpuPipelineBatch {
		return best
	}
	p4, ok4 := per[cpuPipelineBatch]
	pb, okb := per[best]
	if ok4 && okb && float64(p4) <= float64(pb)*cpuPipelineSlack {
		return cpuPipelineBatch
	}
	return best
}

// chooseCPUBatch measures batch sizes 1..maxAutoBatch on r and logs the
// pick; it returns the pick and the largest batch size it ran.
func chooseCPUBatch(ctx context.Context, r runner, m *model, l Layer, log *slog.Logger) (batch, ran int) {
	t := time.Now()
	b, per, err := measureBatchSize(ctx, r, m, l, maxAutoBatch, 3*time.Second, time.Now)
	for bs := range per {
		ran = max(ran, bs)
	}
	if err != nil {
		log.Warn("batch size measurement failed; using 1", "model", m.Name, "layer", l.Name, "err", err)
		return 1, ran
	}
	b = preferPipelineBatch(b, per)
	attrs := []any{"model", m.Name, "layer", l.Name, "batch", b, "took", time.Since(t).Round(time.Millisecond)}
	for bs := 1; bs <= maxAutoBatch; bs *= 2 {
		if d, ok := per[bs]; ok {
			attrs = append(attrs, fmt.Sprintf("ms_per_image_b%d", bs), float64(d.Microseconds())/1000)
		}
	}
	log.Info("batch size measured", attrs...)
	return b, ran
}

// ortRunner runs batches on pooled ONNX Runtime sessions.
type ortRunner struct{ pool *sessionPool }

func (r ortRunner) run(ctx context.Context, g segment, n int, in, out []float32) error {
	e, err := r.pool.acquire(ctx, g.key())
	if err != nil {
		return err
	}
	defer r.pool.release(e)
	return e.s.run(n, in, out)
}

// RunBatch runs n inputs packed in in (n*Model.InputElements() floats)
// through layer of model on the service's (first) device and writes the n outputs
// to out (n*Layer.Elements() floats), bypassing the scheduler: the bare
// ONNX Runtime path, for benchmarks and tools. It may run concurrently with
// itself and with Extract.
func (s *Service) RunBatch(ctx context.Context, model string, layer, n int, in, out []float32) error {
	m, ok := s.reg.Load().models[model]
	if !ok {
		return fmt.Errorf("run batch: %w %q", ErrUnknownModel, model)
	}
	if layer < 0 || layer >= len(m.Layers) {
		return fmt.Errorf("run batch: %w %d of model %s", ErrUnknownLayer, layer, model)
	}
	l := m.Layers[layer]
	ie, oe := m.InputElements(), int(l.Elements())
	if n < 1 || len(in) < n*ie || len(out) < n*oe {
		return fmt.Errorf("run batch: %d inputs need %d input and %d output floats, got %d and %d", n, n*ie, n*oe, len(in), len(out))
	}
	return ortRunner{pool: s.pool}.run(ctx, segment{m: m, l: l}, n, in[:n*ie], out[:n*oe])
}

// HostBuffer returns n float32s of the memory batches are packed in on the
// service's (first) device (pinned host memory on a GPU, ordinary memory
// on the CPU) and the function that frees it (nil: nothing to free).
func (s *Service) HostBuffer(n int) ([]float32, func()) { return s.sched.cfg.alloc(0, n) }

// InFlight returns how many batches run at once per device (Config.InFlight).
func (s *Service) InFlight() int { return s.cfg.InFlight }

// Models returns the loaded models in the order given to New.
func (s *Service) Models() []*Model {
	order := s.reg.Load().order
	out := make([]*Model, len(order))
	for i, m := range order {
		out[i] = m.public()
	}
	return out
}

// Model returns the model called name.
func (s *Service) Model(name string) (*Model, bool) {
	m, ok := s.reg.Load().models[name]
	if !ok {
		return nil, false
	}
	return m.public(), true
}

// Extract returns the whole .npy file of req's layer output for req's image.
// Identical in-flight requests (same model, layer and ID) share one
// computation, which is cancelled only when every caller's ctx is done. An
// error caused by the image itself is an *ImageError matching ErrBadImage.
// The returned bytes may be shared between callers and must not be modified.
func (s *Service) Extract(ctx context.Context, req Request) ([]byte, error) {
	reg := s.reg.Load()
	m, ok := reg.models[req.Model]
	if !ok {
		return nil, fmt.Errorf("extract %s: %w %q", req.Key, ErrUnknownModel, req.Model)
	}
	if req.Digest != "" && req.Digest != m.Digest {
		// A read that began before a Reload finishes on its version.
		if m, ok = reg.version(req.Model, req.Digest); !ok {
			return nil, fmt.Errorf("extract %s: model %s (%.12s): %w", req.Key, req.Model, req.Digest, ErrModelReplaced)
		}
	}
	if req.Layer < 0 || req.Layer >= len(m.Layers) {
		return nil, fmt.Errorf("extract %s: %w %d of model %s (it has %d)", req.Key, ErrUnknownLayer, req.Layer, m.Name, len(m.Layers))
	}
	return s.sched.extract(ctx, m, m.Layers[req.Layer], req)
}

// DType returns the element type of the returned .npy files.
func (s *Service) DType() DType { return s.cfg.DType }

// Device returns where inference runs: "cpu", "cuda:N" or, on several
// GPUs, "cuda:N,M,...".
func (s *Service) Device() string { return s.pick.String() }

// Devices returns each device inference runs on: ["cpu"], or one "cuda:N"
// per GPU in index order.
func (s *Service) Devices() []string {
	out := make([]string, len(s.pick.devs))
	for i, d := range s.pick.devs {
		out[i] = d.String()
	}
	return out
}

// TensorRT reports whether inference runs through TensorRT (on every GPU
// used, or none).
func (s *Service) TensorRT() bool { return s.dev.tensorRT }

// Fallback returns, in one line, why an explicitly asked-for GPU is not
// used (Config.AllowCPUFallback let it run on the CPU instead), or "".
func (s *Service) Fallback() string { return s.noGPU }

// Stats returns the current figures.
func (s *Service) Stats() Stats {
	st := statsOf(s.sched)
	st.Device = s.Device()
	st.JPEGDecode = s.decodeWhy
	if g := s.gpuDec; g != nil {
		st.GPUDecode = &GPUDecodeStats{Decoded: g.decoded.Load(), Refused: g.refused.Load(), Failed: g.failed.Load(),
			KeptOnCPU: g.cpuKinds.Load(), Batches: g.batches.Load(), Seconds: time.Duration(g.nanos.Load()).Seconds()}
	}
	var sessionBytes, pressed int64
	for _, p := range s.pools {
		sessionBytes += p.bytes()
		pressed += p.pressedOut()
		live, created, evicted := p.stats()
		st.Sessions += live
		st.SessionsCreated += created
		st.SessionsEvicted += evicted
	}
	inUse, free := cHeap()
	st.Memory = &ExtractorMemory{
		DecodeBytes: s.sched.cfg.decode.inUse(), DecodeMaxBytes: s.sched.cfg.decode.max(),
		FetchedBytes: s.sched.cfg.fetch.inUse(), FetchMaxBytes: s.sched.cfg.fetch.max(), Fetchers: s.sched.cfg.workers,
		CHeapInUseBytes: inUse, CHeapFreeBytes: free,
		SessionBytes: sessionBytes, BusyTrims: busyTrims(), SessionsClosedForMemory: pressed,
	}
	if g := s.gpuDec; g != nil {
		st.Memory.GPUPixelBytes, st.Memory.GPUPixelMaxBytes = g.pix.inUse(), g.pix.max()
	}
	if len(s.pick.devs) > 1 {
		for i, f := range s.sched.deviceFigures() {
			live, _, _ := s.pools[i].stats()
			st.Devices = append(st.Devices, DeviceStats{Device: s.pick.devs[i].String(), Batches: f.batches,
				BatchedItems: f.items, Running: f.running, Sessions: live, BatchSizes: f.batchSizes})
		}
	}
	return st
}

func statsOf(sc *scheduler) Stats {
	fg, bg, dec, run, inflight, bs := sc.queueFigures()
	n := &sc.n
	return Stats{
		Requests:         n.requests.Load(),
		Shared:           n.shared.Load(),
		Completed:        n.completed.Load(),
		Failed:           n.failed.Load(),
		BadImages:        n.badImages.Load(),
		Cancelled:        n.cancelled.Load(),
		Batches:          n.batches.Load(),
		BatchedItems:     n.batchedItems.Load(),
		Retries:          n.retries.Load(),
		InFlight:         inflight,
		QueuedForeground: fg,
		QueuedBackground: bg,
		Decoded:          dec,
		Running:          run,
		BatchSizes:       bs,
		FetchSeconds:     time.Duration(n.fetchNanos.Load()).Seconds(),
		DecodeSeconds:    time.Duration(n.decodeNanos.Load()).Seconds(),
		InferSeconds:     time.Duration(n.inferNanos.Load()).Seconds(),
	}
}

// Close stops the service: queued requests (Extract's and ExtractFrom's)
// fail with ErrClosed, the batches being run complete, and the sessions are
// closed. The ONNX Runtime
// environment stays for other Services in the process.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.sched.close()
		if s.gpuDec != nil {
			s.gpuDec.close()
		}
		for _, p := range s.pools {
			p.close()
		}
	})
	return nil
}
