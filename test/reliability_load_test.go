package test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestReliabilityLoad runs 16 readers, each reading every file in its own
// shuffled order with the page cache dropped (so every read reaches
// featurefs and its feature cache), plus a concurrent `find` over the layer
// directory and metadata expiring every 2 s, for FEATUREFS_SOAK_DURATION
// (30 s in CI, minutes for the soak), after one warm-up epoch:
//   - zero errors on good objects, and EIO every time on the bad ones;
//   - zero wrong bytes: every read equals the warm-up read, which equals
//     featurefs extract;
//   - every find sees every file;
//   - the mount's RSS after warm-up stays flat (the peak of the last third
//     of the run within 64 MiB + 10% of the first samples) and its open file
//     descriptors too (at most 8 more than after warm-up).
func TestReliabilityLoad(t *testing.T) {
	dur := soakDuration(t, 30*time.Second)
	d := genDataset(t, "--bad", "--classes", "2", "--train", "6", "--val", "2")
	srv, env := minioBucket(t, "load", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://load", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", "2s"}})
	layerDir := m.Layer(testLayer)
	names := featureNames(d.keys(t))
	good := d.images("")
	bad := d.bad()
	local := map[string]string{}
	for _, o := range good {
		local[o.Key] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
	}
	ref := extractRef(t, testLayer, local)
	path := func(key string) string { return filepath.Join(layerDir, filepath.FromSlash(names[key])) }

	// Warm-up epoch: every good feature extracted once and checked.
	warm := map[string][]byte{}
	for _, o := range good {
		b, err := readUncached(path(o.Key))
		if err != nil {
			t.Fatalf("warm-up: %s: %v", o.Key, err)
		}
		got, err := parseNPY(b)
		if err != nil {
			t.Fatalf("warm-up: %s: %v", o.Key, err)
		}
		if diff, ok := closeEnough(got.Data, ref[o.Key].Data); !ok {
			t.Fatalf("warm-up: %s differs from featurefs extract: max |diff| %g", o.Key, diff)
		}
		warm[o.Key] = b
	}
	type item struct {
		key string
		bad bool
	}
	var items []item
	for _, o := range good {
		items = append(items, item{o.Key, false})
	}
	for _, o := range bad {
		items = append(items, item{o.Key, true})
	}
	wantFiles := len(names)

	pid := m.PID()
	rss0, fd0 := rssBytes(t, pid, "VmRSS"), fdCount(t, pid)
	deadline := time.Now().Add(dur)
	var (
		reads, goodErrs, badWrong, wrong, finds, findErrs atomic.Int64
		mu                                                sync.Mutex
		firstErrs                                         []string
	)
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(firstErrs) < 10 {
			firstErrs = append(firstErrs, fmt.Sprintf(format, args...))
		}
	}
	var wg sync.WaitGroup
	for r := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(7, uint64(r)))
			for time.Now().Before(deadline) {
				for _, it := range shuffled(rng, items) {
					if !time.Now().Before(deadline) {
						return
					}
					b, err := readUncached(path(it.key))
					reads.Add(1)
					switch {
					case it.bad && !isErrno(err, syscall.EIO):
						badWrong.Add(1)
						note("bad %s: %v, want EIO", it.key, err)
					case it.bad:
					case err != nil:
						goodErrs.Add(1)
						note("good %s: %v", it.key, err)
					case !bytes.Equal(b, warm[it.key]):
						wrong.Add(1)
						note("good %s: %d bytes differ from the warm-up read", it.key, len(b))
					}
				}
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(deadline) {
			out, err := exec.Command("find", layerDir, "-name", "*.npy").Output()
			finds.Add(1)
			n := strings.Count(string(out), "\n")
			if err != nil || n != wantFiles {
				findErrs.Add(1)
				note("find: %d files, want %d (%v)", n, wantFiles, err)
			}
		}
	})
	var rss []int64
	var fds []int
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		rss = append(rss, rssBytes(t, pid, "VmRSS"))
		fds = append(fds, fdCount(t, pid))
	}
	wg.Wait()

	for _, e := range firstErrs {
		t.Error(e)
	}
	if goodErrs.Load()+badWrong.Load()+wrong.Load()+findErrs.Load() != 0 {
		t.Errorf("under load: %d errors on good objects, %d bad objects not EIO, %d wrong reads, %d bad finds",
			goodErrs.Load(), badWrong.Load(), wrong.Load(), findErrs.Load())
	}
	if reads.Load() < int64(len(items)) || finds.Load() == 0 {
		t.Errorf("only %d reads and %d finds in %v", reads.Load(), finds.Load(), dur)
	}
	if len(rss) < 3 {
		t.Fatalf("only %d samples", len(rss))
	}
	early := slices.Max(rss[:max(1, len(rss)/10)])
	early = max(early, rss0)
	late := slices.Max(rss[len(rss)*2/3:])
	fdMax := slices.Max(fds)
	t.Logf("load: %v, %d reads (%.0f/s), %d finds; RSS %s after warm-up, %s early, peak of the last third %s; fds %d after warm-up, max %d",
		dur, reads.Load(), float64(reads.Load())/dur.Seconds(), finds.Load(), mib(rss0), mib(early), mib(late), fd0, fdMax)
	if late > early+64<<20+early/10 {
		t.Errorf("RSS grew under steady load: %s early, %s in the last third", mib(early), mib(late))
	}
	// Flat: no growth after the first third (a leak grows with the reads;
	// the store's connection pool settles within seconds).
	fdEarly := slices.Max(fds[:max(1, len(fds)/3)])
	fdLate := slices.Max(fds[len(fds)*2/3:])
	t.Logf("open fds per second: %v; now %v", fds, fdKinds(t, pid))
	if fdLate > max(fdEarly, fd0)+4 {
		t.Errorf("open file descriptors grew under load: %d after warm-up, %d in the first third, %d in the last", fd0, fdEarly, fdLate)
	}
	if _, err := os.Stat(m.Path(".featurefs", "stats")); err != nil {
		t.Error(err)
	}
}
