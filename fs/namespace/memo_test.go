package namespace

import (
	"errors"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// TestSlowFailureKeptForOneRetry: a slow failure answers one retry of each
// failed request (a read within it), then nothing; a quick one is not
// kept; a read done well clears the failure record and keeps the feature.
func TestSlowFailureKeptForOneRetry(t *testing.T) {
	b := fakes.NewBucket(10)
	b.Put("d/a.jpg", []byte("a"))
	ns := newNS(t, b, Config{})
	v := ns.p.NewView(testModel(), testModel().Layers[0])
	k := FileKey{View: v, Key: "d/a.jpg", ETag: "e1"}
	boom := errors.New("the model crashed")

	ns.ReadFailed(k, "d/a.npy", 0, 4096, boom, time.Now())
	if err := ns.Retry(k, 0); err != nil {
		t.Errorf("a quick failure was kept: %v", err)
	}
	ns.ReadFailed(k, "d/a.npy", 0, 128<<10, boom, time.Now().Add(-2*SlowFailure))
	ns.ReadFailed(k, "d/a.npy", 128<<10, 128<<10, boom, time.Now().Add(-2*SlowFailure))
	if err := ns.Retry(k, 4096); !errors.Is(err, boom) {
		t.Errorf("retry within the first failed request: %v, want its error", err)
	}
	if err := ns.Retry(k, 4096); err != nil {
		t.Errorf("a second retry of the same request: %v, want none", err)
	}
	if err := ns.Retry(k, 200<<10); !errors.Is(err, boom) {
		t.Errorf("retry within the second failed request: %v, want its error", err)
	}
	if got := ns.Failures(); len(got.Files) != 1 || got.Files[0].File != "d/a.npy" || got.Files[0].Key != "d/a.jpg" {
		t.Errorf("failures: %+v", got)
	}
	if _, ok := ns.Recent(k); ok {
		t.Error("a failure is served as a recent feature")
	}

	ns.ReadDone(k, "d/a.npy", []byte("feature"))
	if data, ok := ns.Recent(k); !ok || string(data) != "feature" {
		t.Errorf("recent: %q, %v", data, ok)
	}
	if got := ns.Failures(); len(got.Files) != 0 {
		t.Errorf("failures after a good read: %+v", got)
	}
}

// TestCurrentVersion: a read serves the fresh listing's version of its
// object, and a name a fresh complete listing lacks is gone.
func TestCurrentVersion(t *testing.T) {
	b := fakes.NewBucket(10)
	b.Put("d/a.jpg", []byte("a"))
	b.Put("d/b.jpg", []byte("b"))
	ns := newNS(t, b, Config{})
	readDir(t, ns.Namespace, "d/")
	old, err := b.Stat(t.Context(), "d/a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	b.Put("d/a.jpg", []byte("a, edited"))
	b.Del("d/b.jpg")
	if got, ok := ns.CurrentVersion("d/", "a.npy", old); !ok || got.ETag != old.ETag {
		t.Errorf("within the TTL: %+v, %v; want the listed version", got, ok)
	}
	ns.clock.Advance(2 * time.Hour)
	readDir(t, ns.Namespace, "d/")
	if got, ok := ns.CurrentVersion("d/", "a.npy", old); !ok || got.ETag == old.ETag {
		t.Errorf("after a new listing: %+v, %v; want the new version", got, ok)
	}
	if _, ok := ns.CurrentVersion("d/", "b.npy", old); ok {
		t.Error("a name the fresh complete listing lacks is still current")
	}
}
