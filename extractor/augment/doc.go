// Package augment draws the parameters of augmented image views: view k of
// an image is torchvision 0.14's training transform
// RandomResizedCrop(size, scale, ratio) then RandomHorizontalFlip(0.5),
// with every random number taken from a counter-based generator seeded by
// (the object's identity, k, seed) instead of torch's global generator, so
// that any host, after any remount, draws the same view, and anyone can
// recompute it from the published Params. It is pure Go (stdlib only);
// extractor.ApplyViewPreprocess turns an image and a Params into the
// model's input. docs/AUGMENT.md describes both for users.
//
// # The generator
//
// A Stream is fully determined by (identity, view, seed); identity is the
// object's key and ETag joined by a zero byte (Identity). Its n-th 64-bit
// word (n = 0, 1, 2, ...) is the first 8 bytes, read little-endian, of
//
//	SHA-256( "featurefs-augment-v1"          20 ASCII bytes, no terminator
//	      || uint64le(len(identity))         length in bytes
//	      || identity                        its bytes
//	      || uint64le(view)                  int64 two's complement
//	      || uint64le(seed)
//	      || uint64le(n) )
//
// In Python: int.from_bytes(hashlib.sha256(b"featurefs-augment-v1" +
// struct.pack("<Q", len(ident)) + ident + struct.pack("<qQQ", view, seed,
// n)).digest()[:8], "little").
//
// Each draw takes the next word w:
//   - Rand, a float32 uniform in [0, 1) (torch.rand(1)): u = (w >> 40) *
//     2^-24, the word's top 24 bits, exact in float32 (torch's float
//     uniform also keeps 24 bits).
//   - Uniform(a, b) (torch.empty(1).uniform_(a, b)): with u as above and
//     fa = float32(a), fb = float32(b), the value
//     float32(float32(u * float32(fb - fa)) + fa): torch's
//     x * (to - from) + from in float32, each operation rounded on its own
//     (no fused multiply-add), as numpy float32 or torch tensor operations
//     compute it. torch's own uniform_ kernel, which GCC contracts, rounds
//     once instead on an AVX2 build: on this project's AVX2 host it
//     equals the fused form on 100000 of 100000 draws and the form
//     above differs from it by one ulp on 25% to 52% of them. The
//     generator is ours, not torch's, so the simpler form is the
//     definition; the values have the same distribution.
//   - Randint(lo, hi) (torch.randint(lo, hi, (1,)), hi > lo): lo + (w mod
//     (hi - lo)), the remainder of the unsigned word, as torch's
//     random_from_to takes it.
//
// # The view's parameters (Draw)
//
// Draw runs torchvision 0.14's RandomResizedCrop.get_params on a W x H
// image with that stream, in its arithmetic:
//
//	area = W * H                          (float64)
//	lr0, lr1 = float32 log(float32(ratio[0])), float32 log(float32(ratio[1]))
//	10 times:
//	  target = area * Uniform(scale[0], scale[1])              (float64)
//	  aspect = float32 exp(Uniform(lr0, lr1))                  (to float64)
//	  w = round(sqrt(target * aspect)), h = round(sqrt(target / aspect))
//	      (float64 sqrt, round half to even as Python's round)
//	  if 0 < w <= W and 0 < h <= H:
//	    top = Randint(0, H - h + 1), left = Randint(0, W - w + 1); done
//	fallback (center crop): in = W / H;
//	  in < min(ratio): w = W, h = round(w / min(ratio))
//	  in > max(ratio): h = H, w = round(h * max(ratio))
//	  else w, h = W, H;  top = (H - h) / 2, left = (W - w) / 2 (floor)
//	then flip = Rand() < 0.5, the draw after the crop's.
//
// float32 log and exp are correctly rounded (the float64 function's
// result rounded to float32). torch.log and torch.exp on a CPU with AVX2
// use SLEEF's 1-ulp functions instead: they agree on the default ratio's
// logs, and torch.exp differs from the correctly rounded exp by one ulp on
// 7% of the 2^24 values the default ratio's draw can take (4% of the calls
// in the test), which changes a box only when sqrt(target * aspect) lies
// within a relative 1e-7 of a half-integer (TestDrawMatchesTorchvision
// counts those calls and finds no box changed). Where torchvision would
// return a 0-pixel fallback box (a ratio range far from the image's
// aspect) Draw returns 1 pixel. CheckRanges says which ranges are valid:
// finite, positive, lower bound first.
package augment
