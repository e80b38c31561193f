// Command benchcache measures the feature cache alone (issue 37, item 5):
// Put and Get of ResNet-50 layer12-sized features (802,944 B .npy files of
// post-ReLU float32, about half zeros) from 1, 2 and NumCPU goroutines,
// against os.WriteFile and os.ReadFile of the same bytes into plain files
// on the same filesystem, in interleaved rounds. For each phase it takes
// the process's CPU time (getrusage user+sys, so Badger's goroutines and
// the garbage collector count) and the wall time, and reports CPU per
// feature and MB/s: the median over the rounds with min-max, and the
// median of the per-round ratios to the plain files' CPU. Every store
// variant runs in the same process and round: the cache's default (large
// values in files, raw), the same with S2 or zeros-elision, and the
// ca82ffd layout (every value in Badger's value log) raw and with S2 (the
// mount's default compression). scripts/bench-cache.sh runs it.
//
//	go run ./scripts/benchcache -rounds 3 -features 48 -dir /tmp
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/cache/codec"
)

// variant is one way of storing the features.
type variant struct {
	name   string
	files  bool // plain files: the baseline
	thresh int64
	comp   codec.Method
}

var variants = []variant{
	{name: "plain files (os.WriteFile / os.ReadFile)", files: true},
	{name: "cache, large values in files, raw (new default)", thresh: 0},
	{name: "cache, large values in files, zeros-elision", thresh: 0, comp: codec.Zeros},
	{name: "cache, large values in files, S2", thresh: 0, comp: codec.S2},
	{name: "cache, all in Badger (ca82ffd), raw", thresh: -1},
	{name: "cache, all in Badger (ca82ffd), S2 (ca82ffd mount default)", thresh: -1, comp: codec.S2},
}

// sample is one phase's measurement.
type sample struct {
	cpuPer float64 // CPU seconds per feature
	mbps   float64
	ratio  float64 // cpuPer / plain files' cpuPer in the same round
	disk   float64 // bytes on disk per feature after Put (Put phases)
}

type cell struct{ put, get, at []sample }

func cpuNow() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// feature returns a layer12-shaped .npy (1024x14x14 float32) of post-ReLU
// activations: each channel a normal around its own mean, clipped at 0,
// about half the elements zero.
func feature(seed uint64) []byte {
	const c, hw = 1024, 14 * 14
	hdr := "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1024, 14, 14), }"
	pad := 128 - 10 - len(hdr) - 1
	b := make([]byte, 0, 128+4*c*hw)
	b = append(b, "\x93NUMPY\x01\x00"...)
	b = binary.LittleEndian.AppendUint16(b, uint16(128-10))
	b = append(b, hdr...)
	b = append(b, strings.Repeat(" ", pad)...)
	b = append(b, '\n')
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for range c {
		mu := r.NormFloat64()*0.6 - 0.05
		for range hw {
			v := float32(math.Max(0, mu+r.NormFloat64()))
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

func key(round, w, n int) cache.Key {
	return cache.Key{Source: "bench", Object: fmt.Sprintf("r%d/w%d/img%06d.jpg", round, w, n), ETag: "e",
		ModelDigest: "resnet50", Layer: "layer12", Preprocess: "p", DType: "float32"}
}

// readPiece is the size of the mount's reads of a cached feature (ReadAt,
// one per kernel read request).
const readPiece = 128 << 10

// run does one Put phase, one Get phase and one phase of ReadAt in 128 KiB
// pieces (what the mount does; plain files: open, pread the pieces, close)
// of variant v with w goroutines.
func run(v variant, dir string, feats [][]byte, round, w int) (put, get, at sample, err error) {
	n := len(feats)
	var s *cache.Store
	if !v.files {
		s, err = cache.Open(cache.Options{Dir: dir, MaxBytes: 4 << 30, FileThreshold: v.thresh, Compression: v.comp})
		if err != nil {
			return put, get, at, err
		}
		defer s.Close()
	} else if err = os.MkdirAll(dir, 0o700); err != nil {
		return put, get, at, err
	}
	par := func(f func(i int) error) (float64, float64, error) {
		runtime.GC()
		var wg sync.WaitGroup
		errs := make(chan error, w)
		c0, t0 := cpuNow(), time.Now()
		for g := range w {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += w {
					if err := f(i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		c, t := cpuNow()-c0, time.Since(t0).Seconds()
		select {
		case err := <-errs:
			return 0, 0, err
		default:
		}
		return c, t, nil
	}
	path := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%06d.npy", i)) }
	var total float64
	for _, f := range feats {
		total += float64(len(f))
	}
	c, t, err := par(func(i int) error {
		if v.files {
			return os.WriteFile(path(i), feats[i], 0o600)
		}
		return s.Put(key(round, w, i), feats[i])
	})
	if err != nil {
		return put, get, at, fmt.Errorf("put: %w", err)
	}
	put = sample{cpuPer: c / float64(n), mbps: total / t / 1e6}
	if du, err := cache.DiskUsage(dir); err == nil {
		put.disk = float64(du) / float64(n)
	}
	c, t, err = par(func(i int) error {
		var b []byte
		var err error
		if v.files {
			b, err = os.ReadFile(path(i))
		} else {
			var ok bool
			b, ok, err = s.Get(key(round, w, i))
			if err == nil && !ok {
				err = fmt.Errorf("feature %d missing", i)
			}
		}
		if err == nil && len(b) != len(feats[i]) {
			err = fmt.Errorf("feature %d: %d bytes", i, len(b))
		}
		return err
	})
	if err != nil {
		return put, get, at, fmt.Errorf("get: %w", err)
	}
	get = sample{cpuPer: c / float64(n), mbps: total / t / 1e6}
	bufs := make([][]byte, w)
	for g := range bufs {
		bufs[g] = make([]byte, readPiece)
	}
	c, t, err = par(func(i int) error {
		buf := bufs[i%w]
		var f *os.File
		if v.files {
			var err error
			if f, err = os.Open(path(i)); err != nil {
				return err
			}
			defer f.Close()
		}
		for off := int64(0); off < int64(len(feats[i])); off += readPiece {
			var m int
			var err error
			if v.files {
				m, err = f.ReadAt(buf, off)
				if err != nil && off+int64(m) == int64(len(feats[i])) {
					err = nil // io.EOF at the end
				}
			} else {
				var ok bool
				m, _, ok, err = s.ReadAt(key(round, w, i), buf, off)
				if err == nil && !ok {
					err = fmt.Errorf("feature %d missing", i)
				}
			}
			if err != nil {
				return err
			}
			if m != min(readPiece, len(feats[i])-int(off)) {
				return fmt.Errorf("feature %d: %d bytes at %d", i, m, off)
			}
		}
		return nil
	})
	if err != nil {
		return put, get, at, fmt.Errorf("readat: %w", err)
	}
	at = sample{cpuPer: c / float64(n), mbps: total / t / 1e6}
	return put, get, at, nil
}

func med(v []float64) (m, lo, hi float64) {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func main() {
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	nfeat := flag.Int("features", 48, "features per phase")
	base := flag.String("dir", os.TempDir(), "where the stores and files go (the filesystem measured)")
	only := flag.Int("only", -1, "run only this variant (and the plain files), for profiling")
	prof := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *only >= 0 {
		variants = []variant{variants[0], variants[*only]}
	}
	writers := []int{1, 2}
	if runtime.NumCPU() > 2 {
		writers = append(writers, runtime.NumCPU())
	} else {
		writers = append(writers, 4) // NumCPU is 2: show 4 as well
	}
	feats := make([][]byte, *nfeat)
	for i := range feats {
		feats[i] = feature(uint64(i))
	}
	work, err := os.MkdirTemp(*base, "featurefs-benchcache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(work)
	loadStart := loadavg()
	cells := map[[2]int]*cell{}
	for r := range *rounds {
		for _, w := range writers {
			// Rotate the order of the variants each round.
			var filesPut, filesGet, filesAt float64
			order := make([]int, len(variants))
			for i := range order {
				order[i] = (i + r) % len(variants)
			}
			res := make([][3]sample, len(variants))
			for _, vi := range order {
				v := variants[vi]
				dir := filepath.Join(work, fmt.Sprintf("r%d-w%d-v%d", r, w, vi))
				p, g, a, err := run(v, dir, feats, r, w)
				if err != nil {
					fmt.Fprintf(os.Stderr, "benchcache: %s, %d writers: %v\n", v.name, w, err)
					os.Exit(1)
				}
				os.RemoveAll(dir)
				res[vi] = [3]sample{p, g, a}
				if v.files {
					filesPut, filesGet, filesAt = p.cpuPer, g.cpuPer, a.cpuPer
				}
			}
			for vi := range variants {
				c := cells[[2]int{vi, w}]
				if c == nil {
					c = &cell{}
					cells[[2]int{vi, w}] = c
				}
				p, g, a := res[vi][0], res[vi][1], res[vi][2]
				p.ratio, g.ratio, a.ratio = p.cpuPer/filesPut, g.cpuPer/filesGet, a.cpuPer/filesAt
				c.put, c.get, c.at = append(c.put, p), append(c.get, g), append(c.at, a)
			}
			fmt.Fprintf(os.Stderr, "benchcache: round %d, %d writers done (load %s)\n", r+1, w, loadavg())
		}
	}
	fmt.Printf("%d rounds, %d features of %d B per phase, %d CPUs (GOMAXPROCS %d), load average %s at the start and %s at the end\n\n",
		*rounds, *nfeat, len(feats[0]), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadStart, loadavg())
	fmt.Println("| store | writers | Put CPU ms/feature | Put MB/s | Put CPU / files' | Get CPU ms/feature | Get MB/s | Get CPU / files' | ReadAt 128 KiB: CPU ms/feature | ReadAt CPU / files' | disk bytes/feature |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	pick := func(ss []sample, f func(sample) float64) (float64, float64, float64) {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		return med(v)
	}
	cpu := func(s sample) float64 { return s.cpuPer * 1e3 }
	mb := func(s sample) float64 { return s.mbps }
	ra := func(s sample) float64 { return s.ratio }
	dk := func(s sample) float64 { return s.disk }
	for vi, v := range variants {
		for _, w := range writers {
			c := cells[[2]int{vi, w}]
			pc, pcl, pch := pick(c.put, cpu)
			pm, pml, pmh := pick(c.put, mb)
			pr, prl, prh := pick(c.put, ra)
			gc, gcl, gch := pick(c.get, cpu)
			gm, gml, gmh := pick(c.get, mb)
			gr, grl, grh := pick(c.get, ra)
			ac, acl, ach := pick(c.at, cpu)
			ar, arl, arh := pick(c.at, ra)
			d, _, _ := pick(c.put, dk)
			fmt.Printf("| %s | %d | %.3f (%.3f-%.3f) | %.0f (%.0f-%.0f) | **%.2fx** (%.2f-%.2f) | %.3f (%.3f-%.3f) | %.0f (%.0f-%.0f) | **%.2fx** (%.2f-%.2f) | %.3f (%.3f-%.3f) | %.2fx (%.2f-%.2f) | %.0f |\n",
				v.name, w, pc, pcl, pch, pm, pml, pmh, pr, prl, prh, gc, gcl, gch, gm, gml, gmh, gr, grl, grh, ac, acl, ach, ar, arl, arh, d)
		}
	}
	fmt.Println()
	for _, w := range writers[:2] {
		c := cells[[2]int{1, w}]
		pr, _, _ := pick(c.put, ra)
		gr, _, _ := pick(c.get, ra)
		// The verdict of the figure printed (make bench's summary reads it).
		pr, gr = math.Round(pr*100)/100, math.Round(gr*100)/100
		verdict := func(r float64) string {
			if r <= 1.5 {
				return "met"
			}
			return "MISSED"
		}
		fmt.Printf("- cache (default) at %d writer(s): Put **%.2fx** os.WriteFile's CPU (target <= 1.5x: %s), Get **%.2fx** os.ReadFile's (target <= 1.5x: %s)\n",
			w, pr, verdict(pr), gr, verdict(gr))
	}
}
