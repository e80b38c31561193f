package test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/test/testenv"
)

// Issue 36, item 2: an archive replaced by a rename (same member names,
// other images) serves the new archive's member features once the change
// is seen, as a replaced loose object does: a reader looping on
// good/k1.npy, with no ls, reads the new feature within the metadata TTL
// and a few seconds, and never the old one after.

// swapTTL is the metadata TTL of the swap tests' mounts; swapBound is how
// long after the swap the new feature must read (the TTL, a path walk's
// relisting and the new feature's extraction on a loaded machine).
const (
	swapTTL   = 2 * time.Second
	swapBound = swapTTL + 6*time.Second
)

// archiveSwap is good.tar twice: old (k1.jpg one image, k1.cls "0") and
// new (k1.jpg another image, k1.cls "1"), and the new image's feature at
// testLayer as featurefs extract computes it.
type archiveSwap struct {
	oldTar, newTar []byte
	refNew         npyFile
}

func newArchiveSwap(t *testing.T) *archiveSwap {
	t.Helper()
	d := genDataset(t, "--classes", "1", "--train", "2", "--val", "0")
	imgs := d.images("train/")
	a := filepath.Join(d.Dir, filepath.FromSlash(imgs[0].Key))
	b := filepath.Join(d.Dir, filepath.FromSlash(imgs[1].Key))
	ab, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return &archiveSwap{
		oldTar: packTar(t, map[string][]byte{"k1.jpg": ab, "k1.cls": []byte("0")}),
		newTar: packTar(t, map[string][]byte{"k1.jpg": bb, "k1.cls": []byte("1")}),
		refNew: extractRef(t, testLayer, map[string]string{"new": b})["new"],
	}
}

// renameInto replaces dir/good.tar with data as a user does: written to
// dir/.tmp.tar, renamed over it.
func renameInto(t *testing.T, dir string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp.tar")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "good.tar")); err != nil {
		t.Fatal(err)
	}
}

// checkSwap reads p (good/k1.npy under a layer) until it reads, then
// starts a reader reading it in a loop (plain reads, through the page
// cache), calls swap, and checks that the new archive's feature (equal
// to s.refNew) reads within swapBound of it and that no read after the
// first new one returns the old bytes. It returns how long the new
// feature took to show.
func (s *archiveSwap) checkSwap(t *testing.T, p string, swap func()) time.Duration {
	t.Helper()
	return s.checkSwapRead(t, p, func() ([]byte, error) { return os.ReadFile(p) }, swap)
}

// checkSwapRead is checkSwap with the reads made by read (p names them).
func (s *archiveSwap) checkSwapRead(t *testing.T, p string, read func() ([]byte, error), swap func()) time.Duration {
	t.Helper()
	old, err := read()
	if err != nil {
		t.Fatal(err)
	}
	var (
		reads, oldAfter, failed atomic.Int64
		stop                    atomic.Bool
		mu                      sync.Mutex
		newAt                   time.Time // GUARDED_BY(mu): the first new read
		newBytes                []byte    // GUARDED_BY(mu)
		wg                      sync.WaitGroup
	)
	var swapped time.Time
	wg.Go(func() {
		for !stop.Load() {
			b, err := read()
			reads.Add(1)
			if err != nil {
				if failed.Add(1) <= 3 {
					t.Errorf("read %s: %v", p, err)
				}
				continue
			}
			mu.Lock()
			switch {
			case bytes.Equal(b, old):
				if newBytes != nil {
					oldAfter.Add(1)
				}
			case newBytes == nil:
				newAt, newBytes = time.Now(), b
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})
	time.Sleep(100 * time.Millisecond)
	swapped = time.Now()
	swap()
	deadline := swapped.Add(swapBound)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := newBytes != nil
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // reads after the first new one
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if newBytes == nil {
		t.Fatalf("%s: %d reads, all of the old archive's feature, %v after the archive was replaced (metadata TTL %v)",
			p, reads.Load(), time.Since(swapped).Round(time.Millisecond), swapTTL)
	}
	took := newAt.Sub(swapped)
	got, err := parseNPY(newBytes)
	if err != nil {
		t.Fatal(err)
	}
	if diff, ok := closeEnough(got.Data, s.refNew.Data); !ok {
		t.Errorf("%s after the swap: not the new image's feature (max |diff| %g against featurefs extract)", p, diff)
	}
	if n := oldAfter.Load(); n > 0 {
		t.Errorf("%s: %d reads returned the old archive's feature after the new one had been read", p, n)
	}
	if took > swapBound {
		t.Errorf("%s: the new archive's feature read %v after the swap, want within %v", p, took.Round(time.Millisecond), swapBound)
	}
	t.Logf("%s: the new archive's feature read %v after the swap (metadata TTL %v), %d reads", p, took.Round(time.Millisecond), swapTTL, reads.Load())
	return took
}

// checkLabel reads good/k1.cls under layer dir of m: want.
func checkLabel(t *testing.T, layerDir, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(layerDir, "good", "k1.cls"))
	if err != nil || string(b) != want {
		t.Errorf("good/k1.cls = %q, %v; want %q", b, err, want)
	}
}

// TestReplacedArchiveServesNewMembers: a local-directory source and a
// MinIO bucket, each through a kernel mount with --metadata-ttl 2s.
func TestReplacedArchiveServesNewMembers(t *testing.T) {
	s := newArchiveSwap(t)
	ttl := []string{"--metadata-ttl", swapTTL.String(), "--prefetch", "off"}

	t.Run("local", func(t *testing.T) {
		src := t.TempDir()
		renameInto(t, src, s.oldTar)
		m := testMount(t, mountConfig{Source: src, Args: ttl})
		s.checkSwap(t, filepath.Join(m.Layer(testLayer), "good", "k1.npy"), func() { renameInto(t, src, s.newTar) })
		checkLabel(t, m.Layer(testLayer), "1")
	})

	t.Run("minio", func(t *testing.T) {
		src := t.TempDir()
		srv, env := minioBucket(t, "swap", "", src)
		srv.Put(t, "swap", "good.tar", s.oldTar)
		m := testMount(t, mountConfig{Source: "s3://swap", Env: env, Args: append([]string{"--endpoint-url", srv.Endpoint}, ttl...)})
		s.checkSwap(t, filepath.Join(m.Layer(testLayer), "good", "k1.npy"), func() { srv.Put(t, "swap", "good.tar", s.newTar) })
		checkLabel(t, m.Layer(testLayer), "1")
	})

	// A reader that opens k1.npy relative to good/ (openat on a descriptor
	// of the directory: no path walk through good's entry, so nothing
	// looks good up again) and one ls of good/ after the TTL, through a
	// new descriptor of "." (no lookup either): that listing alone must
	// bring the new archive's feature.
	t.Run("openat-ls", func(t *testing.T) {
		src := t.TempDir()
		renameInto(t, src, s.oldTar)
		m := testMount(t, mountConfig{Source: src, Args: ttl})
		dir := filepath.Join(m.Layer(testLayer), "good")
		dfd, err := retryEINTR(func() (int, error) { return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0) })
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(dfd)
		openAt := func(name string, flags int) (*os.File, error) {
			fd, err := retryEINTR(func() (int, error) { return unix.Openat(dfd, name, flags|unix.O_RDONLY, 0) })
			if err != nil {
				return nil, err
			}
			return os.NewFile(uintptr(fd), filepath.Join(dir, name)), nil
		}
		read := func() ([]byte, error) {
			f, err := openAt("k1.npy", 0)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return io.ReadAll(f)
		}
		var lsDone sync.WaitGroup
		defer lsDone.Wait()
		s.checkSwapRead(t, filepath.Join(dir, "k1.npy"), read, func() {
			renameInto(t, src, s.newTar)
			lsDone.Go(func() {
				time.Sleep(swapTTL + swapTTL/4)
				d, err := openAt(".", unix.O_DIRECTORY)
				if err != nil {
					t.Errorf("open good/.: %v", err)
					return
				}
				defer d.Close()
				if names, err := d.Readdirnames(-1); err != nil || !slices.Contains(names, "k1.npy") {
					t.Errorf("ls good/: %q, %v", names, err)
				}
			})
		})
	})

	// A mount whose model file was replaced (by a rename) twice before the
	// archive is: its layer directories serve a reloaded version.
	t.Run("after-reloads", func(t *testing.T) {
		versions := testenv.ModelVersions(t)
		modelPath := filepath.Join(t.TempDir(), "model.onnx")
		replaceFile(t, filepath.Join(versions, "base.onnx"), modelPath, true)
		src := t.TempDir()
		renameInto(t, src, s.oldTar)
		m := testMount(t, mountConfig{Source: src, Model: modelPath, Args: ttl})
		p := filepath.Join(m.Layer(testLayer), "good", "k1.npy")
		for i, v := range []string{"layer4fc.onnx", "base.onnx"} {
			if _, err := os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
			replaceFile(t, filepath.Join(versions, v), modelPath, true)
			waitLog(t, m, "model replaced", i+1)
		}
		s.checkSwap(t, p, func() { renameInto(t, src, s.newTar) })
	})
}

// TestReplacedArchiveServesNewMembersRemote: the same through `featurefs
// serve` over a local directory and `featurefs mount --remote`.
func TestReplacedArchiveServesNewMembersRemote(t *testing.T) {
	s := newArchiveSwap(t)
	src := t.TempDir()
	renameInto(t, src, s.oldTar)
	srv := startServe(t, src, nil)
	m := testMount(t, mountConfig{Args: srv.remoteArgs("--metadata-ttl", swapTTL.String(), "--prefetch", "off"), NoModel: true})
	s.checkSwap(t, filepath.Join(m.Layer(testLayer), "good", "k1.npy"), func() { renameInto(t, src, s.newTar) })
	checkLabel(t, m.Layer(testLayer), "1")
}

// TestReplacedArchiveNotFromStaleFeatureStore: a mount with a feature
// store over MinIO stores the old member's feature; after the archive is
// replaced, neither that mount nor a fresh one sharing the store serves
// the stored feature of the old member.
func TestReplacedArchiveNotFromStaleFeatureStore(t *testing.T) {
	s := newArchiveSwap(t)
	srv, env := minioBucket(t, "swapstore", "", t.TempDir())
	srv.CreateBucket(t, "features")
	srv.Put(t, "swapstore", "good.tar", s.oldTar)
	args := []string{"--endpoint-url", srv.Endpoint, "--feature-store", "s3://features/shared",
		"--metadata-ttl", swapTTL.String(), "--prefetch", "off"}
	a := testMount(t, mountConfig{Source: "s3://swapstore", Env: env, Args: args})
	pa := filepath.Join(a.Layer(testLayer), "good", "k1.npy")
	old, err := os.ReadFile(pa)
	if err != nil {
		t.Fatal(err)
	}
	waitStoreField(t, a, "puts", 1)
	s.checkSwap(t, pa, func() { srv.Put(t, "swapstore", "good.tar", s.newTar) })

	b := testMount(t, mountConfig{Source: "s3://swapstore", Env: env, Args: args})
	got, err := os.ReadFile(filepath.Join(b.Layer(testLayer), "good", "k1.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, old) {
		t.Fatalf("a fresh mount sharing the feature store read the replaced archive's old member feature")
	}
	f, err := parseNPY(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff, ok := closeEnough(f.Data, s.refNew.Data); !ok {
		t.Errorf("a fresh mount sharing the feature store: not the new image's feature (max |diff| %g against featurefs extract)", diff)
	}
}
