package augment

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// domain is the first bytes of every hashed block: the generator's name
// and version.
const domain = "featurefs-augment-v1"

// DefaultScale and DefaultRatio are RandomResizedCrop's default ranges:
// the crop's area as a fraction of the image's, and its aspect ratio.
var (
	DefaultScale = [2]float64{0.08, 1.0}
	DefaultRatio = [2]float64{3.0 / 4.0, 4.0 / 3.0}
)

// Tries is how many random boxes get_params tries before its center-crop
// fallback.
const Tries = 10

// Identity returns the identity of an object version: its key and ETag
// joined by a zero byte.
func Identity(key, etag string) string { return key + "\x00" + etag }

// Stream is the counter-based generator of one (identity, view, seed): a
// sequence of 64-bit words, each the SHA-256 of the triple and its
// counter (package doc). Not safe for concurrent use; cheap to create.
type Stream struct {
	prefix []byte // domain, identity and view, seed; the counter follows
	n      uint64
}

// NewStream returns the stream of (identity, view, seed), positioned at
// its first word.
func NewStream(identity string, view int, seed uint64) *Stream {
	b := make([]byte, 0, len(domain)+8+len(identity)+24)
	b = append(b, domain...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(identity)))
	b = append(b, identity...)
	b = binary.LittleEndian.AppendUint64(b, uint64(int64(view)))
	b = binary.LittleEndian.AppendUint64(b, seed)
	return &Stream{prefix: b}
}

// Drawn is how many words the stream has given.
func (s *Stream) Drawn() uint64 { return s.n }

// Uint64 returns the next word.
func (s *Stream) Uint64() uint64 {
	b := binary.LittleEndian.AppendUint64(s.prefix[:len(s.prefix):len(s.prefix)], s.n)
	s.n++
	sum := sha256.Sum256(b)
	return binary.LittleEndian.Uint64(sum[:8])
}

// Rand returns a float32 uniform in [0, 1): the next word's top 24 bits
// times 2^-24, as torch.rand(1).
func (s *Stream) Rand() float32 {
	return float32(s.Uint64()>>40) * (1.0 / (1 << 24))
}

// Uniform returns torch.empty(1).uniform_(a, b) for the next word:
// float32(u*float32(b-a)) + a in float32, each operation rounded.
func (s *Stream) Uniform(a, b float64) float32 {
	fa, fb := float32(a), float32(b)
	d := float32(fb - fa)
	u := s.Rand()
	return float32(float32(u*d) + fa) // the conversions forbid a fused multiply-add
}

// Randint returns torch.randint(lo, hi, (1,)) for the next word: lo +
// word mod (hi - lo). hi <= lo gives lo without drawing.
func (s *Stream) Randint(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + int(s.Uint64()%uint64(hi-lo))
}

// Params are one view's transform, as published beside the view: the crop
// box in source-image pixels, whether it is flipped, the output side, and
// the seed and view index it was drawn from.
type Params struct {
	Top    int    `json:"top"`
	Left   int    `json:"left"`
	Height int    `json:"height"`
	Width  int    `json:"width"`
	Flip   bool   `json:"flip"`
	Size   int    `json:"size"`
	Seed   uint64 `json:"seed"`
	View   int    `json:"view"`
}

// ErrBadRange is matched (errors.Is) by CheckRanges's errors.
var ErrBadRange = errors.New("augment: bad range")

// CheckRanges says whether scale and ratio are ranges Draw takes as
// torchvision does: finite, positive, lower bound <= upper bound (torch's
// uniform_ rejects a reversed range).
func CheckRanges(scale, ratio [2]float64) error {
	for _, r := range []struct {
		name string
		v    [2]float64
	}{{"scale", scale}, {"ratio", ratio}} {
		lo, hi := r.v[0], r.v[1]
		if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) || lo <= 0 || hi <= 0 {
			return fmt.Errorf("%w: %s (%v, %v) must be finite and positive", ErrBadRange, r.name, lo, hi)
		}
		if lo > hi {
			return fmt.Errorf("%w: %s (%v, %v): lower bound above upper", ErrBadRange, r.name, lo, hi)
		}
		if float32(lo) == 0 || math.IsInf(float64(float32(hi)), 0) {
			return fmt.Errorf("%w: %s (%v, %v) out of float32's range", ErrBadRange, r.name, lo, hi)
		}
	}
	return nil
}

// Draw returns view `view`'s parameters for an imgW x imgH image:
// RandomResizedCrop.get_params(scale, ratio) then RandomHorizontalFlip's
// coin, drawn from NewStream(identity, view, seed) (package doc). The box
// lies inside the image and is at least 1 x 1 for any imgW, imgH >= 1 (a
// smaller image gives the empty box, no flip); ranges that CheckRanges
// rejects still give a box inside the image. Draw never panics.
func Draw(identity string, view int, seed uint64, imgW, imgH, size int, scale, ratio [2]float64) Params {
	p, _ := draw(NewStream(identity, view, seed), view, seed, imgW, imgH, size, scale, ratio)
	return p
}

// draw is Draw on stream s; it also returns how many words it took.
func draw(s *Stream, view int, seed uint64, width, height, size int, scale, ratio [2]float64) (Params, uint64) {
	p := Params{Size: size, Seed: seed, View: view}
	if width < 1 || height < 1 {
		return p, 0
	}
	area := float64(int64(width) * int64(height))
	logLo, logHi := log32(ratio[0]), log32(ratio[1])
	fw, fh := float64(width), float64(height)
	for try := 0; try < Tries; try++ {
		target := area * float64(s.Uniform(scale[0], scale[1]))
		aspect := float64(exp32(s.Uniform(float64(logLo), float64(logHi))))
		w := math.RoundToEven(math.Sqrt(target * aspect))
		h := math.RoundToEven(math.Sqrt(target / aspect))
		// NaN fails both comparisons, as it would fail Python's.
		if 0 < w && w <= fw && 0 < h && h <= fh {
			p.Width, p.Height = int(w), int(h)
			p.Top = s.Randint(0, height-p.Height+1)
			p.Left = s.Randint(0, width-p.Width+1)
			p.Flip = s.Rand() < 0.5
			return p, s.Drawn()
		}
	}
	// Fallback to the central crop.
	rmin, rmax := min(ratio[0], ratio[1]), max(ratio[0], ratio[1])
	in := fw / fh
	w, h := width, height
	switch {
	case in < rmin:
		h = clampSide(math.RoundToEven(fw/rmin), height)
	case in > rmax:
		w = clampSide(math.RoundToEven(fh*rmax), width)
	}
	p.Top, p.Left, p.Height, p.Width = (height-h)/2, (width-w)/2, h, w
	p.Flip = s.Rand() < 0.5
	return p, s.Drawn()
}

// clampSide converts a rounded side length to an int in [1, limit]:
// torchvision's fallback can round to 0 for ranges far from the image's
// aspect (and NaN for invalid ranges); a box keeps at least one pixel.
func clampSide(v float64, limit int) int {
	if !(v >= 1) {
		return 1
	}
	if v >= float64(limit) {
		return limit
	}
	return int(v)
}

// log32 is torch.log(torch.tensor(x)) for a float: x rounded to float32,
// its natural log correctly rounded to float32.
func log32(x float64) float32 { return float32(math.Log(float64(float32(x)))) }

// exp32 is the float32 exp, correctly rounded (package doc).
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }
