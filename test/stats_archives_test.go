package test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestStatsCountArchiveIndexesApart: through a kernel mount over MinIO,
// after the three members of one tar are read, featurefs stats says
// "in 3 features" and counts the archive's cached index apart (its head
// and part), as do the stats file's cache.archive_index_entries and
// featurefs cache stats after the unmount. At 1942f8f the index's entries
// were counted as features ("stored ... in 5 features" here; the issue
// saw 7 after 3 extractions).
func TestStatsCountArchiveIndexesApart(t *testing.T) {
	work := t.TempDir()
	files := map[string][]byte{}
	for i, n := range []string{"a.jpg", "b.jpg", "c.jpg"} {
		p := filepath.Join(work, n)
		writeJPEG(t, p, 64, 48, i+1)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[n] = b
	}
	srv, env := minioBucket(t, "packs", "", "")
	srv.Put(t, "packs", "train/cls.tar", packTar(t, files))
	m := testMount(t, mountConfig{Source: "s3://packs", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})
	dir := filepath.Join(m.Layer(testLayer), "train", "cls")
	for _, n := range []string{"a.npy", "b.npy", "c.npy"} {
		if _, err := os.ReadFile(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	want := regexp.MustCompile(`(?m)^  stored +\S+ \S+ in 3 features, \S+ \S+ in [1-9]\d* archive index entries`)
	deadline := time.Now().Add(30 * time.Second) // the cache writes are queued
	var r cliResult
	for {
		r = runCLI(t, time.Minute, nil, "stats", m.Dir)
		if r.Code == 0 && want.MatchString(r.Stdout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("featurefs stats after reading 3 members of one tar: want a line matching %s\n%s", want, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := mountStats(t, m)
	idx, all := statsField(t, st, "cache.archive_index_entries"), statsField(t, st, "cache.entries")
	if idx < 1 || all-idx != 3 {
		t.Errorf("stats file: %d entries, %d of them archive index entries; want 3 features besides", all, idx)
	}
	m.Unmount(t)
	r = runCLI(t, time.Minute, nil, "cache", "stats", "--cache-dir", m.CacheDir)
	if !regexp.MustCompile(`(?m)^ +3 features \(.*\), [1-9]\d* archive index entries`).MatchString(r.Stdout) {
		t.Errorf("featurefs cache stats after the unmount: want 3 features and the archive index entries apart:\n%s", r)
	}
}
