package extractor

// ONNX Runtime glue: the process-wide environment, session options, and the
// bounded pool of sessions shared by all requests.
//
// Lock order: sessionPool.mu is a leaf lock; no other lock is taken while it
// is held, and no ONNX Runtime call is made under it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/featurefs/featurefs/extractor/spec"
)

// ErrORTLibrary is matched by errors caused by a missing or unloadable ONNX
// Runtime shared library.
var ErrORTLibrary = errors.New("onnx runtime library unavailable")

// DefaultORTLib returns $FEATUREFS_ORT_LIB, else
// ~/.cache/featurefs/lib/onnxruntime-1.29.0/libonnxruntime.so.1
// (spec.DefaultORTLib).
func DefaultORTLib() string { return spec.DefaultORTLib() }

// ORTLibRel is where scripts/install-deps.sh puts the ONNX Runtime core
// library, relative to its $FEATUREFS_DEPS (spec.ORTLibRel).
const ORTLibRel = spec.ORTLibRel

// ortProcess is the process-wide ONNX Runtime environment. onnxruntime_go
// keeps exactly one environment per process in its own package state, so
// this is the one place featurefs needs process-wide state too: the
// environment is created by the first Service and never destroyed, so that
// several Services (tests, a mount and a warm-up in one binary) can coexist.
type ortProcess struct {
	mu  sync.Mutex
	lib string // GUARDED_BY(mu): the library the environment was made from
}

var ortProc ortProcess

// initORT makes sure the ONNX Runtime environment exists, loading lib.
func initORT(lib string) error {
	if lib == "" {
		lib = DefaultORTLib()
	}
	// Checked even when the environment exists, so that a wrong path is
	// always reported.
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("%w: %s: %v (run scripts/install-deps.sh, or set FEATUREFS_ORT_LIB or --ort-lib)", ErrORTLibrary, lib, err)
	}
	ortProc.mu.Lock()
	defer ortProc.mu.Unlock()
	if ort.IsInitialized() {
		if ortProc.lib != "" && !sameFile(ortProc.lib, lib) {
			// onnxruntime_go keeps one library per process: another path
			// would silently run on the first one.
			return fmt.Errorf("%w: %s: this process already runs ONNX Runtime from %s (one library per process)", ErrORTLibrary, lib, ortProc.lib)
		}
		return nil
	}
	info, err := ProbeORTLib(lib)
	if err != nil {
		return err
	}
	if !info.APIOK {
		return errORTTooOld(info)
	}
	if err := disableORTTelemetry(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrORTLibrary, lib, err)
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrORTLibrary, lib, err)
	}
	// Events that a session or a run would log go nowhere either.
	if err := ort.DisableTelemetry(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrORTLibrary, lib, err)
	}
	ortProc.lib = lib
	return nil
}

// ortTelemetryEnv is the variable ONNX Runtime's Linux build reads (with
// getenv) when it creates its environment: any value but "0" turns its
// telemetry off.
const ortTelemetryEnv = "ORT_DISABLE_TELEMETRY"

// disableORTTelemetry sets ORT_DISABLE_TELEMETRY=1 in this process's
// environment (the C one too: the Go runtime forwards Setenv to setenv in
// a cgo binary), whatever it was, before the environment is created.
//
// ONNX Runtime 1.29's Linux build starts Microsoft's 1DS telemetry in
// CreateOrtEnv unless that variable is set. It collects system
// information first: /etc/os-release, /etc/machine-id (else it runs
// "echo $(blkid; hostname)" through a shell), a session file in the
// temporary directory, and the process's name, read from
// /proc/self/cmdline and matched against the std::regex
// "(.*)[ ]*.*[\n]*". libstdc++'s regex matcher recurses once per input
// character, about 250 bytes of stack each: a command line over about
// 33 KB overflows the thread's 8 MiB stack (a smaller one with a smaller
// `ulimit -s`, whatever thread it runs on) and the process dies with
// SIGSEGV in CreateOrtEnv, ~100,000 frames deep. `featurefs extract` with
// 1000 absolute paths did (issue 24). Featurefs also has no business
// sending a user's machine identity anywhere. The stack CreateOrtEnv
// needs without telemetry does not depend on the command line.
func disableORTTelemetry() error {
	if os.Getenv(ortTelemetryEnv) == "1" {
		return nil
	}
	if err := os.Setenv(ortTelemetryEnv, "1"); err != nil {
		return fmt.Errorf("turning off onnx runtime telemetry (%s=1): %w", ortTelemetryEnv, err)
	}
	return nil
}

// sameFile reports whether a and b name the same file (symbolic links
// and other paths to it included).
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// sessionConfig is how sessions are made: threads and execution provider.
type sessionConfig struct {
	threads   int
	gpu       bool
	gpuIndex  int
	tensorRT  bool
	precision Precision // on a GPU; "" is FP32
}

// newSessionOptions builds ONNX Runtime session options for c. The caller
// destroys them.
func newSessionOptions(c sessionConfig) (*ort.SessionOptions, error) {
	o, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("session options: %w", err)
	}
	fail := func(err error) (*ort.SessionOptions, error) {
		o.Destroy()
		return nil, err
	}
	if c.threads > 0 {
		if err := o.SetIntraOpNumThreads(c.threads); err != nil {
			return fail(fmt.Errorf("intra-op threads: %w", err))
		}
	}
	if err := o.SetInterOpNumThreads(1); err != nil {
		return fail(fmt.Errorf("inter-op threads: %w", err))
	}
	// With ONNX Runtime's CPU arena: a session keeps the buffers of its
	// largest batch and reuses them run after run. Without it (as before
	// this) every node's output came from glibc's malloc and went back to
	// it, and glibc handed some of it back to the kernel on free (a heap of
	// its second arena unmapped once wholly free, the main heap's top cut
	// back past M_TRIM_THRESHOLD): ResNet-50 to layer12 at batch 4 on one
	// core faulted in 7,057 pages (28 MB) again every batch, in bursts
	// that depended on where the heaps happened to lie, 1.4-1.5x slower
	// (docs/records/memory.md, "ONNX Runtime's arena"). The arena holds
	// the peak of the largest batch a session ran: the batch-size
	// measurement (up to maxAutoBatch, over 1 GiB for ResNet-50 at 16)
	// closes the session it measured on (chooseCPUBatch), so that the
	// session the batches use holds its own batch size's peak only.
	if !c.gpu {
		if err := o.SetCpuMemArena(true); err != nil {
			return fail(fmt.Errorf("cpu memory arena: %w", err))
		}
	}
	// Spinning threads would steal the cores the decode workers need.
	if err := o.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"); err != nil {
		return fail(fmt.Errorf("session config: %w", err))
	}
	if c.gpu {
		if err := appendGPUProviders(o, c); err != nil {
			return fail(err)
		}
	}
	return o, nil
}

// cudaProviderOptions are the CUDA provider's options for GPU index in
// precision p (ONNX Runtime's CUDA execution provider documentation names
// them): cuDNN tries every convolution algorithm on the first run of each
// input shape and keeps the fastest, with as much workspace as it wants
// (throughput over first-run latency); the memory arena grows by what is
// asked, so that the measured per-sample memory (gpubatch.go) is what a
// batch takes; copies run on the compute stream of each Run; TF32 only
// with Precision TF32.
func cudaProviderOptions(index int, p Precision) map[string]string {
	tf32 := "0"
	if p == TF32 {
		tf32 = "1"
	}
	return map[string]string{
		"device_id":                    strconv.Itoa(index),
		"cudnn_conv_algo_search":       "EXHAUSTIVE",
		"cudnn_conv_use_max_workspace": "1",
		"arena_extend_strategy":        "kSameAsRequested",
		"do_copy_in_default_stream":    "1",
		"use_tf32":                     tf32,
	}
}

// tensorRTProviderOptions are the TensorRT provider's options: FP16
// engines only with Precision FP16; engines and timing caches kept under
// ~/.cache/featurefs/tensorrt (TensorRT builds an engine per input shape,
// which takes tens of seconds).
func tensorRTProviderOptions(index int, p Precision) map[string]string {
	fp16 := "0"
	if p == FP16 {
		fp16 = "1"
	}
	dir := spec.TensorRTCacheDir()
	return map[string]string{
		"device_id":               strconv.Itoa(index),
		"trt_fp16_enable":         fp16,
		"trt_engine_cache_enable": "1",
		"trt_engine_cache_path":   dir,
		"trt_timing_cache_enable": "1",
		"trt_timing_cache_path":   dir,
	}
}

// appendGPUProviders appends TensorRT (when c asks) and CUDA for c's GPU.
func appendGPUProviders(o *ort.SessionOptions, c sessionConfig) error {
	if c.tensorRT {
		t, err := ort.NewTensorRTProviderOptions()
		if err != nil {
			return fmt.Errorf("tensorrt provider: %w", err)
		}
		defer t.Destroy()
		opts := tensorRTProviderOptions(c.gpuIndex, c.precision)
		if err := os.MkdirAll(opts["trt_engine_cache_path"], 0o700); err != nil {
			return fmt.Errorf("tensorrt engine cache: %w", err)
		}
		if err := t.Update(opts); err != nil {
			return fmt.Errorf("tensorrt provider options: %w", err)
		}
		if err := o.AppendExecutionProviderTensorRT(t); err != nil {
			return fmt.Errorf("tensorrt provider: %w", err)
		}
	}
	return appendCUDA(o, c)
}

// cudaEPName is the CUDA provider's name in ONNX Runtime.
const cudaEPName = "CUDAExecutionProvider"

// cudaPluginState is the CUDA provider library registered with the
// environment as a plugin execution provider library.
type cudaPluginState struct {
	mu         sync.Mutex
	registered bool // GUARDED_BY(mu)
}

var cudaPlugin cudaPluginState

// registerCUDAPlugin registers libonnxruntime_providers_cuda.so, next to
// the core library, with the environment, once per process (a failure is
// tried again next time). The CUDA libraries must be loaded first: the
// provider counts the CUDA devices when it is registered.
func registerCUDAPlugin() error {
	cudaPlugin.mu.Lock()
	defer cudaPlugin.mu.Unlock()
	if cudaPlugin.registered {
		return nil
	}
	ortProc.mu.Lock()
	lib := ortProc.lib
	ortProc.mu.Unlock()
	path := filepath.Join(filepath.Dir(lib), "libonnxruntime_providers_cuda.so")
	if err := ort.RegisterExecutionProviderLibrary("CUDA", path); err != nil {
		return fmt.Errorf("registering %s: %w", path, err)
	}
	cudaPlugin.registered = true
	return nil
}

// appendCUDA appends ONNX Runtime's CUDA provider for c's GPU. The CPU
// build of the core (what scripts/install-ort.sh installs) cannot load
// the provider through the classic call ("CUDA execution provider is not
// enabled in this build"), but it can as a plugin: the provider library
// is registered with the environment, ONNX Runtime lists one device per
// NVIDIA GPU its device discovery finds (/sys/class/drm, else
// /sys/bus/pci/devices) and the session gets the one for cuda:N. A core
// built with CUDA takes the classic call when the plugin path fails.
//
// Run on an H100 by `make gpu-check` (a machine without /sys/class/drm:
// discovery found the GPU in /sys/bus/pci/devices); in CI it is exercised
// up to the provider library failing to load.
func appendCUDA(o *ort.SessionOptions, c sessionConfig) error {
	opts := cudaProviderOptions(c.gpuIndex, c.precision)
	regErr := registerCUDAPlugin()
	if regErr == nil {
		devs, err := ort.GetEpDevices()
		if err != nil {
			return fmt.Errorf("cuda provider devices: %w", err)
		}
		var cuda []ort.EpDevice
		for _, d := range devs {
			if d.EpName() == cudaEPName {
				cuda = append(cuda, d)
			}
		}
		if c.gpuIndex >= len(cuda) {
			return fmt.Errorf("ONNX Runtime's CUDA provider has %d device(s), not cuda:%d (its device discovery reads /sys/class/drm and /sys/bus/pci/devices)", len(cuda), c.gpuIndex)
		}
		// The provider numbers its devices in the order discovery lists
		// them, and each device carries its own device_id.
		delete(opts, "device_id")
		if err := o.AppendExecutionProviderV2([]ort.EpDevice{cuda[c.gpuIndex]}, opts); err != nil {
			return fmt.Errorf("cuda provider: %w", err)
		}
		return nil
	}
	// The classic call, for a core built with CUDA. A CPU build says "not
	// enabled in this build": then the plugin's error is the one to show.
	classic := func(err error) error {
		if strings.Contains(err.Error(), "not enabled in this build") {
			return fmt.Errorf("cuda provider: %w", regErr)
		}
		return fmt.Errorf("cuda provider: %w (as a plugin: %v)", err, regErr)
	}
	co, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return classic(err)
	}
	defer co.Destroy()
	if err := co.Update(opts); err != nil {
		return classic(err)
	}
	if err := o.AppendExecutionProviderCUDA(co); err != nil {
		return classic(err)
	}
	return nil
}

// inferSession runs one pruned model on a batch.
type inferSession interface {
	// run computes n samples: in holds n inputs, out receives n outputs.
	run(n int, in, out []float32) error
	close() error
}

// ortSession is an inferSession backed by ONNX Runtime.
type ortSession struct {
	s        *ort.DynamicAdvancedSession
	inShape  []int64 // per sample
	outShape []int64 // per sample
	fixed    int     // the batch size the graph fixes; 0 when symbolic
	// pow2 pads each run up to a power of two (GPU): every new input shape
	// costs cuDNN an algorithm search, so a few shapes are run, not every
	// partial batch size.
	pow2 bool
	// cost is the C heap the session holds, measured at its opening
	// (Service.newPool): its weights and plan.
	cost int64
}

// memBytes is the C heap the session holds (sessionPool.stats).
func (o *ortSession) memBytes() int64 { return o.cost }

// newORTSession loads the pruned model onnx with one input and one output.
// fixed is the batch size the graph fixes (0: any): run then feeds ONNX
// Runtime exactly that many samples each time.
func newORTSession(onnx []byte, input, output string, inShape, outShape []int64, fixed int, c sessionConfig) (*ortSession, error) {
	o, err := newSessionOptions(c)
	if err != nil {
		return nil, err
	}
	defer o.Destroy()
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(onnx, []string{input}, []string{output}, o)
	if err != nil {
		return nil, fmt.Errorf("onnx runtime session: %w", err)
	}
	return &ortSession{s: s, inShape: inShape, outShape: outShape, fixed: fixed, pow2: c.gpu}, nil
}

// pipeModels says whether ONNX Runtime can read a model from a pipe, by
// its /proc/self/fd path (newORTSessionPiped).
var pipeModels = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/fd")
	return err == nil
})

// newORTSessionPiped is newORTSession of the model that write writes,
// which ONNX Runtime reads from a pipe as it parses it (its path
// /proc/self/fd/N): the process never holds the model's bytes whole, only
// ONNX Runtime's parse of them. Opening ResNet-50 to layer18 (90 MiB of
// weights) from a byte slice held that slice through ONNX Runtime's parse
// and its reordering of the weights, 90 MiB at the mount's peak
// (docs/records/memory.md). write's error, when it is not the pipe's reader
// going away, is returned as it is (a model file changed since it was
// loaded: graph.ErrSourceChanged): write checks each piece before it
// writes it, so ONNX Runtime never gets bytes other than the parsed ones,
// and a model cut short does not parse.
func newORTSessionPiped(write func(io.Writer) error, input, output string, inShape, outShape []int64, fixed int, c sessionConfig) (*ortSession, error) {
	o, err := newSessionOptions(c)
	if err != nil {
		return nil, err
	}
	defer o.Destroy()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("onnx runtime session: the model's pipe: %w", err)
	}
	wrote := make(chan error, 1)
	go func() {
		err := write(w)
		w.Close()
		wrote <- err
	}()
	// Fd puts r in blocking mode: ONNX Runtime reads its own descriptor of
	// the pipe, opened by path, on this thread.
	s, serr := ort.NewDynamicAdvancedSession(fmt.Sprintf("/proc/self/fd/%d", r.Fd()), []string{input}, []string{output}, o)
	r.Close() // the writer, if ONNX Runtime stopped reading early, gets EPIPE
	werr := <-wrote
	switch {
	case werr != nil && !errors.Is(werr, syscall.EPIPE):
		if serr == nil {
			s.Destroy()
		}
		return nil, werr
	case serr != nil:
		return nil, fmt.Errorf("onnx runtime session: %w", serr)
	case werr != nil:
		s.Destroy()
		return nil, fmt.Errorf("onnx runtime session: it stopped reading the model before its end: %w", werr)
	}
	return &ortSession{s: s, inShape: inShape, outShape: outShape, fixed: fixed, pow2: c.gpu}, nil
}

func batchShape(n int, per []int64) ort.Shape {
	s := make(ort.Shape, 0, len(per)+1)
	s = append(s, int64(n))
	return append(s, per...)
}

// run computes n samples. With a fixed batch size B it runs them B at a
// time, the last run padded with zeros (samples are independent at
// inference, so the padding changes no real output and its outputs are
// dropped).
func (o *ortSession) run(n int, in, out []float32) error {
	if o.fixed == 0 && o.pow2 {
		return o.runPow2(n, in, out)
	}
	if o.fixed == 0 || n == o.fixed {
		return o.runOnce(n, in, out)
	}
	ie, oe := int(shapeElems(o.inShape)), int(shapeElems(o.outShape))
	b := o.fixed
	for off := 0; off < n; off += b {
		k := min(b, n-off)
		if k == b {
			if err := o.runOnce(b, in[off*ie:(off+b)*ie], out[off*oe:(off+b)*oe]); err != nil {
				return err
			}
			continue
		}
		pin, pout := make([]float32, b*ie), make([]float32, b*oe)
		copy(pin, in[off*ie:(off+k)*ie])
		if err := o.runOnce(b, pin, pout); err != nil {
			return err
		}
		copy(out[off*oe:(off+k)*oe], pout)
	}
	return nil
}

// runPow2 runs n samples as a batch of the next power of two, the padding
// zero and its outputs dropped. It pads in place when in and out have the
// capacity (the scheduler's buffers are sized for a power-of-two batch),
// else in new buffers.
func (o *ortSession) runPow2(n int, in, out []float32) error {
	p := 1
	for p < n {
		p *= 2
	}
	if p == n {
		return o.runOnce(n, in, out)
	}
	ie, oe := int(shapeElems(o.inShape)), int(shapeElems(o.outShape))
	pin, pout := in[:n*ie], out[:n*oe]
	if cap(pin) >= p*ie && cap(pout) >= p*oe {
		pin, pout = pin[:p*ie], pout[:p*oe]
	} else {
		pin, pout = append(make([]float32, 0, p*ie), pin...)[:p*ie], make([]float32, p*oe)
	}
	clear(pin[n*ie:])
	if err := o.runOnce(p, pin, pout); err != nil {
		return err
	}
	if &pout[0] != &out[0] {
		copy(out[:n*oe], pout)
	}
	return nil
}

// runOnce runs exactly n samples through ONNX Runtime.
func (o *ortSession) runOnce(n int, in, out []float32) error {
	it, err := ort.NewTensor(batchShape(n, o.inShape), in)
	if err != nil {
		return fmt.Errorf("input tensor: %w", err)
	}
	defer it.Destroy()
	ot, err := ort.NewTensor(batchShape(n, o.outShape), out)
	if err != nil {
		return fmt.Errorf("output tensor: %w", err)
	}
	defer ot.Destroy()
	if err := o.s.Run([]ort.Value{it}, []ort.Value{ot}); err != nil {
		return fmt.Errorf("onnx runtime: %w", err)
	}
	return nil
}

func (o *ortSession) close() error {
	err := o.s.Destroy()
	trimCHeap() // the session's weights and arena go back to the OS
	return err
}

// sessionKey names one pruned model: a model and a layer index, computed
// from the model's input, or from the intermediate tensor from when it is
// set (split execution, splitexec.go).
type sessionKey struct {
	model   string
	version string // the model file's digest: versions never share a session
	layer   int
	from    string
}

func (k sessionKey) String() string {
	if k.from != "" {
		return k.model + "/" + k.from + ".." + spec.LayerName(k.layer)
	}
	return k.model + "/" + spec.LayerName(k.layer)
}

// pooled is one session in the pool.
type pooled struct {
	key     sessionKey
	s       inferSession  // nil until ready is closed
	err     error         // creation error, set before ready is closed
	ready   chan struct{} // closed when creation finished
	refs    int           // GUARDED_BY(sessionPool.mu)
	lastUse uint64        // GUARDED_BY(sessionPool.mu)
}

// sessionPool keeps at most max sessions, made lazily per (model, layer) and
// shared by all requests. When full, the least recently used session that
// nobody holds is destroyed; a session in use is never destroyed, so an
// acquire may wait for a release.
type sessionPool struct {
	max  int
	open func(sessionKey) (inferSession, error)
	// pressure, when set, reports whether opening k now would take the
	// process past its memory target (Config.MemoryLimit): acquire then
	// closes idle sessions, least recently used first, until it would not
	// or none is idle (relieve).
	pressure func(k sessionKey) bool

	mu      sync.Mutex
	entries map[sessionKey]*pooled // GUARDED_BY(mu)
	clock   uint64                 // GUARDED_BY(mu)
	changed chan struct{}          // GUARDED_BY(mu); closed and replaced on every release
	closed  bool                   // GUARDED_BY(mu)
	created int64                  // GUARDED_BY(mu)
	evicted int64                  // GUARDED_BY(mu)
	// pressed counts the sessions relieve closed (within evicted).
	pressed int64 // GUARDED_BY(mu)
}

func newSessionPool(max int, open func(sessionKey) (inferSession, error)) *sessionPool {
	if max < 1 {
		max = 1
	}
	return &sessionPool{max: max, open: open, entries: map[sessionKey]*pooled{}, changed: make(chan struct{})}
}

var errPoolClosed = errors.New("session pool closed")

// acquire returns the session for k, creating it if needed. The caller must
// release it.
func (p *sessionPool) acquire(ctx context.Context, k sessionKey) (*pooled, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		if e, ok := p.entries[k]; ok {
			e.refs++
			p.clock++
			e.lastUse = p.clock
			p.mu.Unlock()
			select {
			case <-e.ready:
			case <-ctx.Done():
				p.release(e)
				return nil, ctx.Err()
			}
			if e.err != nil {
				p.release(e)
				return nil, e.err
			}
			return e, nil
		}
		var victim *pooled
		if len(p.entries) >= p.max {
			for _, e := range p.entries {
				if e.refs == 0 && (victim == nil || e.lastUse < victim.lastUse) {
					victim = e
				}
			}
			if victim == nil {
				wait := p.changed
				p.mu.Unlock()
				select {
				case <-wait:
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			delete(p.entries, victim.key)
			p.evicted++
		}
		e := &pooled{key: k, ready: make(chan struct{}), refs: 1}
		p.clock++
		e.lastUse = p.clock
		p.entries[k] = e
		p.created++
		p.mu.Unlock()

		if victim != nil && victim.s != nil {
			victim.s.close()
		}
		p.relieve(k)
		s, err := p.open(k)
		p.mu.Lock()
		e.s, e.err = s, err
		if err != nil {
			delete(p.entries, k)
		}
		p.mu.Unlock()
		close(e.ready)
		if err != nil {
			p.release(e)
			return nil, err
		}
		return e, nil
	}
}

// relieve closes idle sessions other than k's, least recently used first,
// while opening k would take the process past its memory target
// (pressure), handing their memory back after each (releaseMemory); a
// session in use is never closed, so with none idle the opening goes
// ahead.
func (p *sessionPool) relieve(k sessionKey) {
	if p.pressure == nil {
		return
	}
	for p.pressure(k) {
		p.mu.Lock()
		var victim *pooled
		for _, e := range p.entries {
			if e.key != k && e.refs == 0 && e.s != nil && (victim == nil || e.lastUse < victim.lastUse) {
				victim = e
			}
		}
		if victim == nil {
			p.mu.Unlock()
			return
		}
		delete(p.entries, victim.key)
		p.evicted++
		p.pressed++
		p.mu.Unlock()
		victim.s.close()
		releaseMemory()
	}
}

// drop destroys k's session if nobody holds it, handing its memory back
// (releaseMemory); the next acquire of k opens a new one. It reports
// whether it did.
func (p *sessionPool) drop(k sessionKey) bool {
	if p.forget(func(o sessionKey) bool { return o != k }) == 0 {
		return false
	}
	releaseMemory()
	return true
}

// forget destroys the sessions nobody holds whose key held does not keep,
// and returns how many it destroyed.
func (p *sessionPool) forget(held func(sessionKey) bool) int {
	var gone []*pooled
	p.mu.Lock()
	for k, e := range p.entries {
		if e.refs == 0 && e.s != nil && !held(k) {
			delete(p.entries, k)
			p.evicted++
			gone = append(gone, e)
		}
	}
	p.mu.Unlock()
	for _, e := range gone {
		e.s.close()
	}
	return len(gone)
}

// release gives back a session acquired with acquire.
func (p *sessionPool) release(e *pooled) {
	p.mu.Lock()
	e.refs--
	destroy := e.refs == 0 && p.closed && e.s != nil && e.err == nil
	if destroy {
		delete(p.entries, e.key)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if destroy {
		e.s.close()
	}
}

// pressedOut returns how many sessions relieve closed.
func (p *sessionPool) pressedOut() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pressed
}

// stats returns the number of live sessions, created and evicted so far.
func (p *sessionPool) stats() (live int, created, evicted int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries), p.created, p.evicted
}

// bytes returns the C heap the open sessions hold, as measured when each
// was opened (0 for a session that does not say).
func (p *sessionPool) bytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, e := range p.entries {
		if m, ok := e.s.(interface{ memBytes() int64 }); ok {
			n += m.memBytes()
		}
	}
	return n
}

// close destroys every idle session; sessions still held are destroyed on
// their release.
func (p *sessionPool) close() {
	p.mu.Lock()
	p.closed = true
	var idle []*pooled
	for k, e := range p.entries {
		if e.refs == 0 && e.s != nil {
			idle = append(idle, e)
			delete(p.entries, k)
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, e := range idle {
		e.s.close()
	}
}
