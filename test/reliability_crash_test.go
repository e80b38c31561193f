package test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
)

// readStats reads and decodes a mount's stats file.
func readStats(t testing.TB, p string) (map[string]any, error) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("stats is not JSON: %w", err)
	}
	return v, nil
}

// TestReliabilityCrashLoop kills the mount with SIGKILL while 8 readers
// make it extract, FEATUREFS_SOAK_ITER times (2 in CI, 20 for the soak),
// each time mounting again with `featurefs mount` on the same mount point
// and cache directory:
//   - after each kill the mount point is stale (ENOTCONN) and the next
//     `featurefs mount` recovers it by itself;
//   - every feature read, before a kill, after it (from the cache the
//     killed process wrote) or at the end, equals featurefs extract on the
//     same image (size and values): nothing torn or wrong is served;
//   - features stored before a kill are served from the cache afterwards.
func TestReliabilityCrashLoop(t *testing.T) {
	iters := soakIter(t, 2)
	d := genDataset(t, "--classes", "2", "--train", "5", "--val", "0")
	srv, env := minioBucket(t, "crash", "", "")
	images := d.images("")
	local := map[string]string{}
	var keys []string
	for _, o := range images {
		local[o.Key] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
		keys = append(keys, o.Key)
	}
	ref := extractRef(t, testLayer, local)
	names := featureNames(keys)
	wantSize := api.NPYSize(testLayerShape, extractor.Float32)

	work := t.TempDir()
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cacheDir, logFile := filepath.Join(work, "cache"), filepath.Join(work, "featurefs.log")
	args := []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", "1h", "--prefetch", "off"}
	mount := func() *daemonMount { return mountDaemon(t, mnt, cacheDir, logFile, "s3://crash", env, args...) }

	// check compares one read with the reference; it reports whether the
	// bytes were right.
	var wrong atomic.Int64
	check := func(when, prefix, key string, b []byte) {
		got, err := parseNPY(b)
		switch {
		case err != nil:
			t.Errorf("%s: %s%s: %v", when, prefix, key, err)
		case int64(len(b)) != wantSize:
			t.Errorf("%s: %s%s: %d bytes, want %d", when, prefix, key, len(b), wantSize)
		default:
			if diff, ok := closeEnough(got.Data, ref[key].Data); !ok {
				t.Errorf("%s: %s%s differs from featurefs extract: max |diff| %g", when, prefix, key, diff)
			} else {
				return
			}
		}
		wrong.Add(1)
	}
	// verify reads every file under prefix (4 readers) and checks it.
	verify := func(m *daemonMount, when, prefix string) {
		var wg sync.WaitGroup
		ch := make(chan string)
		for range 4 {
			wg.Go(func() {
				for k := range ch {
					b, err := readUncached(filepath.Join(m.Layer(testLayer), filepath.FromSlash(prefix+names[k])))
					if err != nil {
						t.Errorf("%s: read %s%s: %v", when, prefix, k, err)
						continue
					}
					check(when, prefix, k, b)
				}
			})
		}
		for _, k := range keys {
			ch <- k
		}
		close(ch)
		wg.Wait()
	}

	var prefixes []string
	var storedBeforeKill, recovered int64
	start := time.Now()
	for i := range iters {
		prefix := fmt.Sprintf("it%02d/", i)
		for _, k := range keys {
			b, err := os.ReadFile(local[k])
			if err != nil {
				t.Fatal(err)
			}
			srv.Put(t, "crash", prefix+k, b)
		}
		m := mount()
		statsPath := m.Path(".featurefs", "stats")
		if i > 0 {
			// The last process died mid-extraction: what it stored is
			// served, the rest is extracted again; all of it is right.
			verify(m, fmt.Sprintf("iteration %d, after kill -9", i), prefixes[i-1])
			st, err := readStats(t, statsPath)
			if err != nil {
				t.Fatal(err)
			}
			hits := statsField(t, st, "fs.cache_hits")
			recovered += hits
			if hits == 0 {
				t.Errorf("iteration %d: nothing stored before the kill was served from the cache", i)
			}
		}
		st, err := readStats(t, statsPath)
		if err != nil {
			t.Fatal(err)
		}
		before := statsField(t, st, "cache.puts")

		// Heavy extraction under 8 readers in shuffled order; kill -9 once
		// a third of the prefix is extracted and stored (more are in flight).
		var killed atomic.Bool
		var wg sync.WaitGroup
		for r := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(r)))
				for _, k := range shuffled(rng, keys) {
					p := filepath.Join(m.Layer(testLayer), filepath.FromSlash(prefix+names[k]))
					b, err := readUncached(p)
					if err != nil {
						if !killed.Load() {
							t.Errorf("iteration %d: read %s before the kill: %v", i, p, err)
						}
						continue
					}
					check(fmt.Sprintf("iteration %d, under load", i), prefix, k, b)
				}
			})
		}
		deadline := time.Now().Add(3 * time.Minute)
		for {
			st, err := readStats(t, statsPath)
			if err != nil {
				t.Fatalf("iteration %d: stats: %v", i, err)
			}
			n := statsField(t, st, "cache.puts") - before
			if n >= int64(len(keys)/3) {
				storedBeforeKill += n
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("iteration %d: only %d extractions after 3m", i, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		killed.Store(true)
		m.Kill(t)
		wg.Wait()
		if _, err := os.ReadDir(mnt); !isErrno(err, syscall.ENOTCONN, syscall.ECONNABORTED) {
			t.Errorf("iteration %d: after kill -9 the mount point answers %v, want a stale mount (ENOTCONN)", i, err)
		}
		prefixes = append(prefixes, prefix)
	}

	// A last clean mount on the stale mount point: every feature of every
	// iteration is right.
	m := mount()
	for _, p := range prefixes {
		verify(m, "final", p)
	}
	m.Unmount(t)
	if isMounted(t, mnt) {
		t.Errorf("%s still mounted after umount", mnt)
	}
	t.Logf("crash loop: %d kill -9 iterations in %v; %d features stored before the kills (at least), %d served from the cache after them, %d wrong reads",
		iters, time.Since(start).Round(time.Second), storedBeforeKill, recovered, wrong.Load())
}
