package cache

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmark sizes: a ResNet-50 layer12 feature is 1024x14x14 float32 plus
// the .npy header, about 800 KB.
const (
	benchValue   = 802_944
	benchEntries = 192 // ~150 MB: fits the page cache, as a warm cache does
	benchReaders = 4
)

// readAll reads every key once with benchReaders goroutines in a shuffled
// order and returns the bytes read and the time taken.
func readAll(b *testing.B, n int, seed uint64, read func(k int) ([]byte, error)) (int64, time.Duration) {
	order := rand.New(rand.NewPCG(seed, 3)).Perm(n)
	work := make(chan int, n)
	for _, k := range order {
		work <- k
	}
	close(work)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	start := time.Now()
	for range benchReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got int64
			for k := range work {
				v, err := read(k)
				if err != nil {
					b.Error(err)
					return
				}
				got += int64(len(v))
			}
			mu.Lock()
			total += got
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, time.Since(start)
}

// BenchmarkWarmRead compares reading 800 KB values from a warm cache with 4
// concurrent readers against reading the same bytes from one file each on
// the same disk, alternating the two in every iteration. It reports both
// throughputs and their ratio (cache/files).
func BenchmarkWarmRead(b *testing.B) {
	s, files := benchStore(b, 4<<30)
	path := func(k int) string { return filepath.Join(files, fmt.Sprintf("%06d.npy", k)) }
	for k := range benchEntries {
		v := testValue(k, benchValue)
		if err := s.Put(testKey(k), v); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path(k), v, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	fromCache := func(k int) ([]byte, error) {
		v, ok, err := s.Get(testKey(k))
		if err == nil && !ok {
			err = fmt.Errorf("cache miss for %d", k)
		}
		return v, err
	}
	fromFile := func(k int) ([]byte, error) { return os.ReadFile(path(k)) }
	// Warm both (page cache, mappings).
	readAll(b, benchEntries, 0, fromCache)
	readAll(b, benchEntries, 0, fromFile)

	var cacheBytes, fileBytes int64
	var cacheTime, fileTime time.Duration
	b.ResetTimer()
	i := uint64(0)
	for b.Loop() {
		i++
		n, d := readAll(b, benchEntries, i, fromCache)
		cacheBytes, cacheTime = cacheBytes+n, cacheTime+d
		n, d = readAll(b, benchEntries, i, fromFile)
		fileBytes, fileTime = fileBytes+n, fileTime+d
	}
	cacheMBs := float64(cacheBytes) / 1e6 / cacheTime.Seconds()
	fileMBs := float64(fileBytes) / 1e6 / fileTime.Seconds()
	b.ReportMetric(cacheMBs, "cache-MB/s")
	b.ReportMetric(fileMBs, "files-MB/s")
	b.ReportMetric(cacheMBs/fileMBs, "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWrite compares Put of 800 KB values (4 writers, each iteration
// writing 150 MB into a 256 MiB budget, so eviction and GC run from the
// second iteration on) against writing one file each (no fsync on either
// side), then reclaims and reports the disk bytes per stored byte.
func BenchmarkWrite(b *testing.B) {
	const budget = 256 << 20
	s, files := benchStore(b, budget)
	vals := make([][]byte, 16)
	for k := range vals {
		vals[k] = testValue(k, benchValue)
	}
	var cacheBytes, fileBytes int64
	var cacheTime, fileTime time.Duration
	round := 0
	for b.Loop() {
		base := round * benchEntries
		round++
		n, d := readAll(b, benchEntries, uint64(round), func(k int) ([]byte, error) {
			v := vals[k%len(vals)]
			return v, s.Put(testKey(base+k), v)
		})
		cacheBytes, cacheTime = cacheBytes+n, cacheTime+d
		n, d = readAll(b, benchEntries, uint64(round), func(k int) ([]byte, error) {
			v := vals[k%len(vals)]
			return v, os.WriteFile(filepath.Join(files, fmt.Sprintf("%d.npy", base+k)), v, 0o644)
		})
		fileBytes, fileTime = fileBytes+n, fileTime+d
	}
	b.StopTimer()
	if err := s.Reclaim(); err != nil {
		b.Fatal(err)
	}
	st := s.Stats()
	disk, err := DiskUsage(s.dir)
	if err != nil {
		b.Fatal(err)
	}
	cacheMBs := float64(cacheBytes) / 1e6 / cacheTime.Seconds()
	fileMBs := float64(fileBytes) / 1e6 / fileTime.Seconds()
	b.ReportMetric(cacheMBs, "cache-MB/s")
	b.ReportMetric(fileMBs, "files-MB/s")
	b.ReportMetric(cacheMBs/fileMBs, "ratio")
	b.ReportMetric(float64(disk)/float64(st.Bytes), "disk/stored")
	b.ReportMetric(float64(st.Bytes)/1e6, "stored-MB")
	b.ReportMetric(float64(disk)/1e6, "disk-MB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPutCPU measures the CPU one Put costs on the store's own path
// (no compression), with one writer, against os.WriteFile of the same bytes
// to one file each on the same disk, alternating the two in every
// iteration. Values are 330 KB, what S2 keeps of a ResNet-50 layer12
// feature. It reports the process's CPU milliseconds per write of each
// (getrusage, so Badger's own goroutines are counted) and their ratio.
// Badger writes its value log through a shared memory map, so part of a
// Put's CPU is the kernel's page faults and the zeroing of the pages they
// map (docs/GPU.md, "Where epoch 1's CPU goes").
func BenchmarkPutCPU(b *testing.B) {
	s, files := benchStore(b, 64<<30)
	const size, per = 330 << 10, 64
	vals := make([][]byte, 8)
	for k := range vals {
		vals[k] = testValue(k, size)
	}
	var cacheCPU, fileCPU time.Duration
	n, round := 0, 0
	for b.Loop() {
		base := round * per
		round++
		c0 := processCPU(b)
		for k := range per {
			if err := s.Put(testKey(base+k), vals[k%len(vals)]); err != nil {
				b.Fatal(err)
			}
		}
		c1 := processCPU(b)
		for k := range per {
			if err := os.WriteFile(filepath.Join(files, fmt.Sprintf("%d", base+k)), vals[k%len(vals)], 0o644); err != nil {
				b.Fatal(err)
			}
		}
		c2 := processCPU(b)
		cacheCPU, fileCPU, n = cacheCPU+c1-c0, fileCPU+c2-c1, n+per
	}
	b.ReportMetric(cacheCPU.Seconds()*1e3/float64(n), "cache-cpu-ms/put")
	b.ReportMetric(fileCPU.Seconds()*1e3/float64(n), "files-cpu-ms/write")
	b.ReportMetric(float64(cacheCPU)/float64(fileCPU), "ratio")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchStore opens a store with the budget maxBytes in a temporary
// directory, closed when the benchmark ends, and makes a directory beside
// it for the baseline's files, on the same disk.
func benchStore(b *testing.B, maxBytes int64) (*Store, string) {
	b.Helper()
	dir := b.TempDir()
	s, err := Open(Options{Dir: filepath.Join(dir, "cache"), MaxBytes: maxBytes, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		b.Fatal(err)
	}
	return s, files
}
