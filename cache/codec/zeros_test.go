package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestZerosShrinkReLU: the Zeros method stores a ReLU-like feature in about
// (1 - zero share) + 1/32 of its bytes (float32), close to S2, and an
// incompressible one as it is.
func TestZerosShrinkReLU(t *testing.T) {
	raw := relu(1024*14*14, 0.45, 11)
	z, err := Encode(nil, raw, 4, Zeros)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Encode(nil, raw, 4, S2)
	ratioZ, ratioS := float64(len(raw))/float64(len(z)), float64(len(raw))/float64(len(s))
	if ratioZ < 1.5 {
		t.Errorf("zeros: %d -> %d bytes (%.2fx), want >= 1.5x on a feature 45%% zeros", len(raw), len(z), ratioZ)
	}
	t.Logf("45%% zeros: zeros %.2fx, s2 %.2fx", ratioZ, ratioS)
	r := rand.New(rand.NewPCG(3, 3))
	noise := make([]byte, 2*ChunkSize+6)
	for i := range noise {
		noise[i] = byte(r.Uint32()) | 1 // no zero element at all
	}
	b, err := Encode(nil, noise, 4, Zeros)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != MaxLen(len(noise)) {
		t.Errorf("a feature without zeros took %d bytes, want every chunk stored raw (%d)", len(b), MaxLen(len(noise)))
	}
}

// TestZerosChunks checks elideZeros/restoreZeros directly, on every element
// size, zero shares from none to all, and lengths with tails.
func TestZerosChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, es := range []int{1, 2, 4, 8} {
		for _, share := range []float64{0, 0.1, 0.5, 0.9, 1} {
			for _, n := range []int{0, 1, 7, 8, 9, 63, 1000, ChunkSize - 3, ChunkSize} {
				chunk := make([]byte, n)
				for i := 0; i+es <= n; i += es {
					if r.Float64() >= share {
						for j := range es {
							chunk[i+j] = byte(r.Uint32())
						}
						chunk[i+r.IntN(es)] |= 1
					}
				}
				for i := n - n%es; i < n; i++ {
					chunk[i] = byte(r.Uint32())
				}
				enc, ok := elideZeros([]byte("prefix"), chunk, es)
				if string(enc[:6]) != "prefix" {
					t.Fatalf("es %d n %d: the prefix was overwritten", es, n)
				}
				if !ok {
					if len(enc) != 6 {
						t.Fatalf("es %d n %d share %.1f: not ok but appended %d bytes", es, n, share, len(enc)-6)
					}
					continue
				}
				if len(enc)-6 >= n {
					t.Fatalf("es %d n %d: ok with %d bytes, not shorter", es, n, len(enc)-6)
				}
				got := make([]byte, n)
				for i := range got {
					got[i] = 0xAA // restore must overwrite every byte
				}
				if err := restoreZeros(got, enc[6:], es); err != nil {
					t.Fatalf("es %d n %d share %.1f: %v", es, n, share, err)
				}
				if !bytes.Equal(got, chunk) {
					t.Fatalf("es %d n %d share %.1f: round trip differs", es, n, share)
				}
				if share == 1 && n >= 64 && es == 4 && len(enc)-6 > n/32+n%es+1 {
					t.Errorf("an all-zero chunk of %d bytes took %d", n, len(enc)-6)
				}
			}
		}
	}
}

// TestZerosDamage: a stored Zeros chunk whose bitmap and length disagree is
// ErrCorrupt, never wrong bytes (a bit flipped in the values is the CRC's).
func TestZerosDamage(t *testing.T) {
	raw := relu(40000, 0.5, 9)
	b, err := Encode(nil, raw, 4, Zeros)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	first := bl.data
	for _, pos := range []int{first, first + 1, first + 100, len(b) - 1} {
		bad := bytes.Clone(b)
		bad[pos] ^= 0x04
		if _, err := Decode(nil, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("flipping byte %d: %v, want ErrCorrupt", pos, err)
		}
	}
	chunk := raw[:ChunkSize]
	enc, ok := elideZeros(nil, chunk, 4)
	if !ok {
		t.Fatal("a half-zero chunk did not shrink")
	}
	for _, bad := range [][]byte{enc[:len(enc)-1], append(bytes.Clone(enc), 0), enc[:10]} {
		if err := restoreZeros(make([]byte, len(chunk)), bad, 4); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a stored chunk of %d bytes (want %d): %v, want ErrCorrupt", len(bad), len(enc), err)
		}
	}
	odd := make([]byte, 12) // 3 elements: bits 3-7 of the bitmap must be clear
	enc, _ = elideZeros(nil, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}[:12], 4)
	enc = bytes.Clone(enc)
	enc[0] |= 0x80
	if err := restoreZeros(odd, enc, 4); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a bit past the last element: %v, want ErrCorrupt", err)
	}
}

// BenchmarkEncodeMethods and BenchmarkDecodeMethods: S2 against Zeros on
// bench_test.go's activation-like sets (cpu-ns/op: the process's CPU).
func BenchmarkEncodeMethods(b *testing.B) {
	for _, m := range []Method{S2, Zeros} {
		b.Run(m.String(), func(b *testing.B) {
			forSets(b, func(b *testing.B, s benchSet) {
				dst := make([]byte, 0, MaxLen(len(s.raw))+64)
				var blob []byte
				for b.Loop() {
					var err error
					if blob, err = Encode(dst[:0], s.raw, s.es, m); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(s.raw))/float64(len(blob)), "ratio")
			})
		})
	}
}

func BenchmarkDecodeMethods(b *testing.B) {
	for _, m := range []Method{S2, Zeros} {
		b.Run(m.String(), func(b *testing.B) {
			forSets(b, func(b *testing.B, s benchSet) {
				blob, _ := Encode(nil, s.raw, s.es, m)
				dst := make([]byte, 0, len(s.raw))
				for b.Loop() {
					if _, err := Decode(dst[:0], blob); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
