package codec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// refShuffle is the shuffle byte by byte, the definition the fast paths
// must match.
func refShuffle(src []byte, es int) []byte {
	n := len(src) / es
	dst := make([]byte, len(src))
	for i := range n {
		for b := range es {
			dst[b*n+i] = src[i*es+b]
		}
	}
	copy(dst[n*es:], src[n*es:])
	return dst
}

// TestShufflePaths checks the pure-Go and the assembly shuffles (where this
// CPU has them) against the byte loop, and their reverses, on random bytes
// of random lengths: every tail of elements a fast step leaves and every
// tail shorter than an element.
func TestShufflePaths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	lengths := []int{0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, ChunkSize, ChunkSize - 1, ChunkSize - 130}
	for range 300 {
		lengths = append(lengths, r.IntN(3000))
	}
	for _, es := range []int{1, 2, 3, 4, 8} {
		for _, l := range lengths {
			src := make([]byte, l)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			want := refShuffle(src, es)
			for _, asm := range []bool{false, true} {
				got := make([]byte, l+5) // dst longer than src: only len(src) is written
				for i := range got {
					got[i] = 0xee
				}
				shuffleWith(got, src, es, asm)
				if !bytes.Equal(got[:l], want) || !bytes.Equal(got[l:], []byte{0xee, 0xee, 0xee, 0xee, 0xee}) {
					t.Fatalf("element size %d, %d bytes, asm %v: shuffle differs from the byte loop", es, l, asm)
				}
				back := make([]byte, l)
				unshuffleWith(back, want, es, asm)
				if !bytes.Equal(back, src) {
					t.Fatalf("element size %d, %d bytes, asm %v: unshuffle differs from the byte loop", es, l, asm)
				}
			}
		}
	}
}

// TestShuffleFastPathsRun checks that the word-at-a-time steps take the
// bulk of a chunk (a fast path that silently did nothing would leave it
// all to the byte loop, and TestShufflePaths would still pass), and the
// assembly where the CPU has SSSE3.
func TestShuffleFastPathsRun(t *testing.T) {
	src := make([]byte, 1000*8+3)
	dst := make([]byte, len(src))
	for _, c := range []struct {
		es int
		f  func(dst, src []byte, n, i int) int
	}{{2, shuffle2Go}, {2, unshuffle2Go}, {4, shuffle4Go}, {4, unshuffle4Go}} {
		n := len(src) / c.es
		if got := c.f(dst, src, n, 0); got != n&^7 {
			t.Errorf("element size %d: the word step did %d of %d elements", c.es, got, n)
		}
	}
	if got := transpose8Go(dst, src, 1000, 0, true); got != 1000 {
		t.Errorf("transpose8Go did %d of 1000 elements", got)
	}
	if useAsm {
		for _, es := range []int{2, 4} {
			n := len(src) / es
			if got := shuffleAsm(dst, src, es, n); got != n&^15 {
				t.Errorf("element size %d: the assembly shuffle did %d of %d elements", es, got, n)
			}
			if got := unshuffleAsm(dst, src, es, n); got != n&^15 {
				t.Errorf("element size %d: the assembly unshuffle did %d of %d elements", es, got, n)
			}
		}
	}
}

// BenchmarkShufflePath: each path on its own on a 64 KiB chunk of
// activations (bytes: the byte loop; go: the word-at-a-time pure Go; asm:
// what shuffle uses on this CPU).
func BenchmarkShufflePath(b *testing.B) {
	for _, es := range []int{2, 4, 8} {
		src := activations(ChunkSize+128, min(es, 4), 5)[128:]
		dst := make([]byte, len(src))
		n := len(src) / es
		paths := []struct {
			name string
			f    func()
		}{
			{"bytes", func() { shuffleBytes(dst, src, es, n, 0) }},
			{"go", func() { shuffleWith(dst, src, es, false) }},
			{"asm", func() { shuffleWith(dst, src, es, useAsm) }},
			{"unshuffle-bytes", func() { unshuffleBytes(dst, src, es, n, 0) }},
			{"unshuffle-go", func() { unshuffleWith(dst, src, es, false) }},
			{"unshuffle-asm", func() { unshuffleWith(dst, src, es, useAsm) }},
		}
		for _, p := range paths {
			b.Run(fmt.Sprintf("%d/%s", es, p.name), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					p.f()
				}
			})
		}
	}
}
