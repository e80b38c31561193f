package extractor

// Several GPUs, without a GPU: the device choice against fake NVML answers
// and fake probes, --device parsing, and the scheduler's device lanes with
// fake runners (work spread over devices, batch sizes per device, the
// in-flight bound per device), and Stats per device.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseDevice(t *testing.T) {
	for _, tc := range []struct {
		in      string
		kind    string
		indices []int
	}{
		{"auto", "auto", nil},
		{"", "auto", nil},
		{"cpu", "cpu", nil},
		{"cuda", "cuda", nil},
		{"gpu", "cuda", nil},
		{"cuda:1", "cuda", []int{1}},
		{"cuda:0,2", "cuda", []int{0, 2}},
		{" CUDA:3, 1 ", "cuda", []int{3, 1}},
		{"cuda:0,cuda:2", "cuda", []int{0, 2}},
	} {
		kind, ix, err := parseDevice(tc.in)
		if err != nil || kind != tc.kind || !slices.Equal(ix, tc.indices) {
			t.Errorf("parseDevice(%q) = %q %v %v, want %q %v", tc.in, kind, ix, err, tc.kind, tc.indices)
		}
	}
	for in, want := range map[string]string{
		"cuda:0,0":   "cuda:0 given twice",
		"cuda:1,2,1": "cuda:1 given twice",
		"cuda:":      "is not a GPU number",
		"cuda:0,":    "is not a GPU number",
		"cuda:-1":    "is not a GPU number",
		"cuda:x":     "is not a GPU number",
		"tpu":        "want auto, cpu, cuda, cuda:N or cuda:N,M,...",
		"cuda0":      "want auto, cpu, cuda, cuda:N or cuda:N,M,...",
	} {
		if _, _, err := parseDevice(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseDevice(%q): %v, want an error saying %q", in, err, want)
		}
	}
}

// fakeGPUs is a 4-GPU host: cuda:2 has the most free memory but its probe
// fails (a GPU ONNX Runtime has no kernels for), cuda:1 has 512 MiB free.
func fakeGPUs() ([]gpuInfo, error) {
	return []gpuInfo{
		{Index: 0, Name: "A100 40GB", Free: 38 << 30},
		{Index: 1, Name: "A100 40GB", Free: 512 << 20},
		{Index: 2, Name: "V100 80GB", Free: 70 << 30},
		{Index: 3, Name: "L4", Free: 20 << 30},
	}, nil
}

// probeRecorder is a fake probe that fails on the indices in bad and
// records the indices it was asked about.
type probeRecorder struct {
	mu     sync.Mutex
	bad    map[int]bool
	probed []int
}

func (p *probeRecorder) probe(i int, _ bool, _ Precision) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed = append(p.probed, i)
	if p.bad[i] {
		return errors.New("no kernel image is available for execution on the device")
	}
	return nil
}

func TestSeveralGPUsChoice(t *testing.T) {
	libsOK := func(bool) (string, error) { return "", nil }
	for _, spec := range []string{"auto", "cuda"} {
		p := &probeRecorder{bad: map[int]bool{2: true}}
		h := &recordHandler{}
		pick, note, err := chooseDevice(spec, false, false, FP32, gpuEnv{list: fakeGPUs, libs: libsOK, probe: p.probe}, slog.New(h))
		if err != nil || note != "" || pick.String() != "cuda:0,3" {
			t.Fatalf("%s: %s %q %v, want cuda:0,3 (cuda:1 short of memory, cuda:2 failing its probe)", spec, pick, note, err)
		}
		// The freest first; cuda:1 is not probed at all.
		if !slices.Equal(p.probed, []int{2, 0, 3}) {
			t.Errorf("%s: probed %v, want 2, 0, 3 (most free memory first; cuda:1 not at all)", spec, p.probed)
		}
		if d := pick.devs; d[0].name != "A100 40GB" || d[0].free != 38<<30 || d[1].name != "L4" || d[1].free != 20<<30 {
			t.Errorf("%s: devices %+v", spec, d)
		}
		if !strings.Contains(pick.notUsed[1], "512 MiB free") || !strings.Contains(pick.notUsed[2], "no usable CUDA provider on cuda:2 (no kernel image") || len(pick.notUsed) != 2 {
			t.Errorf("%s: not used %v", spec, pick.notUsed)
		}
		lines := h.lines(slog.LevelInfo)
		want := []string{"running on GPU device=cuda:0 gpu=A100 40GB", "running on GPU device=cuda:3 gpu=L4",
			"GPU left out device=cuda:1 gpu=A100 40GB reason=512 MiB free", "GPU left out device=cuda:2 gpu=V100 80GB reason=this ONNX Runtime has no usable CUDA provider"}
		if len(lines) != len(want) {
			t.Errorf("%s: log lines %q, want %d", spec, lines, len(want))
			continue
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%s: line %d %q, want it to start %q", spec, i, lines[i], w)
			}
		}
	}

	quiet := slog.New(&recordHandler{})
	env := func(bad ...int) gpuEnv {
		p := &probeRecorder{bad: map[int]bool{}}
		for _, b := range bad {
			p.bad[b] = true
		}
		return gpuEnv{list: fakeGPUs, libs: libsOK, probe: p.probe}
	}
	// Named GPUs are used whatever their free memory, in index order.
	for spec, want := range map[string]string{"cuda:1": "cuda:1", "cuda:3,0": "cuda:0,3", "cuda:0,1,3": "cuda:0,1,3"} {
		pick, _, err := chooseDevice(spec, false, false, FP32, env(2), quiet)
		if err != nil || pick.String() != want {
			t.Errorf("%s: %s %v, want %s", spec, pick, err, want)
		}
	}
	// A named GPU failing its probe fails the whole request.
	if _, _, err := chooseDevice("cuda:0,2", false, false, FP32, env(2), quiet); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "cuda:2") {
		t.Errorf("cuda:0,2 with cuda:2 failing: %v, want ErrNoDevice naming cuda:2", err)
	}
	// An index the host lacks: an error naming the GPUs there are.
	_, _, err := chooseDevice("cuda:0,5", false, false, FP32, env(), quiet)
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "no cuda:5: the machine has 4 GPU(s): cuda:0 (A100 40GB), cuda:1 (A100 40GB), cuda:2 (V100 80GB), cuda:3 (L4)") {
		t.Errorf("cuda:0,5: %v, want ErrNoDevice naming the 4 GPUs", err)
	}
	if _, _, err := chooseDevice("cuda:0,0", false, false, FP32, env(), quiet); err == nil || errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("cuda:0,0: %v, want a usage error", err)
	}
	// Every GPU failing: auto runs on the CPU in one line (the freest
	// GPU's reason), cuda fails.
	h := &recordHandler{}
	pick, _, err := chooseDevice("auto", false, false, FP32, env(0, 1, 2, 3), slog.New(h))
	if lines := h.lines(slog.LevelInfo); err != nil || pick.gpu() || len(lines) != 1 || !strings.Contains(lines[0], "on cuda:2") || len(pick.notUsed) != 4 {
		t.Errorf("every probe failing, auto: %s %v, lines %q, not used %v", pick, err, lines, pick.notUsed)
	}
	if _, _, err := chooseDevice("cuda", false, false, FP32, env(0, 1, 2, 3), quiet); !errors.Is(err, ErrNoDevice) {
		t.Errorf("every probe failing, cuda: %v, want ErrNoDevice", err)
	}
	// When no GPU has minGPUFree, none is left out for memory.
	small := func() ([]gpuInfo, error) {
		return []gpuInfo{{Index: 0, Free: 600 << 20}, {Index: 1, Free: 900 << 20}}, nil
	}
	if pick, _, err := chooseDevice("auto", false, false, FP32, gpuEnv{list: small, libs: libsOK, probe: (&probeRecorder{}).probe}, quiet); err != nil || pick.String() != "cuda:0,1" {
		t.Errorf("two small GPUs: %s %v, want both", pick, err)
	}
}

// TensorRT is decided on the first GPU probed; every GPU then runs the
// same way.
func TestSeveralGPUsTensorRT(t *testing.T) {
	var probes []string
	env := gpuEnv{list: fakeGPUs, libs: func(bool) (string, error) { return "", nil },
		probe: func(i int, trt bool, _ Precision) error {
			probes = append(probes, fmt.Sprintf("%d:%v", i, trt))
			if trt && i == 2 {
				return errors.New("bad engine")
			}
			return nil
		}}
	h := &recordHandler{}
	pick, _, err := chooseDevice("auto", true, false, FP32, env, slog.New(h))
	if err != nil || pick.String() != "cuda:0,2,3" {
		t.Fatalf("%s %v", pick, err)
	}
	for _, d := range pick.devs {
		if d.tensorRT {
			t.Errorf("%s runs TensorRT; the first GPU probed (cuda:2) could not", d)
		}
	}
	if !slices.Equal(probes, []string{"2:true", "2:false", "0:false", "3:false"}) {
		t.Errorf("probes %q", probes)
	}
	if warn := h.lines(slog.LevelWarn); len(warn) != 1 || !strings.Contains(warn[0], "bad engine; running on CUDA") {
		t.Errorf("warnings %q, want one", warn)
	}
}

// devRunner is one fake device: it counts its batches and items, reports
// each run's start on started and holds it until release (when set), and
// records the most runs it had at once.
type devRunner struct {
	dev      int
	started  chan<- [2]int // {device, n}
	release  chan struct{}
	batches  atomic.Int32
	items    atomic.Int32
	cur, top atomic.Int32
	mu       sync.Mutex
	sizes    []int
}

func (r *devRunner) run(_ context.Context, g segment, n int, _, out []float32) error {
	now := r.cur.Add(1)
	defer r.cur.Add(-1)
	for {
		top := r.top.Load()
		if now <= top || r.top.CompareAndSwap(top, now) {
			break
		}
	}
	r.batches.Add(1)
	r.items.Add(int32(n))
	r.mu.Lock()
	r.sizes = append(r.sizes, n)
	r.mu.Unlock()
	if r.started != nil {
		r.started <- [2]int{r.dev, n}
	}
	if r.release != nil {
		<-r.release
	}
	for i := range out {
		out[i] = float32(r.dev)
	}
	return nil
}

// bothChose is a batchSize function that returns sizes[dev] once every
// device has asked (so that both devices' lanes are set before batches
// are run), or after 5 s.
func bothChose(sizes []int) func(context.Context, segment, int) int {
	var wg sync.WaitGroup
	wg.Add(len(sizes))
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return func(_ context.Context, _ segment, dev int) int {
		wg.Done()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		return sizes[dev]
	}
}

// Two devices with three loops each: a batch goes to the device with the
// fewest items running relative to its batch size. With one batch held on
// a device, the next goes to the other, round after round, even though
// the busy device has two loops free.
func TestSchedulerSpreadsBatchesOverDevices(t *testing.T) {
	m := testModel()
	started := make(chan [2]int, 16)
	rs := []*devRunner{{dev: 0, started: started, release: make(chan struct{})}, {dev: 1, started: started, release: make(chan struct{})}}
	s := newScheduler(schedConfig{workers: 4, maxWait: time.Minute, dtype: Float32, inflight: 3,
		log: slog.New(slog.DiscardHandler), batchSize: bothChose([]int{4, 4})}, rs[0], rs[1])
	t.Cleanup(s.close)

	// submit sends 4 requests whose fetches wait for each other (4
	// workers), so that the lane fills to a batch of 4 before it runs.
	submit := func(wg *sync.WaitGroup, errs chan<- error, round, part int) {
		var fetched sync.WaitGroup
		fetched.Add(4)
		all := make(chan struct{})
		go func() { fetched.Wait(); close(all) }()
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				img := pngOf(t, uint8(round*16+part*4+i))
				r := Request{Model: "m", Layer: 0, Key: fmt.Sprintf("r%d-%d-%d", round, part, i), Fetch: func(context.Context) ([]byte, error) {
					fetched.Done()
					select {
					case <-all:
					case <-time.After(5 * time.Second):
					}
					return img, nil
				}}
				if _, err := s.extract(context.Background(), m, m.Layers[0], r); err != nil {
					errs <- err
				}
			}()
		}
	}
	wait := func() [2]int {
		select {
		case st := <-started:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no batch started in 10 s")
			return [2]int{}
		}
	}
	const rounds = 6
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		submit(&wg, errs, round, 0)
		first := wait()
		submit(&wg, errs, round, 1)
		second := wait()
		if first[1] != 4 || second[1] != 4 {
			t.Errorf("round %d: batches of %d and %d, want full batches of 4", round, first[1], second[1])
		}
		if first[0] == second[0] {
			t.Errorf("round %d: both batches ran on device %d while the other was idle", round, first[0])
		}
		rs[first[0]].release <- struct{}{}
		rs[second[0]].release <- struct{}{}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
	if a, b := rs[0].batches.Load(), rs[1].batches.Load(); a != rounds || b != rounds {
		t.Errorf("batches per device %d and %d, want %d each", a, b, rounds)
	}
	figs := s.deviceFigures()
	if len(figs) != 2 || figs[0].batches != rounds || figs[1].items != 4*rounds || figs[0].running != 0 || figs[1].batchSizes["m/layer0"] != 4 {
		t.Errorf("device figures %+v", figs)
	}
}

// Each device runs batches of its own size, at most inflight at once, and
// between them they run everything.
func TestSchedulerDeviceBatchSizesAndBound(t *testing.T) {
	m := testModel()
	rs := []*devRunner{{dev: 0}, {dev: 1}}
	release := make(chan struct{})
	for _, r := range rs {
		r.release = release
	}
	const inflight = 2
	s := newScheduler(schedConfig{workers: 4, maxWait: time.Millisecond, dtype: Float32, inflight: inflight,
		log: slog.New(slog.DiscardHandler), batchSize: bothChose([]int{8, 2})}, rs[0], rs[1])
	t.Cleanup(s.close)
	// Releases runs one at a time until the test is over.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case release <- struct{}{}:
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)

	const n = 64
	var wg sync.WaitGroup
	outs := make([]float32, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			npy, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprintf("k%d", i), pngOf(t, uint8(i)), Background, nil))
			if err != nil {
				t.Error(err)
				return
			}
			outs[i] = decodedValue(t, npy)
		}()
	}
	wg.Wait()
	if got := rs[0].items.Load() + rs[1].items.Load(); got != n {
		t.Errorf("%d items run, want %d", got, n)
	}
	for _, r := range rs {
		if top := r.top.Load(); top > inflight {
			t.Errorf("device %d ran %d batches at once, want at most %d", r.dev, top, inflight)
		}
		r.mu.Lock()
		for _, sz := range r.sizes {
			if sz > []int{8, 2}[r.dev] {
				t.Errorf("device %d ran a batch of %d, over its batch size", r.dev, sz)
			}
		}
		r.mu.Unlock()
	}
	// Each output came from the device whose count includes it.
	ran := [2]int32{}
	for _, v := range outs {
		ran[int(v)]++
	}
	if ran[0] != rs[0].items.Load() || ran[1] != rs[1].items.Load() {
		t.Errorf("outputs by device %v, runs by device %d %d", ran, rs[0].items.Load(), rs[1].items.Load())
	}
	figs := s.deviceFigures()
	if figs[0].batchSizes["m/layer0"] != 8 || figs[1].batchSizes["m/layer0"] != 2 {
		t.Errorf("batch sizes by device %v %v, want 8 and 2", figs[0].batchSizes, figs[1].batchSizes)
	}
	if st := statsOf(s); st.BatchSizes["m/layer0"] != 8 || st.Batches != int64(rs[0].batches.Load()+rs[1].batches.Load()) {
		t.Errorf("stats %+v", st)
	}
}

// One device keeps the single-device scheduler: every batch on it, no
// per-device figures in Stats.
func TestServiceStatsPerDevice(t *testing.T) {
	m := testModel()
	rs := []runner{&devRunner{dev: 0}, &devRunner{dev: 1}}
	s := &Service{cfg: Config{DType: Float32}, log: slog.New(slog.DiscardHandler),
		pick: devicePick{devs: []deviceChoice{{gpu: true, index: 0}, {gpu: true, index: 2}}}}
	s.reg.Store(&registry{models: map[string]*model{"m": m}, order: []*model{m}})
	for range rs {
		s.pools = append(s.pools, newSessionPool(2, func(sessionKey) (inferSession, error) { return nil, errors.New("unused") }))
	}
	s.pool = s.pools[0]
	s.sched = newScheduler(schedConfig{workers: 2, maxWait: time.Millisecond, dtype: Float32, log: s.log,
		batchSize: func(context.Context, segment, int) int { return 4 }}, rs...)
	defer s.Close()
	for i := range 8 {
		if _, err := s.Extract(context.Background(), Request{Model: "m", Layer: 0, Key: fmt.Sprint(i), Fetch: func(context.Context) ([]byte, error) { return pngOf(t, uint8(i)), nil }}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Device != "cuda:0,2" || len(st.Devices) != 2 || st.Devices[0].Device != "cuda:0" || st.Devices[1].Device != "cuda:2" ||
		st.Devices[0].BatchedItems+st.Devices[1].BatchedItems != 8 || st.Devices[0].Batches+st.Devices[1].Batches != st.Batches {
		t.Errorf("stats: device %q, per device %+v, batches %d", st.Device, st.Devices, st.Batches)
	}
	if got := s.Devices(); !slices.Equal(got, []string{"cuda:0", "cuda:2"}) {
		t.Errorf("Devices() = %q", got)
	}

	one := &Service{cfg: Config{DType: Float32}, log: s.log, pick: devicePick{devs: []deviceChoice{{gpu: true, index: 1}}},
		pools: s.pools[:1], pool: s.pools[0]}
	one.reg.Store(s.reg.Load())
	one.sched = newScheduler(schedConfig{workers: 1, dtype: Float32, log: s.log, batchSize: func(context.Context, segment, int) int { return 1 }}, rs[0])
	defer one.sched.close()
	if st := one.Stats(); st.Device != "cuda:1" || st.Devices != nil {
		t.Errorf("one GPU: device %q, per device %+v; want cuda:1 and no per-device figures", st.Device, st.Devices)
	}
}
