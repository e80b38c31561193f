package test

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readResult is the outcome of one timed read.
type readResult struct {
	data []byte
	err  error
	took time.Duration
}

// readAllTimed reads the files concurrently (page cache bypassed) and
// returns each one's result.
func readAllTimed(paths []string) map[string]readResult {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]readResult{}
	for _, p := range paths {
		wg.Go(func() {
			t0 := time.Now()
			b, err := readUncached(p)
			mu.Lock()
			defer mu.Unlock()
			out[p] = readResult{b, err, time.Since(t0)}
		})
	}
	wg.Wait()
	return out
}

// TestReliabilityStoreOutage stops MinIO half way through an epoch:
//   - reads of objects not yet cached fail with EIO, each within a bound
//     (no hang), and nothing is remembered as a bad object;
//   - features read before the outage keep being served from the feature
//     cache (page cache dropped), even after the listings' metadata TTL has
//     passed and the kernel asks again;
//   - once MinIO is back, every file reads and equals featurefs extract,
//     without remounting;
//   - neither the log nor the stats file contains the credentials.
func TestReliabilityStoreOutage(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "0")
	srv, env := minioBucket(t, "outage", "", d.Dir)
	const ttl = 2 * time.Second
	const readTimeout = 5 * time.Second
	// Prefetch off: the second half must still be uncached when the store goes.
	m := testMount(t, mountConfig{Source: "s3://outage", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", ttl.String(), "--read-timeout", readTimeout.String(), "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	images := d.images("")
	local := map[string]string{}
	for _, o := range images {
		local[o.Key] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
	}
	ref := extractRef(t, testLayer, local)
	path := func(key string) string { return filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[key])) }
	var before, after []string // first and second half of the epoch
	for i, o := range images {
		if i%2 == 0 {
			before = append(before, o.Key)
		} else {
			after = append(after, o.Key)
		}
	}
	check := func(when, key string, b []byte) {
		t.Helper()
		got, err := parseNPY(b)
		if err != nil {
			t.Errorf("%s: %s: %v", when, key, err)
			return
		}
		if diff, ok := closeEnough(got.Data, ref[key].Data); !ok {
			t.Errorf("%s: %s differs from featurefs extract: max |diff| %g", when, key, diff)
		}
	}

	// First half of the epoch, with the store up.
	first := map[string][]byte{}
	for _, k := range before {
		b, err := readUncached(path(k))
		if err != nil {
			t.Fatalf("read %s before the outage: %v", k, err)
		}
		check("before the outage", k, b)
		first[k] = b
	}
	// Stat the rest so that their names are known (as a DataLoader's
	// listing would have done).
	for _, k := range after {
		if _, err := os.Stat(path(k)); err != nil {
			t.Fatal(err)
		}
	}

	srv.Stop(t)
	var paths []string
	for _, k := range after {
		paths = append(paths, path(k))
	}
	const bound = readTimeout + 5*time.Second
	for p, r := range readAllTimed(paths) {
		switch {
		case !isErrno(r.err, syscall.EIO):
			t.Errorf("store down: read %s: %v after %v, want EIO", p, r.err, r.took)
		case r.took > bound:
			t.Errorf("store down: read %s took %v, more than %v", p, r.took, bound)
		default:
			t.Logf("store down: %s: EIO after %v", filepath.Base(p), r.took.Round(time.Millisecond))
		}
	}
	// Cached features are still served, also once the metadata TTL passed.
	time.Sleep(ttl + ttl/2)
	for _, k := range before {
		t0 := time.Now()
		b, err := readUncached(path(k))
		if err != nil {
			t.Errorf("store down, %v after the metadata TTL: cached %s: %v (after %v)", ttl, k, err, time.Since(t0))
			continue
		}
		if !bytes.Equal(b, first[k]) {
			t.Errorf("store down: cached %s changed", k)
		}
	}
	if bad := statsField(t, mountStats(t, m), "fs.bad_objects"); bad != 0 {
		t.Errorf("the outage made %d objects bad (negatively cached)", bad)
	}

	srv.Start(t)
	for _, k := range append(append([]string{}, after...), before...) {
		b, err := readUncached(path(k))
		if err != nil {
			t.Errorf("store back: read %s: %v", k, err)
			continue
		}
		check("store back", k, b)
	}
	stats, err := os.ReadFile(m.Path(".featurefs", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecrets(t, []string{srv.AccessKey, srv.SecretKey}, []string{m.Log}, map[string]string{"stats": string(stats)})
}

// TestReliabilitySlowStore puts a TCP proxy made by the test between the
// mount and MinIO and stalls it (connections stay open, nothing comes
// back): a read of an uncached feature and the listing of an unlisted
// directory fail with EIO once --read-timeout passes, not later; a cached
// feature still reads; when the proxy lets bytes through again, both
// succeed without remounting.
func TestReliabilitySlowStore(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "0")
	srv, env := minioBucket(t, "slow", "", d.Dir)
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startStallProxy(t, u.Host)
	const timeout = 4 * time.Second
	m := testMount(t, mountConfig{Source: "s3://slow", Env: env,
		Args: []string{"--endpoint-url", "http://" + proxy.Addr, "--read-timeout", timeout.String(), "--metadata-ttl", "1h", "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	c0, c1 := d.Classes[0], d.Classes[1]
	warm := d.images("train/" + c0 + "/")[0].Key
	cold := d.images("train/" + c0 + "/")[1].Key
	unlisted := filepath.Join(m.Layer(testLayer), "train", c1)
	path := func(key string) string { return filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[key])) }
	warmBytes, err := readUncached(path(warm))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path(cold)); err != nil {
		t.Fatal(err)
	}

	proxy.Stall(true)
	const slack = 3 * time.Second
	for name, op := range map[string]func() error{
		"read uncached " + names[cold]: func() error { _, err := readUncached(path(cold)); return err },
		"ls unlisted train/" + c1:      func() error { _, err := os.ReadDir(unlisted); return err },
	} {
		t0 := time.Now()
		done := make(chan error, 1)
		go func() { done <- op() }()
		select {
		case err := <-done:
			took := time.Since(t0)
			if !isErrno(err, syscall.EIO) {
				t.Errorf("store stalled: %s: %v after %v, want EIO", name, err, took)
			}
			if took > timeout+slack {
				t.Errorf("store stalled: %s took %v, want about --read-timeout %v", name, took, timeout)
			}
			t.Logf("store stalled: %s: %v after %v", name, err, took.Round(time.Millisecond))
		case <-time.After(3 * time.Minute):
			t.Fatalf("store stalled: %s still blocked after 3m (a hang)", name)
		}
	}
	if b, err := readUncached(path(warm)); err != nil || !bytes.Equal(b, warmBytes) {
		t.Errorf("store stalled: cached %s: %v", names[warm], err)
	}

	proxy.Stall(false)
	if _, err := readUncached(path(cold)); err != nil {
		t.Errorf("store flowing again: read %s: %v", names[cold], err)
	}
	es, err := os.ReadDir(unlisted)
	if err != nil || len(es) != len(d.images("train/"+c1+"/")) {
		t.Errorf("store flowing again: ls train/%s: %d entries, %v", c1, len(es), err)
	}
}
