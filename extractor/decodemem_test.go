package extractor

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDecodeCost checks the estimate against what image/png allocates for
// each kind of PNG (bytes per pixel of its image type, plus the RGB copy)
// and that a baseline JPEG costs its RGB rows, a progressive one also its
// coefficients.
func TestDecodeCost(t *testing.T) {
	const w, h = 40, 30
	px := int64(w * h)
	nrgba64 := image.NewNRGBA64(image.Rect(0, 0, w, h))
	nrgba64.Set(1, 1, color.NRGBA64{R: 1, A: 2})
	pal := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.Black, color.White})
	for _, c := range []struct {
		name string
		img  image.Image
		bpp  int64 // image/png's bytes per pixel, at least
	}{
		{"nrgba64", nrgba64, 8},
		{"gray16", image.NewGray16(image.Rect(0, 0, w, h)), 2},
		{"nrgba", image.NewNRGBA(image.Rect(0, 0, w, h)), 4},
		{"paletted", pal, 1},
	} {
		data := encodePNG(t, c.img)
		got := decodeCost(data, "png", w, h, 1)
		if min := px*(c.bpp+3) + decodeSlack; got < min {
			t.Errorf("%s: cost %d < %d", c.name, got, min)
		}
		dec, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: decodes to %T, cost %d bytes for %d pixels", c.name, dec, got, px)
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewRGBA(image.Rect(0, 0, w, h)), nil); err != nil {
		t.Fatal(err)
	}
	if p, comps := jpegSOF(b.Bytes()); p || comps != 3 {
		t.Errorf("baseline JPEG: progressive %v, %d components", p, comps)
	}
	if got, want := decodeCost(b.Bytes(), "jpeg", w, h, 1), 3*px+decodeSlack; got != want {
		t.Errorf("baseline JPEG cost %d, want %d", got, want)
	}
	prog := bytes.Replace(b.Bytes(), []byte{0xff, 0xc0}, []byte{0xff, 0xc2}, 1)
	if got, want := decodeCost(prog, "jpeg", w, h, 1), 3*px+6*px+decodeSlack; got != want {
		t.Errorf("progressive JPEG cost %d, want %d", got, want)
	}
	if p, comps := jpegSOF([]byte{0xff, 0xd8, 0xff}); !p || comps != 4 {
		t.Errorf("unreadable header: progressive %v, %d components; want the costliest", p, comps)
	}
}

// TestDecodeBudget checks that holders never exceed the budget, that a
// cost larger than the budget takes all of it (and still runs), that a
// waiter gives up with its context, and that the heap is freed once, when
// the budget has gone idle after the burst of large decodes.
func TestDecodeBudget(t *testing.T) {
	b := newDecodeBudget(100 << 20)
	var frees atomic.Int32
	b.free = func() { frees.Add(1) }

	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			cost := int64(30+10*(i%4)) << 20
			if i == 7 {
				cost = 1 << 40 // larger than the budget: decoded alone
			}
			n, err := b.acquire(context.Background(), cost)
			if err != nil {
				t.Error(err)
				return
			}
			now := held.Add(n)
			for {
				p := peak.Load()
				if now <= p || peak.CompareAndSwap(p, now) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			held.Add(-n)
			b.release(n, cost)
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 100<<20 {
		t.Errorf("peak held %d bytes, budget %d", p, 100<<20)
	}

	n, err := b.acquire(context.Background(), 1<<40)
	if err != nil || n != 100<<20 {
		t.Fatalf("acquire more than the budget: %d, %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("acquire on a full budget: %v, want the context's error", err)
	}
	b.release(n, 1<<40)

	deadline := time.Now().Add(3 * freeAfter)
	for frees.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if frees.Load() == 0 {
		t.Error("the heap was not freed after the budget went idle")
	}
	if f := frees.Load(); f != 1 {
		t.Errorf("freed %d times after one burst, want once", f)
	}
}
