package figures

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
)

// MemoryStats is where a mount's memory is (.featurefs/stats "memory";
// issue 39): the process's resident set split as the kernel counts it,
// Go's runtime by class, the C heap, and every memory bound the mount
// has with what it holds now. docs/RELIABILITY.md ("Memory bounds") has
// the table of the bounds and their defaults.
type MemoryStats struct {
	// RSSBytes is the resident set (VmRSS), PeakRSSBytes its peak (VmHWM).
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// AnonBytes is the resident anonymous memory (RssAnon: Go's heap and
	// stacks, the C heap); FileBytes the resident pages of mapped files
	// (RssFile: Badger's tables and value log, the binary and its
	// libraries), which the kernel drops under pressure.
	AnonBytes int64 `json:"anon_bytes"`
	FileBytes int64 `json:"file_bytes"`
	// Go's heap (runtime/metrics /memory/classes): objects (live, and dead
	// ones not yet swept), unused (in spans in use, no object), free
	// (held by Go, not returned) and released (returned to the operating
	// system: not resident); stacks; what the runtime holds beside them
	// (its metadata, profiling buckets, other).
	GoHeapObjectsBytes  int64 `json:"go_heap_objects_bytes"`
	GoHeapUnusedBytes   int64 `json:"go_heap_unused_bytes"`
	GoHeapFreeBytes     int64 `json:"go_heap_free_bytes"`
	GoHeapReleasedBytes int64 `json:"go_heap_released_bytes"`
	GoStacksBytes       int64 `json:"go_stacks_bytes"`
	GoRuntimeBytes      int64 `json:"go_runtime_bytes"`
	// GoHeapGoalBytes is the heap size the next collection aims at;
	// GoMemoryLimitBytes the runtime's soft limit (GOMEMLIMIT or
	// --memory-limit; 0 when none).
	GoHeapGoalBytes    int64 `json:"go_heap_goal_bytes"`
	GoMemoryLimitBytes int64 `json:"go_memory_limit_bytes"`
	// GoGCPercent is the collector's GC percentage now (GOGC): the mount
	// sets it after each collection from the live heap (fs/heappace), 100
	// at most.
	GoGCPercent int64 `json:"go_gc_percent"`
	// CHeapInUseBytes and CHeapFreeBytes are the C heap's (glibc's
	// mallinfo2: ONNX Runtime's sessions and activations, libjpeg-turbo),
	// from the extractor in this process (0 for a --remote mount).
	CHeapInUseBytes int64 `json:"c_heap_in_use_bytes"`
	CHeapFreeBytes  int64 `json:"c_heap_free_bytes"`
	// SessionBytes is the part of CHeapInUseBytes the open ONNX Runtime
	// sessions hold (each measured when opened: weights and plan);
	// BusyTrims counts the C heap's trims between batches, its free
	// chunks past 64 MiB while the extractor was busy (extractor,
	// memtrim.go).
	SessionBytes int64 `json:"session_bytes"`
	BusyTrims    int64 `json:"busy_trims"`
	// SessionsClosedForMemory counts the idle ONNX Runtime sessions closed
	// so that another could open within --memory-limit.
	SessionsClosedForMemory int64 `json:"sessions_closed_for_memory"`
	// IdleReleases counts the times the mount, idle after some work,
	// handed its free memory back to the operating system.
	IdleReleases int64 `json:"idle_releases"`
	// Bounds are the mount's memory bounds with what each holds now;
	// BoundsTotalBytes the sum of their maxima.
	Bounds           []MemoryBound `json:"bounds"`
	BoundsTotalBytes int64         `json:"bounds_total_bytes"`
}

// MemoryBound is one bound on what a part of the mount holds in memory.
type MemoryBound struct {
	// Name names the part (docs/RELIABILITY.md, "Memory bounds").
	Name string `json:"name"`
	// Flag is the option that sets it ("" for a fixed bound).
	Flag string `json:"flag,omitempty"`
	// MaxBytes is the bound; UsedBytes what the part holds now (null
	// where the part does not count it).
	MaxBytes  int64  `json:"max_bytes"`
	UsedBytes *int64 `json:"used_bytes"`
}

// Used returns a pointer to n, for MemoryBound.UsedBytes.
func Used(n int64) *int64 { return &n }

// goMemoryMetrics are the runtime/metrics samples ReadProcessMemory reads.
var goMemoryMetrics = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/gc/heap/goal:bytes",
	"/gc/gomemlimit:bytes",
	"/gc/gogc:percent",
}

// ReadProcessMemory fills m's process figures: the resident set from
// /proc/self/status and Go's runtime from runtime/metrics.
func ReadProcessMemory(m *MemoryStats) {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		fields := map[string]*int64{"VmRSS:": &m.RSSBytes, "VmHWM:": &m.PeakRSSBytes, "RssAnon:": &m.AnonBytes, "RssFile:": &m.FileBytes}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := bytes.Fields(sc.Bytes())
			if len(f) < 2 {
				continue
			}
			if dst, ok := fields[string(f[0])]; ok {
				if kib, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
					*dst = kib << 10
				}
			}
		}
	}
	samples := make([]metrics.Sample, len(goMemoryMetrics))
	for i, name := range goMemoryMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	v := func(i int) int64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(min(samples[i].Value.Uint64(), 1<<63-1))
	}
	total := v(0)
	m.GoHeapObjectsBytes, m.GoHeapUnusedBytes, m.GoHeapFreeBytes, m.GoHeapReleasedBytes = v(1), v(2), v(3), v(4)
	m.GoStacksBytes = v(5) + v(6)
	m.GoRuntimeBytes = max(total-m.GoHeapObjectsBytes-m.GoHeapUnusedBytes-m.GoHeapFreeBytes-m.GoHeapReleasedBytes-m.GoStacksBytes, 0)
	m.GoHeapGoalBytes = v(7)
	// The runtime's "no limit" is math.MaxInt64 exactly; every other
	// value is a limit set, however large (--memory-limit
	// 9223372036854775807 sets three quarters of it, past 1<<62).
	if lim := v(8); lim < math.MaxInt64 {
		m.GoMemoryLimitBytes = lim
	}
	m.GoGCPercent = v(9)
}

// MemoryOf returns the stats file's "memory" for st: the process's
// figures and every bound the mount has, with what it holds now
// (docs/RELIABILITY.md, "Memory bounds", lists them with their defaults;
// the names here are that table's), given what st lacks: the idle
// releases, and the hand-off buffers' and the recent reads' (used, max).
func (st *Stats) MemoryOf(idleReleases int64, handoff, recent [2]int64) *MemoryStats {
	m := &MemoryStats{IdleReleases: idleReleases}
	ReadProcessMemory(m)
	t := &st.FS
	add := func(name, flag string, max int64, used *int64) {
		m.Bounds = append(m.Bounds, MemoryBound{Name: name, Flag: flag, MaxBytes: max, UsedBytes: used})
		m.BoundsTotalBytes += max
	}
	add("metadata", "--metadata-cache-size", t.MetadataMaxBytes, Used(t.MetadataBytes))
	if xm := st.Extractor.Memory; xm != nil {
		m.CHeapInUseBytes, m.CHeapFreeBytes = xm.CHeapInUseBytes, xm.CHeapFreeBytes
		m.SessionBytes, m.BusyTrims = xm.SessionBytes, xm.BusyTrims
		m.SessionsClosedForMemory = xm.SessionsClosedForMemory
		add("decode", "--decode-memory", xm.DecodeMaxBytes, Used(xm.DecodeBytes))
		add("fetched_objects", "--fetch-memory", xm.FetchMaxBytes, Used(xm.FetchedBytes))
		if xm.GPUPixelMaxBytes > 0 {
			add("gpu_decoded_pixels", "--decode-memory", xm.GPUPixelMaxBytes, Used(xm.GPUPixelBytes))
		}
	}
	add("prefetch", "", st.Prefetch.MaxBytes, Used(st.Prefetch.InFlightBytes))
	add("handoff", "", handoff[1], Used(handoff[0]))
	add("cache_write_queue", "", t.WriteQueueMaxBytes, Used(t.WriteQueuedBytes))
	add("recent_reads", "", recent[1], Used(recent[0]))
	add("badger", "", st.Cache.BadgerMemoryMaxBytes, nil)
	return m
}
