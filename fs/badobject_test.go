package fs

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBadObjectIsEIOOnlyForItAndNotRetriedWithinTTL(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/good.jpg", []byte("good"))
	b.put("d/bad.jpg", []byte("BAD: not a jpeg"))
	b.put("d/huge.png", make([]byte, 4096))
	e := testMount(t, b, func(c *testConfig) { c.MaxObjectSize = 1024 })
	bad := e.path("features", "tiny", "layer1", "d", "bad.npy")

	// It lists and stats like any other.
	if got := names(t, e.path("features", "tiny", "layer1", "d")); !same(got, []string{"bad.npy", "good.npy", "huge.npy"}) {
		t.Fatalf("listing = %q", got)
	}
	if _, err := os.Stat(bad); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := os.ReadFile(bad); !errors.Is(err, syscall.EIO) {
			t.Fatalf("read %d of bad.npy: %v, want EIO", i, err)
		}
	}
	// Another layer of the same object fails at once too.
	if _, err := os.ReadFile(e.path("features", "tiny", "layer2", "d", "bad.npy")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("layer2 bad.npy: %v, want EIO", err)
	}
	if n := e.x.CallsFor("d/bad.jpg"); n != 1 {
		t.Errorf("bad object extracted %d times within the negative TTL, want 1", n)
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "d", "huge.npy")); !errors.Is(err, syscall.EIO) {
		t.Errorf("too large: %v, want EIO", err)
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "d", "good.npy")); err != nil {
		t.Errorf("good object next to a bad one: %v", err)
	}
	logs := e.logs.String()
	if c := strings.Count(logs, "key=d/bad.jpg"); c != 1 {
		t.Errorf("bad object logged %d times, want once:\n%s", c, logs)
	}
	if !strings.Contains(logs, "not an image") || !strings.Contains(logs, "key=d/huge.png") {
		t.Errorf("log lacks the reason or the too-large key:\n%s", logs)
	}
	st := e.fs.Stats()
	if st.FS.BadObjects != 2 || st.FS.BadObjectHits < 3 || len(st.RecentErrors) == 0 {
		t.Errorf("stats: %+v", st.FS)
	}

	// Past the negative TTL it is tried again (and is still bad), without
	// logging again.
	e.clock.Advance(6 * time.Minute)
	if _, err := os.ReadFile(bad); !errors.Is(err, syscall.EIO) {
		t.Fatalf("after TTL: %v, want EIO", err)
	}
	if n := e.x.CallsFor("d/bad.jpg"); n != 2 {
		t.Errorf("after the negative TTL: %d extractions, want 2", n)
	}
	if c := strings.Count(e.logs.String(), "key=d/bad.jpg"); c != 1 {
		t.Errorf("bad object logged %d times, want once", c)
	}
}
