package codec

// Benchmarks of each step of the codec on its own, on activation-like
// data: ReLU output as a CNN layer gives it (feature maps of 14x14 values,
// each channel with its own scale and share of zeros), float32 and
// float16, as .npy bytes. This file uses only Encode, Decode, ReadAt,
// shuffle and unshuffle, so that it runs unchanged against an older
// codec.go (scripts/codec-steps-compare.sh compares two commits with it;
// scripts/bench-codec-steps.sh runs it in rounds for docs/bench).

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
)

// activations returns rawLen bytes of a .npy file (a 128-byte header, then
// ReLU-like values of es bytes, 4: float32 or 2: float16): maps of 196
// values (14x14), each map with its own scale (log-normal, so exponents
// spread over about 2^-8..2^3) and its own share of zeros (about half on
// average: some maps all zero, most 30-70%), zeros in runs as a ReLU makes
// them.
func activations(rawLen, es int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, rawLen)
	copy(b, "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1024, 14, 14), }")
	n := (rawLen - 128) / es
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
			if es == 2 {
				binary.LittleEndian.PutUint16(b[128+2*i:], half(v))
			} else {
				binary.LittleEndian.PutUint32(b[128+4*i:], math.Float32bits(v))
			}
		}
	}
	return b
}

// half converts a non-negative float32 to float16 bits (truncating; tiny
// values become zero).
func half(v float32) uint16 {
	bits := math.Float32bits(v)
	e := int(bits>>23&0xff) - 127 + 15
	switch {
	case e <= 0:
		return 0
	case e >= 31:
		return 0x7c00
	}
	return uint16(e)<<10 | uint16(bits>>13&0x3ff)
}

type benchSet struct {
	name   string
	es     int
	raw    []byte
	blob   []byte   // raw encoded (S2)
	chunks [][]byte // raw's chunks shuffled
	enc    [][]byte // each of chunks S2-encoded
}

// benchSets returns the data sets, made before any timing starts: layer12
// of ResNet-50 as float32 and float16 (802,944 and 401,536 bytes) and
// features half as large.
func benchSets() []benchSet {
	sets := []benchSet{
		{name: "float32-800KB", es: 4, raw: activations(802944, 4, 1)},
		{name: "float32-400KB", es: 4, raw: activations(401536, 4, 2)},
		{name: "float16-400KB", es: 2, raw: activations(401536, 2, 3)},
		{name: "float16-200KB", es: 2, raw: activations(200832, 2, 4)},
	}
	for i, s := range sets {
		sets[i].blob, _ = Encode(nil, s.raw, s.es, S2)
		sets[i].chunks = shuffled(s)
		for _, c := range sets[i].chunks {
			sets[i].enc = append(sets[i].enc, s2.Encode(nil, c))
		}
	}
	return sets
}

// reportCPU reports the process's CPU time per operation since c0 (the
// benchmark's one goroutine, and the garbage collector's).
func reportCPU(b *testing.B, c0 time.Duration) {
	if c := cpuTime() - c0; c > 0 && b.N > 0 {
		b.ReportMetric(float64(c.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// forSets runs f as a sub-benchmark per set, bytes counted as the raw
// length.
func forSets(b *testing.B, f func(b *testing.B, s benchSet)) {
	for _, s := range benchSets() {
		b.Run(s.name, func(b *testing.B) {
			b.SetBytes(int64(len(s.raw)))
			b.ReportAllocs()
			c0 := cpuTime()
			f(b, s)
			reportCPU(b, c0)
		})
	}
}

// BenchmarkStepShuffle: the shuffle of every chunk of a feature.
func BenchmarkStepShuffle(b *testing.B) {
	forSets(b, func(b *testing.B, s benchSet) {
		dst := make([]byte, ChunkSize)
		for b.Loop() {
			for off := 0; off < len(s.raw); off += ChunkSize {
				c := s.raw[off:min(off+ChunkSize, len(s.raw))]
				shuffle(dst[:len(c)], c, s.es)
			}
		}
	})
}

// BenchmarkStepUnshuffle: the unshuffle of every chunk of a feature.
func BenchmarkStepUnshuffle(b *testing.B) {
	forSets(b, func(b *testing.B, s benchSet) {
		dst := make([]byte, ChunkSize)
		for b.Loop() {
			for off := 0; off < len(s.raw); off += ChunkSize {
				c := s.raw[off:min(off+ChunkSize, len(s.raw))]
				unshuffle(dst[:len(c)], c, s.es)
			}
		}
	})
}

// shuffled returns s's chunks shuffled.
func shuffled(s benchSet) [][]byte {
	var out [][]byte
	for off := 0; off < len(s.raw); off += ChunkSize {
		c := s.raw[off:min(off+ChunkSize, len(s.raw))]
		d := make([]byte, len(c))
		shuffle(d, c, s.es)
		out = append(out, d)
	}
	return out
}

// BenchmarkStepS2Encode: S2 alone on the shuffled chunks of a feature.
func BenchmarkStepS2Encode(b *testing.B) {
	forSets(b, func(b *testing.B, s benchSet) {
		dst := make([]byte, s2.MaxEncodedLen(ChunkSize))
		n := 0
		for b.Loop() {
			n = 0
			for _, c := range s.chunks {
				n += len(s2.Encode(dst, c))
			}
		}
		b.ReportMetric(float64(len(s.raw))/float64(n), "ratio")
	})
}

// BenchmarkStepS2Decode: S2 alone, decoding the shuffled chunks of a
// feature.
func BenchmarkStepS2Decode(b *testing.B) {
	forSets(b, func(b *testing.B, s benchSet) {
		dst := make([]byte, ChunkSize)
		for b.Loop() {
			for _, e := range s.enc {
				if _, err := s2.Decode(dst, e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkStepCRC: CRC-32C of a feature's chunks.
func BenchmarkStepCRC(b *testing.B) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	forSets(b, func(b *testing.B, s benchSet) {
		for b.Loop() {
			for off := 0; off < len(s.raw); off += ChunkSize {
				crc32.Checksum(s.raw[off:min(off+ChunkSize, len(s.raw))], tab)
			}
		}
	})
}

// BenchmarkEncode: the whole Encode (S2), appending to a buffer with room.
func BenchmarkEncode(b *testing.B) {
	forSets(b, func(b *testing.B, s benchSet) {
		dst := make([]byte, 0, MaxLen(len(s.raw)))
		var blob []byte
		for b.Loop() {
			var err error
			if blob, err = Encode(dst[:0], s.raw, s.es, S2); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(s.raw))/float64(len(blob)), "ratio")
	})
}

// BenchmarkDecode: the whole Decode, appending to a buffer with room.
func BenchmarkDecode(b *testing.B) {
	forSets(b, func(b *testing.B, s benchSet) {
		dst := make([]byte, 0, len(s.raw))
		for b.Loop() {
			if _, err := Decode(dst[:0], s.blob); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadAt: reads of 4 KiB at random page-aligned offsets (bytes
// counted as 4 KiB each) and of 1 MiB from offset 0 (the whole feature).
func BenchmarkReadAt(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, s := range benchSets() {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, s.name), func(b *testing.B) {
				p := make([]byte, size)
				r := rand.New(rand.NewPCG(1, 1))
				b.SetBytes(int64(min(size, len(s.raw))))
				b.ReportAllocs()
				c0 := cpuTime()
				defer reportCPU(b, c0)
				for b.Loop() {
					off := 0
					if size < len(s.raw) {
						off = r.IntN(len(s.raw)/size) * size
					}
					if _, _, err := ReadAt(s.blob, p, int64(off)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkS2Planes: S2 on each byte plane of a feature's shuffled chunks
// on its own (plane 0: the low mantissa bytes of float32, plane 3: sign
// and exponent), with the ratio each gets: whether the near-random low
// planes cost S2 time, and what storing them raw would lose (their zeros
// compress: they are the ReLU's zeros).
func BenchmarkS2Planes(b *testing.B) {
	for _, s := range benchSets()[:3] {
		for p := range s.es {
			var planes [][]byte
			for _, c := range s.chunks {
				n := len(c) / s.es
				planes = append(planes, c[p*n:(p+1)*n])
			}
			b.Run(fmt.Sprintf("%s/plane%d", s.name, p), func(b *testing.B) {
				size := 0
				for _, pl := range planes {
					size += len(pl)
				}
				b.SetBytes(int64(size))
				dst := make([]byte, s2.MaxEncodedLen(ChunkSize))
				out := 0
				c0 := cpuTime()
				for b.Loop() {
					out = 0
					for _, pl := range planes {
						out += len(s2.Encode(dst, pl))
					}
				}
				reportCPU(b, c0)
				b.ReportMetric(float64(size)/float64(out), "ratio")
			})
		}
	}
}
