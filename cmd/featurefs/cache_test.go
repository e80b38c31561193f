package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/featurefs/featurefs/cache"
)

// TestCacheStatsSaysDiskOverhead: featurefs cache stats says how much more
// than the stored bytes the directory holds, why, and when a mount reclaims
// it; --json has the same figures (issue 15, item 13).
func TestCacheStatsSaysDiskOverhead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := cache.Open(cache.Options{Dir: dir, MaxBytes: 10 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte{7}, 800<<10)
	for i := range 30 { // 24 MiB into 10 MiB: evictions
		if err := s.Put(cache.Key{Source: "src", Object: fmt.Sprintf("k%d.jpg", i), Layer: "l"}, val); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = cache.Open(cache.Options{Dir: dir, Logger: quiet, Inspect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Stats()
	if st.DiskOverheadBytes <= 0 {
		t.Fatalf("stats %+v: want some disk overhead after evictions", st)
	}

	var out bytes.Buffer
	if code := cacheStats(&out, s, false); code != 0 {
		t.Fatalf("cacheStats exit %d", code)
	}
	for _, want := range []string{
		`(?m)^stored +9\.38MiB of 10MiB budget`,
		`(?m)^on disk +\S+ \(\S+ more than stored\)$`,
		`up to 11MiB of dead values in the value log's`,
		`a mount reclaims after 11MiB of evictions, or 5m0s after one \(docs/RELIABILITY.md\)`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("cache stats lacks %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := cacheStats(&out, s, true); code != 0 {
		t.Fatalf("cacheStats --json exit %d", code)
	}
	var j map[string]any
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{"value_log_file_bytes": 11 << 20, "reclaim_after_bytes": 11 << 20, "reclaim_interval_seconds": 300} {
		if j[k] != want {
			t.Errorf("--json %s = %v, want %v", k, j[k], want)
		}
	}
	if j["disk_overhead_bytes"] != float64(j["disk_bytes"].(float64)-j["bytes"].(float64)) {
		t.Errorf("--json disk_overhead_bytes %v, want disk_bytes - bytes (%v - %v)", j["disk_overhead_bytes"], j["disk_bytes"], j["bytes"])
	}
}
