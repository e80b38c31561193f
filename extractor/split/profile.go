package split

// Compute profiles: the time per sample of every layer segment of a model on
// one device, the cost model's input. Package extractor measures them
// (Service.Profile); they are saved as JSON and sent between the server and
// the mount (GET /v1/profile).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProfileSchema is bumped when Profile's meaning changes; older files are
// measured again.
const ProfileSchema = 9 // 2: LayerProfile.WireRatio; 3: Profile.CPUs and CPUQuota; 4: sustained times under a quota; 5: prefixes timed whole; 6: a tensor's copy and codec CPU; 7: runs that faulted their buffers in not timed; 8: CPU time / quota under a quota; 9: CPU sessions with ONNX Runtime's arena

// Profile is the measured compute cost of one model on one device.
type Profile struct {
	// Schema is ProfileSchema of the code that wrote it.
	Schema int `json:"schema"`
	// Model and Digest identify the model (Digest is the ONNX bytes' sha256).
	Model  string `json:"model"`
	Digest string `json:"digest"`
	// Device is where it ran: "cpu" or "cuda:N".
	Device string `json:"device"`
	// Host identifies the machine (its boot id). CPUs is the processors
	// the measuring process could run on (Linux's list form, "0-3,6";
	// empty: not known, taken as all of them) and CPUQuota the cores its
	// cgroup's CPU quota allowed (0: none). Two CPU profiles of one Host
	// share processors unless their CPU lists are disjoint (SharesCPUs):
	// two sides of a split given their own cores (cpusets) on one machine
	// are two hosts to the cost model.
	Host     string  `json:"host"`
	CPUs     string  `json:"cpus,omitempty"`
	CPUQuota float64 `json:"cpu_quota,omitempty"`
	// Threads is the intra-op thread count, Batch the batch size timed.
	Threads int `json:"threads"`
	Batch   int `json:"batch"`
	// Created is when it was measured.
	Created time.Time `json:"created"`
	// DecodeSeconds is the time to decode and preprocess one image (a
	// 500x375 JPEG, ImageNet's typical size).
	DecodeSeconds float64 `json:"decode_seconds"`
	// WeightBytes is the size of the ONNX file.
	WeightBytes int64 `json:"weight_bytes"`
	// FreeMemory is the free GPU memory when measured (0 on the CPU: not
	// the limit).
	FreeMemory int64 `json:"free_memory"`
	// Layers holds one entry per layer, by index.
	Layers []LayerProfile `json:"layers"`
	// ByteSeconds is this side's CPU time per byte moved over the link
	// between the two sides (HTTP and the kernel's network stack), from a
	// bandwidth probe: a server sets it in its GET /v1/profile answer,
	// the mount on its own profile. 0: not measured (not counted). Not
	// saved with the profile: it is of the link, not of the model.
	ByteSeconds float64 `json:"byte_seconds,omitempty"`
}

// ByteWallSeconds is ByteSeconds as wall time on this side (Wall).
func (p *Profile) ByteWallSeconds() float64 { return p.Wall(p.ByteSeconds) }

// Wall is cpu seconds of one thread as wall time on this side: CPU time
// under a quota of q < 1 cores takes 1/q as long.
func (p *Profile) Wall(cpu float64) float64 {
	if p.CPUQuota > 0 && p.CPUQuota < 1 {
		return cpu / max(p.CPUQuota, 0.01)
	}
	return cpu
}

// LayerProfile is the cost of one layer.
type LayerProfile struct {
	// Index and Tensor name the layer.
	Index  int    `json:"index"`
	Tensor string `json:"tensor"`
	// Bytes is the per-sample output size as float32.
	Bytes int64 `json:"bytes"`
	// ActBytes bounds the per-sample activation memory from the input up to
	// this layer.
	ActBytes int64 `json:"act_bytes"`
	// CumSeconds is the per-sample time of the model from the input to this
	// layer, run whole; Seconds is the part of it past the previous layer
	// (CumSeconds less the previous layer's, never negative).
	Seconds    float64 `json:"seconds"`
	CumSeconds float64 `json:"cum_seconds"`
	// WireRatio is how much smaller the layer's output gets compressed for
	// the wire (cache/codec, S2, as float32) on the profiling image; 0 when
	// not measured (a profile written before it), which counts as 1.
	WireRatio float64 `json:"wire_ratio,omitempty"`
	// CopySeconds, EncodeSeconds and DecodeSeconds are the CPU time (one
	// thread, not scaled by a quota: Profile.Wall) of moving one sample's
	// output tensor through the wire path on this side, into freshly
	// allocated memory as the path does (its page faults counted): one
	// copy (the server's .npy answer, the mount's input to the rest of the
	// model), and the wire codec's compression and decompression. On the
	// test bed a 700 KB tensor cost the storage side about 5 ms of CPU
	// beyond computing it, which the cost model did not count; 0: not
	// measured.
	CopySeconds   float64 `json:"copy_seconds,omitempty"`
	EncodeSeconds float64 `json:"encode_seconds,omitempty"`
	DecodeSeconds float64 `json:"decode_seconds,omitempty"`
}

// LoadProfile reads a profile saved by SaveProfile.
func LoadProfile(file string) (*Profile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("profile %s: %w", file, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("profile %s: %w", file, err)
	}
	return &p, nil
}

// Validate checks that p is usable by the cost model: layers by index with
// non-negative, cumulative times.
func (p *Profile) Validate() error {
	if len(p.Layers) == 0 {
		return errors.New("profile has no layers")
	}
	cum := 0.0
	for i, l := range p.Layers {
		if l.Index != i || l.Seconds < 0 || l.Bytes <= 0 || !(l.CopySeconds >= 0) || !(l.EncodeSeconds >= 0) || !(l.DecodeSeconds >= 0) {
			return fmt.Errorf("profile layer %d: bad entry %+v", i, l)
		}
		cum += l.Seconds
		if d := l.CumSeconds - cum; d > 1e-9+1e-6*cum || d < -1e-9-1e-6*cum {
			return fmt.Errorf("profile layer %d: cumulative %g s is not the sum %g s", i, l.CumSeconds, cum)
		}
	}
	if p.DecodeSeconds < 0 {
		return fmt.Errorf("profile: negative decode time")
	}
	// A microsecond per byte is a link moved at 1 MB/s of CPU: more is
	// not a measurement.
	if !(p.ByteSeconds >= 0 && p.ByteSeconds <= 1e-6) {
		return fmt.Errorf("profile: CPU per byte %g s: want 0 to 1e-6", p.ByteSeconds)
	}
	return nil
}

// SaveProfile writes p as JSON to file atomically (temporary file, rename).
func SaveProfile(file string, p *Profile) error {
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".profile-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// SharesCPUs reports whether two profiles' processes share processors:
// the same Host, and CPU lists that are not disjoint (a list not known
// counts as every processor).
func (p *Profile) SharesCPUs(o *Profile) bool {
	if p.Host == "" || p.Host != o.Host {
		return false
	}
	a, aok := ParseCPUList(p.CPUs)
	b, bok := ParseCPUList(o.CPUs)
	if !aok || !bok {
		return true
	}
	for c := range a {
		if b[c] {
			return true
		}
	}
	return false
}

// ParseCPUList parses Linux's CPU list form ("0-3,6"); ok is false for
// an empty or malformed list.
func ParseCPUList(s string) (cpus map[int]bool, ok bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, false
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxCPUListParts {
		return nil, false
	}
	cpus = map[int]bool{}
	for _, part := range parts {
		lo, hi, rng := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, false
		}
		b := a
		if rng {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, false
			}
		}
		if b >= maxCPUs {
			return nil, false
		}
		for c := a; c <= b; c++ {
			cpus[c] = true
		}
	}
	return cpus, true
}

// maxCPUs bounds a CPU number ParseCPUList accepts (Linux's NR_CPUS is at
// most 8192), maxCPUListParts the ranges of one list: a list from a
// server's profile is outside input.
const (
	maxCPUs         = 1 << 13
	maxCPUListParts = 1 << 10
)

// ProcessCPUs returns the processors this process may run on
// (Cpus_allowed_list of /proc/self/status: its affinity, within its
// cpuset), "" where not known.
func ProcessCPUs() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ProcessCPUQuota returns the cores this process's cgroup CPU quota
// allows (cgroup v2 cpu.max, v1 cpu.cfs_quota_us over cpu.cfs_period_us),
// 0 where it has none or it cannot be read. Only the process's own
// cgroup is read, not its ancestors'.
func ProcessCPUQuota() float64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "": // v2
			if q, ok := readQuota("/sys/fs/cgroup"+f[2], "cpu.max"); ok {
				return q
			}
		case slices.Contains(strings.Split(f[1], ","), "cpu"): // v1
			for _, mnt := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
				if q, ok := readQuota(mnt+f[2], ""); ok {
					return q
				}
			}
		}
	}
	return 0
}

// readQuota reads the quota in dir: file cpu.max ("QUOTA PERIOD" or
// "max PERIOD"), or v1's two files when file is "". ok is false when it
// cannot be read.
func readQuota(dir, file string) (float64, bool) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	var q, p string
	if file != "" {
		f := strings.Fields(read(file))
		if len(f) != 2 {
			return 0, false
		}
		q, p = f[0], f[1]
	} else {
		q, p = read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")
	}
	if q == "max" || q == "-1" {
		return 0, q != "" && p != ""
	}
	qv, err1 := strconv.ParseFloat(q, 64)
	pv, err2 := strconv.ParseFloat(p, 64)
	if err1 != nil || err2 != nil || qv <= 0 || pv <= 0 {
		return 0, false
	}
	return qv / pv, true
}

// HostID identifies this machine: the kernel's boot id, else the host name.
func HostID() string {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id
		}
	}
	h, _ := os.Hostname()
	return h
}

// Monotone returns the non-decreasing sequence nearest to v in least
// squares (isotonic regression, pool adjacent violators): timed prefixes
// of a model, where a longer prefix never costs less but timing noise says
// so now and then. Taking the running maximum instead carried one slow
// outlier on to every later layer (MobileNetV3-Large's layer2 timed at
// 10.55 ms, then 7 layers of nothing); pooling spreads it over the layers
// it disagrees with.
func Monotone(v []float64) []float64 {
	type block struct {
		sum float64
		n   int
	}
	var bs []block
	for _, x := range v {
		bs = append(bs, block{x, 1})
		for len(bs) > 1 {
			a, b := bs[len(bs)-2], bs[len(bs)-1]
			if a.sum/float64(a.n) <= b.sum/float64(b.n) {
				break
			}
			bs = append(bs[:len(bs)-2], block{a.sum + b.sum, a.n + b.n})
		}
	}
	out := make([]float64, 0, len(v))
	for _, b := range bs {
		for range b.n {
			out = append(out, max(0, b.sum/float64(b.n)))
		}
	}
	return out
}
