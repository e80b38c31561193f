package test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestOutageBoundsEveryOperation times every kind of operation through a
// real mount while MinIO is stalled (SIGSTOP: connections open, nothing
// answers) and while it is stopped (connections refused), past the metadata
// TTL, so that the kernel and featurefs both ask again:
//   - a feature already in the cache reads, and its directory lists and its
//     file stats, from the last known listing, without waiting on the store
//     (well under --read-timeout);
//   - an uncached read, and the listing of a directory never listed, fail
//     with EIO within --read-timeout (retries included), not a multiple of it;
//   - a name the last listing lacks is ENOENT at once;
//   - once the store answers again, everything reads without a remount.
func TestOutageBoundsEveryOperation(t *testing.T) {
	for _, mode := range []string{"stalled", "stopped"} {
		t.Run(mode, func(t *testing.T) { testOutage(t, mode) })
	}
}

func testOutage(t *testing.T, mode string) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "2")
	srv, env := minioBucket(t, "outage-"+mode, "", d.Dir)
	const ttl = 2 * time.Second
	const readTimeout = 5 * time.Second
	m := testMount(t, mountConfig{Source: "s3://outage-" + mode, Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", ttl.String(),
			"--read-timeout", readTimeout.String(), "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	c0 := d.Classes[0]
	train := d.images("train/" + c0 + "/")
	cachedKey, coldKey := train[0].Key, train[1].Key
	path := func(key string) string { return filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[key])) }
	listedDir := filepath.Join(m.Layer(testLayer), "train", c0)
	neverListed := filepath.Join(m.Layer(testLayer), "val", c0)

	cached, err := readUncached(path(cachedKey))
	if err != nil {
		t.Fatal(err)
	}
	listed, err := readDirNames(listedDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path(coldKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := readDirNames(filepath.Join(m.Layer(testLayer), "val")); err != nil {
		t.Fatal(err)
	}

	switch mode {
	case "stalled":
		srv.Pause(t)
	case "stopped":
		srv.Stop(t)
	}
	// Past the TTL: the kernel's entries and featurefs's listings are stale.
	time.Sleep(ttl + time.Second)

	// Served from what the mount knows: no wait on the store. The bound
	// leaves room for featurefs's grace (250ms) on the first stale listing.
	const known = 1500 * time.Millisecond
	// Needing the store: EIO within --read-timeout (plus scheduling slack).
	const needsStore = readTimeout + 2*time.Second
	ops := []struct {
		name  string
		bound time.Duration
		want  syscall.Errno // 0: success
		op    func() error
	}{
		{"read cached " + names[cachedKey], known, 0, func() error {
			b, err := readUncached(path(cachedKey))
			if err == nil && !bytes.Equal(b, cached) {
				return errors.New("bytes differ from before the outage")
			}
			return err
		}},
		{"stat cached " + names[cachedKey], known, 0, func() error { _, err := os.Stat(path(cachedKey)); return err }},
		{"ls listed train/" + c0, known, 0, func() error {
			got, err := readDirNames(listedDir)
			if err == nil && !slices.Equal(got, listed) {
				return errors.New("listing differs from before the outage")
			}
			return err
		}},
		{"stat missing name in a listed directory", known, syscall.ENOENT, func() error {
			_, err := os.Stat(filepath.Join(listedDir, "no-such-image.npy"))
			return err
		}},
		{"read uncached " + names[coldKey], needsStore, syscall.EIO, func() error { _, err := readUncached(path(coldKey)); return err }},
		{"ls never-listed val/" + c0, needsStore, syscall.EIO, func() error { _, err := readDirNames(neverListed); return err }},
	}
	for _, o := range ops {
		t0 := time.Now()
		done := make(chan error, 1)
		go func() { done <- o.op() }()
		select {
		case err := <-done:
			took := time.Since(t0)
			switch {
			case o.want == 0 && err != nil:
				t.Errorf("store %s: %s: %v after %v, want success", mode, o.name, err, took)
			case o.want != 0 && !isErrno(err, o.want):
				t.Errorf("store %s: %s: %v after %v, want %v", mode, o.name, err, took, o.want)
			}
			if took > o.bound {
				t.Errorf("store %s: %s took %v, want at most %v", mode, o.name, took.Round(time.Millisecond), o.bound)
			}
			t.Logf("store %s: %s: %v after %v", mode, o.name, err, took.Round(time.Millisecond))
		case <-time.After(3 * time.Minute):
			t.Fatalf("store %s: %s still blocked after 3m (a hang)", mode, o.name)
		}
	}

	switch mode {
	case "stalled":
		srv.Resume(t)
	case "stopped":
		srv.Start(t)
	}
	// Back: the uncached feature and the unlisted directory read, no remount.
	// (A failed open keeps its error; this is a new open.)
	if _, err := readUncached(path(coldKey)); err != nil {
		t.Errorf("store back: read %s: %v", names[coldKey], err)
	}
	if got, err := readDirNames(neverListed); err != nil || len(got) != len(d.images("val/"+c0+"/")) {
		t.Errorf("store back: ls val/%s: %v, %v", c0, got, err)
	}
	if bad := statsField(t, mountStats(t, m), "fs.bad_objects"); bad != 0 {
		t.Errorf("the outage made %d objects bad (negatively cached)", bad)
	}
}

// readDirNames lists a directory's names, sorted.
func readDirNames(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, nil
}
