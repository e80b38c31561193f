package cache

import (
	"testing"
	"time"
)

// BenchmarkAutoPut is BenchmarkAutoPutRaw with the store told what a
// feature costs to extract: a GPU host's 0.2 ms (written raw) or a CPU
// host's 35 ms (compressed with zeros-elision on the write path). It
// reports CPU per Put and the disk a feature's file takes.
func BenchmarkAutoPut(b *testing.B) {
	for _, host := range []struct {
		name string
		cost time.Duration
	}{{"gpu", 200 * time.Microsecond}, {"cpu", 35 * time.Millisecond}} {
		b.Run(host.name, func(b *testing.B) {
			dir := b.TempDir()
			s := openAuto(b, dir, -1)
			b.Cleanup(func() { s.Close() })
			w := &fakeWorkload{perFeature: host.cost}
			s.SetWorkload(w.workload())
			benchPuts(b, s)
			st := s.Stats()
			b.ReportMetric(float64(filesBytes(b, dir))/float64(st.Entries), "disk-B/feature")
		})
	}
}

// BenchmarkCompaction compacts raw layer12 files at rest, one at a time as
// the compactor does (without its pauses): CPU per file compacted (read
// and verify the raw file, encode, write, rename, two index commits),
// and the disk a feature takes before and after.
func BenchmarkCompaction(b *testing.B) {
	dir := b.TempDir()
	s := openAuto(b, dir, -1)
	b.Cleanup(func() { s.Close() })
	v := layer12Value(1)
	for k := range b.N {
		if err := s.Put(testKey(k), v); err != nil {
			b.Fatal(err)
		}
	}
	before := filesBytes(b, dir)
	cands, _, err := s.rawCandidates([]byte{prefixValue}, b.N)
	if err != nil || len(cands) != b.N {
		b.Fatalf("%d raw files found of %d (err %v)", len(cands), b.N, err)
	}
	idle := s.activity()
	b.SetBytes(int64(len(v)))
	b.ResetTimer()
	c0 := processCPU(b)
	for _, c := range cands {
		s.compactOne(c.id, c.ptr, idle)
	}
	cpu := processCPU(b) - c0
	b.StopTimer()
	if n := s.Stats().Compactions; n != int64(b.N) {
		b.Fatalf("%d of %d compacted", n, b.N)
	}
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu-ms/file")
	b.ReportMetric(float64(before)/float64(b.N), "raw-disk-B/feature")
	b.ReportMetric(float64(filesBytes(b, dir))/float64(b.N), "disk-B/feature")
}

// BenchmarkAutoGet reads a layer12 feature (Get, warm) stored raw and
// compacted: CPU per Get.
func BenchmarkAutoGet(b *testing.B) {
	for _, form := range []string{"raw", "compacted"} {
		b.Run(form, func(b *testing.B) {
			dir := b.TempDir()
			s := openAuto(b, dir, -1)
			b.Cleanup(func() { s.Close() })
			const n = 32
			for k := range n {
				if err := s.Put(testKey(k), layer12Value(k)); err != nil {
					b.Fatal(err)
				}
			}
			if form == "compacted" {
				cands, _, _ := s.rawCandidates([]byte{prefixValue}, n)
				idle := s.activity()
				for _, c := range cands {
					s.compactOne(c.id, c.ptr, idle)
				}
				if s.Stats().Compactions != n {
					b.Fatal("not compacted")
				}
			}
			for k := range n { // warm
				s.Get(testKey(k))
			}
			b.SetBytes(layer12Len)
			b.ResetTimer()
			c0 := processCPU(b)
			i := 0
			for b.Loop() {
				if _, ok, err := s.Get(testKey(i % n)); !ok || err != nil {
					b.Fatalf("Get: ok %v err %v", ok, err)
				}
				i++
			}
			b.ReportMetric((processCPU(b)-c0).Seconds()*1e3/float64(i), "cpu-ms/get")
		})
	}
}

// BenchmarkAutoPolicy is what the auto policy adds to each large Put: its
// decision (a sample of the extraction at most once a second; here a
// workload whose figures cost nothing to read).
func BenchmarkAutoPolicy(b *testing.B) {
	s := openAuto(b, b.TempDir(), -1)
	b.Cleanup(func() { s.Close() })
	w := &fakeWorkload{perFeature: 200 * time.Microsecond}
	s.SetWorkload(w.workload())
	for b.Loop() {
		if s.autoCompresses(layer12Len) {
			b.Fatal("a GPU host's Put compressed")
		}
	}
}
