package test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
)

// largePrefixObjects is how many objects TestLargePrefix puts under one prefix.
const largePrefixObjects = 10_000

// TestLargePrefix lists a 10,000-object prefix through the mount, in
// reasonable time (a correctness bound, not a benchmark: a mount that
// extracts, fetches or lists per entry would blow it), stats every entry
// without computing anything, and checks that the mount's resident memory
// stays bounded across two full listings.
func TestLargePrefix(t *testing.T) {
	srv, env := minioBucket(t, "big", "", "")
	// The same tiny PNG under every name; uploads run 16 at a time.
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	img.Set(0, 0, color.RGBA{1, 2, 3, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	start := time.Now()
	keys := make(chan string)
	errc := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("big"), Key: aws.String(k),
					Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))})
				cancel()
				if err != nil {
					select {
					case errc <- fmt.Errorf("put %s: %w", k, err):
					default:
					}
				}
			}
		}()
	}
	for i := range largePrefixObjects {
		keys <- fmt.Sprintf("many/obj%05d.png", i)
	}
	close(keys)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	t.Logf("uploaded %d objects in %v", largePrefixObjects, time.Since(start).Round(time.Millisecond))

	// Prefetch off: this test measures listing alone (prefetching 10,000
	// images would keep the CPU busy and grow RSS by the model's sessions).
	m := testMount(t, mountConfig{Source: "s3://big", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off"}})
	dir := filepath.Join(m.Layer(testLayer), "many")
	// Baseline after the mount is up and a first, small lookup.
	if _, err := os.Stat(m.Layer(testLayer)); err != nil {
		t.Fatal(err)
	}
	rss0 := rssBytes(t, m.PID(), "VmRSS")

	wantSize := api.NPYSize(testLayerShape, extractor.Float32)
	listAndStat := func(round int) {
		t0 := time.Now()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("ls %s: %v", dir, err)
		}
		listTime := time.Since(t0)
		if len(entries) != largePrefixObjects {
			t.Fatalf("round %d: ls lists %d entries, want %d", round, len(entries), largePrefixObjects)
		}
		for i, e := range entries {
			if want := fmt.Sprintf("obj%05d.npy", i); e.Name() != want {
				t.Fatalf("round %d: entry %d = %q, want %q (sorted)", round, i, e.Name(), want)
			}
			fi, err := e.Info()
			if err != nil {
				t.Fatalf("stat %s: %v", e.Name(), err)
			}
			if fi.Size() != wantSize {
				t.Fatalf("stat %s: size %d, want %d", e.Name(), fi.Size(), wantSize)
			}
		}
		total := time.Since(t0)
		t.Logf("round %d: ls of %d entries in %v, ls+stat in %v", round, len(entries), listTime.Round(time.Millisecond), total.Round(time.Millisecond))
		if total > 60*time.Second {
			t.Errorf("round %d: listing and stating %d entries took %v, want < 60s", round, largePrefixObjects, total)
		}
	}
	listAndStat(1)
	rss1 := rssBytes(t, m.PID(), "VmRSS")
	listAndStat(2)
	rss2 := rssBytes(t, m.PID(), "VmRSS")
	t.Logf("mount VmRSS: %s at start, %s after one listing, %s after two (VmHWM %s)",
		mib(rss0), mib(rss1), mib(rss2), mib(rssBytes(t, m.PID(), "VmHWM")))
	// 10,000 entries of metadata need a few MiB; allow generous slack for
	// Go's heap growth, but not per-entry buffers or feature data.
	if grow := rss1 - rss0; grow > 192<<20 {
		t.Errorf("listing %d entries grew the mount's RSS by %s, want < 192 MiB", largePrefixObjects, mib(grow))
	}
	if grow := rss2 - rss1; grow > 64<<20 {
		t.Errorf("listing again grew RSS by another %s, want < 64 MiB (memory not bounded)", mib(grow))
	}
	if hwm := rssBytes(t, m.PID(), "VmHWM"); hwm > 2<<30 {
		t.Errorf("mount peak RSS %s, want < 2 GiB", mib(hwm))
	}
	// Reading one of them works (the objects are real images).
	b, err := os.ReadFile(filepath.Join(dir, "obj04321.npy"))
	if err != nil || int64(len(b)) != wantSize {
		t.Errorf("read obj04321.npy: %d bytes, %v", len(b), err)
	}
}
