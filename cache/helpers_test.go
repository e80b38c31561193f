package cache

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// testKey returns a distinct key for n.
func testKey(n int) Key {
	return Key{
		Source:      "s3://bucket",
		Object:      fmt.Sprintf("train/c%d/img%06d.jpg", n%7, n),
		ETag:        fmt.Sprintf("\"etag-%d\"", n),
		ModelDigest: "0123456789abcdef",
		Layer:       "/layer3/layer3.3/relu_2/Relu_output_0",
		Preprocess:  "resize=256,crop=224",
		DType:       "float32",
	}
}

// testValue returns n's value: size bytes derived from n, so a reader can
// check that it got the right bytes for the right key.
func testValue(n, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 0x9e3779b97f4a7c15))
	b := make([]byte, size)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// testSize returns a size for n between 4 KiB and 64 KiB.
func testSize(n int) int {
	return 4<<10 + int(uint64(n)*2654435761%(60<<10))
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openTest(t testing.TB, dir string, maxBytes int64) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, MaxBytes: maxBytes, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func textLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = testenv.SyncBuffer
