package cache

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/cache/codec"
)

// layer12Len is a ResNet-50 layer12 float32 feature's .npy length:
// 1024x14x14 values and a 128-byte header.
const layer12Len = 802944

// layer12Value returns a layer12-shaped post-ReLU feature (cache/codec's
// activation-like set: maps of 14x14 values, each with its own log-normal
// scale and 30-70% zeros, a tenth all zero) as a .npy file.
func layer12Value(seed int) []byte {
	if v, ok := layer12Values.Load(seed); ok {
		return v.([]byte)
	}
	v, _ := layer12Values.LoadOrStore(seed, makeLayer12Value(seed))
	return v.([]byte)
}

// layer12Values memoizes layer12Value (the race detector makes one take
// about 0.1 s): callers must not change what it returns.
var layer12Values sync.Map // int -> []byte

func makeLayer12Value(seed int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 2))
	b := make([]byte, layer12Len)
	copy(b, "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1024, 14, 14), }")
	for k := len("\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1024, 14, 14), }"); k < 127; k++ {
		b[k] = ' '
	}
	b[127] = '\n'
	n := (layer12Len - 128) / 4
	var scale, zeros float64
	for i := 0; i < n; {
		if i%196 == 0 {
			scale = math.Exp(r.NormFloat64() - 0.5)
			zeros = 0.3 + 0.4*r.Float64()
			if r.IntN(10) == 0 {
				zeros = 1
			}
		}
		run := 1 + r.IntN(8)
		zero := r.Float64() < zeros
		for ; run > 0 && i < n; run, i = run-1, i+1 {
			v := float32(0)
			if !zero {
				v = float32(math.Abs(r.NormFloat64()) * scale)
			}
			binary.LittleEndian.PutUint32(b[128+4*i:], math.Float32bits(v))
		}
	}
	return b
}

// BenchmarkAutoPutRaw is the write path of the mount's default
// (--cache-compression auto: S2 in Badger, RawFiles) where large features
// are written raw: a Put of a layer12 feature to a new key, nothing told
// of the work around the store. It reports the process's CPU per Put
// (getrusage: Badger's goroutines and the collector included). It builds
// on 06087ba too, for an A/B of what the auto policy adds to a GPU host's
// write path.
func BenchmarkAutoPutRaw(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), MaxBytes: 4 << 30, Logger: quietLogger(), Compression: codec.S2, RawFiles: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	benchPuts(b, s)
}

// benchPuts Puts one layer12 feature under new keys, reporting CPU per Put.
func benchPuts(b *testing.B, s *Store) {
	v := layer12Value(1)
	for k := range 8 { // warm: files, pools
		if err := s.Put(testKey(1<<20+k), v); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(v)))
	b.ResetTimer()
	c0 := processCPU(b)
	k := 0
	for b.Loop() {
		if err := s.Put(testKey(k), v); err != nil {
			b.Fatal(err)
		}
		k++
	}
	b.ReportMetric((processCPU(b)-c0).Seconds()*1e3/float64(k), "cpu-ms/put")
}
