package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// relu returns n float32s, a share of them exactly zero and the rest
// positive, as a ReLU layer's output is, with a .npy-like 128-byte header:
// the zeros come in runs (a ReLU zeroes regions of a feature map, and whole
// channels), of 1 to 64 values.
func relu(n int, zeros float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 128+4*n)
	copy(b, "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1024, 14, 14), }")
	for i := 0; i < n; {
		run := 1 + r.IntN(64)
		zero := r.Float64() < zeros
		for ; run > 0 && i < n; run, i = run-1, i+1 {
			v := float32(0)
			if !zero {
				v = float32(r.ExpFloat64())
			}
			binary.LittleEndian.PutUint32(b[128+4*i:], math.Float32bits(v))
		}
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	random := make([]byte, 3*ChunkSize+11)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	cases := map[string][]byte{
		"empty":                   nil,
		"one byte":                {42},
		"relu float32":            relu(1024*14*14, 0.36, 1),
		"relu, odd length":        relu(1000, 0.5, 2)[:4003],
		"zeros":                   make([]byte, 5*ChunkSize),
		"random (incompressible)": random,
		"exactly one chunk":       relu(ChunkSize/4-32, 0.3, 3),
	}
	for name, raw := range cases {
		for _, es := range []int{1, 2, 4, 8, 3} {
			for _, l := range []Method{S2, ZstdFastest, ZstdDefault, Zeros} {
				b, err := Encode(nil, raw, es, l)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got, err := Decode(nil, b)
				if err != nil || !bytes.Equal(got, raw) {
					t.Fatalf("%s, element size %d, level %v: round trip: %v", name, es, l, err)
				}
				if n, err := RawLen(b); err != nil || n != len(raw) {
					t.Fatalf("%s: RawLen %d, %v", name, n, err)
				}
			}
		}
	}
	// Incompressible chunks are stored as they are: the blob is at most
	// the raw bytes plus the header and table.
	b, _ := Encode(nil, random, 4, S2)
	if over := len(b) - len(random); over > headerLen+entryLen*4 {
		t.Errorf("random bytes grew by %d", over)
	}
	// Appends to dst.
	b2, _ := Encode([]byte("prefix"), cases["relu float32"], 4, S2)
	if !bytes.HasPrefix(b2, []byte("prefix")) {
		t.Error("Encode did not append to dst")
	}
	if got, err := Decode([]byte("x"), b2[6:]); err != nil || !bytes.Equal(got[1:], cases["relu float32"]) || got[0] != 'x' {
		t.Error("Decode did not append to dst")
	}
}

func TestReLUFeaturesShrink(t *testing.T) {
	raw := relu(1024*14*14, 0.36, 4)
	b, err := Encode(nil, raw, 4, S2)
	if err != nil {
		t.Fatal(err)
	}
	// Synthetic ReLU output: 36% zeros and exponential values; measured
	// features are in docs/bench/codec.md. A codec that stopped
	// shuffling or compressing would fail this.
	ratio := float64(len(raw)) / float64(len(b))
	if ratio < 1.3 {
		t.Errorf("ratio %.2f for ReLU-like float32, want at least 1.3", ratio)
	}
	// The shuffle is what makes the exponent bytes compress.
	plain, _ := Encode(nil, raw, 1, S2)
	if r1 := float64(len(raw)) / float64(len(plain)); r1 >= ratio {
		t.Errorf("ratio %.2f unshuffled, %.2f shuffled by 4 bytes: the shuffle should help", r1, ratio)
	}
}

func TestShuffle(t *testing.T) {
	src := []byte{0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23, 99}
	dst := make([]byte, len(src))
	shuffle(dst, src, 4)
	if want := []byte{0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23, 99}; !bytes.Equal(dst, want) {
		t.Fatalf("shuffle = %v, want %v", dst, want)
	}
	back := make([]byte, len(src))
	unshuffle(back, dst, 4)
	if !bytes.Equal(back, src) {
		t.Fatalf("unshuffle = %v, want %v", back, src)
	}
	shuffle(dst, src, 2)
	if want := []byte{0, 2, 10, 12, 20, 22, 1, 3, 11, 13, 21, 23, 99}; !bytes.Equal(dst, want) {
		t.Fatalf("shuffle by 2 = %v, want %v", dst, want)
	}
	// Every element size, every tail length.
	for _, es := range []int{1, 2, 3, 4, 8} {
		for n := range 20 {
			src := relu(8, 0.3, uint64(n))[:n+100]
			d, b := make([]byte, len(src)), make([]byte, len(src))
			shuffle(d, src, es)
			unshuffle(b, d, es)
			if !bytes.Equal(b, src) {
				t.Fatalf("element size %d, %d bytes: unshuffle(shuffle(x)) != x", es, len(src))
			}
		}
	}
}

func TestReadAt(t *testing.T) {
	raw := relu(1024*14*14, 0.36, 5)
	b, _ := Encode(nil, raw, 4, S2)
	for _, rg := range [][2]int{{0, 1}, {0, 4096}, {ChunkSize - 3, 10}, {ChunkSize, ChunkSize}, {100, 5 * ChunkSize},
		{len(raw) - 1, 100}, {len(raw), 10}, {len(raw) + 7, 1}, {0, len(raw) + 100}} {
		p := make([]byte, rg[1])
		n, size, err := ReadAt(b, p, int64(rg[0]))
		want := raw[min(rg[0], len(raw)):min(rg[0]+rg[1], len(raw))]
		if err != nil || size != len(raw) || !bytes.Equal(p[:n], want) {
			t.Fatalf("ReadAt(%d, %d) = %d, %d, %v; want %d bytes", rg[0], rg[1], n, size, err, len(want))
		}
	}
}

func TestDamageIsAnError(t *testing.T) {
	raw := relu(40000, 0.36, 6)
	b, _ := Encode(nil, raw, 4, S2)
	for _, pos := range []int{0, 4, 5, 8, 12, headerLen, headerLen + 4, headerLen + 8, len(b) / 2, len(b) - 1} {
		bad := bytes.Clone(b)
		bad[pos] ^= 0x10
		if got, err := Decode(nil, bad); err == nil {
			t.Errorf("flipping byte %d of %d: decoded %d bytes without an error (equal: %v)", pos, len(b), len(got), bytes.Equal(got, raw))
		} else if !errors.Is(err, ErrCorrupt) {
			t.Errorf("flipping byte %d: %v, want ErrCorrupt", pos, err)
		}
	}
	if _, err := Decode(nil, b[:len(b)-1]); err == nil {
		t.Error("a truncated blob decoded")
	}
	if _, err := Decode(nil, append(bytes.Clone(b), 0)); err == nil {
		t.Error("a blob with a trailing byte decoded")
	}
	// A damaged last chunk: reads of the first chunk still succeed.
	bad := bytes.Clone(b)
	bad[len(bad)-1] ^= 0x10
	p := make([]byte, 100)
	if _, _, err := ReadAt(bad, p, 0); err != nil {
		t.Errorf("read of an intact chunk of a damaged blob: %v", err)
	}
	if _, _, err := ReadAt(bad, p, int64(len(raw)-50)); err == nil {
		t.Error("read of a damaged chunk succeeded")
	}
}

func FuzzDecode(f *testing.F) {
	small, _ := Encode(nil, relu(100, 0.3, 1), 4, S2)
	two, _ := Encode(nil, relu(ChunkSize/4+10, 0.3, 2), 2, S2)
	f.Add(small)
	f.Add(two)
	zs, _ := Encode(nil, relu(100, 0.5, 1), 4, Zeros)
	f.Add(zs)
	f.Add([]byte("FFZ1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, err := Decode(nil, b)
		if err != nil {
			return
		}
		p := make([]byte, 9)
		for _, off := range []int{0, len(raw) / 3, max(len(raw)-4, 0)} {
			n, size, err := ReadAt(b, p, int64(off))
			if err != nil || size != len(raw) || !bytes.Equal(p[:n], raw[off:min(off+9, len(raw))]) {
				t.Fatalf("ReadAt at %d of a blob Decode accepts: %v", off, err)
			}
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), uint8(4))
	f.Add(relu(300, 0.5, 3), uint8(4))
	f.Add([]byte("hello\x00\x00\x00\x00world"), uint8(4))
	f.Fuzz(func(t *testing.T, raw []byte, es uint8) {
		for _, m := range []Method{S2, Zeros} {
			b, err := Encode(nil, raw, int(es%9), m)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxLen(len(raw)) {
				t.Fatalf("%s: blob of %d raw bytes takes %d, MaxLen says at most %d", m, len(raw), len(b), MaxLen(len(raw)))
			}
			got, err := Decode(nil, b)
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("%s: round trip of %d bytes, element size %d: %v", m, len(raw), es%9, err)
			}
		}
	})
}

// TestHotPathAllocs: Encode, Decode and ReadAt allocate nothing when dst
// has room (scratch buffers come from a pool).
func TestHotPathAllocs(t *testing.T) {
	if raceOn {
		t.Skip("under -race sync.Pool drops buffers on purpose; counted without -race")
	}
	raw := relu(1024*14*14, 0.36, 8)
	blob, _ := Encode(nil, raw, 4, S2)
	enc := make([]byte, 0, MaxLen(len(raw)))
	out := make([]byte, 0, len(raw))
	page, whole := make([]byte, 4096), make([]byte, 1<<20)
	for name, f := range map[string]func(){
		"Encode":               func() { _, _ = Encode(enc, raw, 4, S2) },
		"Decode":               func() { _, _ = Decode(out, blob) },
		"ReadAt of 4 KiB":      func() { _, _, _ = ReadAt(blob, page, 3*ChunkSize+100) },
		"ReadAt of everything": func() { _, _, _ = ReadAt(blob, whole, 0) },
	} {
		if n := testing.AllocsPerRun(20, f); n != 0 {
			t.Errorf("%s: %.0f allocations per call, want 0", name, n)
		}
	}
}

// TestReadAtWholeChunksDamaged: a read that decodes whole chunks straight
// into p still fails on a damaged chunk.
func TestReadAtWholeChunksDamaged(t *testing.T) {
	raw := relu(3*ChunkSize/4, 0.36, 9)
	b, _ := Encode(nil, raw, 4, S2)
	bad := bytes.Clone(b)
	bad[len(bad)-ChunkSize/4] ^= 0x10 // inside the last chunk
	p := make([]byte, len(raw))
	if _, _, err := ReadAt(bad, p, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a whole read of a damaged blob: %v, want ErrCorrupt", err)
	}
	if n, _, err := ReadAt(bad, p[:2*ChunkSize], 0); err != nil || !bytes.Equal(p[:n], raw[:2*ChunkSize]) {
		t.Errorf("a read of the intact whole chunks: %d, %v", n, err)
	}
}
