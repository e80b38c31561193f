package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/figures"
)

func TestPrintStatsSections(t *testing.T) {
	var s figures.Stats
	s.Source, s.Device, s.UptimeSeconds, s.CPUSeconds = "s3://host/bkt", "cuda:0", 75, 12.34
	s.FS.ReadSizes = figures.ReadSizes{Le4K: 1, Le32K: 2, Le128K: 3, Le512K: 4, Le1M: 5, Over1M: 6}
	s.Extraction = figures.ExtractionStats{RatePerSecond: 12.5, RateWindowSeconds: 10, Completed: 300, MeanBatchSize: 7.5, Batches: 40, BatchedItems: 300}
	s.Queue = figures.QueueStats{Foreground: 3, Background: 120}
	s.CacheHitRatio, s.FS.CacheHits, s.FS.CacheMisses = 0.25, 100, 300
	s.Store.BytesFetched, s.Store.Gets = 3<<20, 300
	s.BytesServed = 5 << 30
	s.Errors = figures.ErrorCounts{BadImage: 2, Timeout: 4}
	s.Extractor.JPEGDecode = "gpu: nvJPEG 13.0.1 (hardware backend) on cuda:0 (--decode gpu)"
	s.Extractor.GPUDecode = &api.GPUDecodeStats{Decoded: 280, Batches: 9, Seconds: 1.25, KeptOnCPU: 15, Refused: 3, Failed: 2}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// A section this command does not know of is shown too.
	data = append(bytes.TrimSuffix(data, []byte("}")), []byte(`,"prefetch":{"walks":3,"queued_bytes":10}}`)...)
	var out bytes.Buffer
	if err := printStats(&out, "/mnt/x", data); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		`(?m)^source s3://host/bkt, up 1m15s, 12\.3 CPU seconds$`,
		`(?m)^  read sizes +<=4K 1, <=32K 2, <=128K 3, <=512K 4, <=1M 5, >1M 6 \(READ requests\)$`,
		`(?m)^extraction\n  rate +12\.50 features/s \(last 10s\)$`,
		`(?m)^  mean batch size +7\.50 \(300 images in 40 batches\)$`,
		`(?m)^  jpeg decode +gpu: nvJPEG 13\.0\.1 \(hardware backend\) on cuda:0 \(--decode gpu\)$`,
		`(?m)^  on the GPU +280 decoded in 9 batches \(1\.2s\); on the CPU: 15 by their kind, 3 refused, 2 failed$`,
		`(?m)^queue\n  foreground +3\n  background +120$`,
		`(?m)^cache\n  hit ratio +25\.0% \(100 hits, 300 misses\)$`,
		`(?m)^store\n  bytes fetched +3\.0 MiB$`,
		`(?m)^  bytes served +5\.0 GiB$`,
		`(?m)^errors\n  bad_image +2\n  not_found +0\n  timeout +4\n  store +0\n  other +0$`,
		`(?m)^device\n  device +cuda:0$`,
		`(?m)^prefetch\n  queued bytes +10\n  walks +3$`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	if err := printStats(&out, "/mnt/x", []byte("not json")); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("bad JSON: %v", err)
	}
}

// TestStatsCountsArchiveIndexesApart: the archive indexes a mount keeps
// in the cache (archiveIndexes: a head and a part per archive) are not
// counted as features in featurefs stats and featurefs cache stats. At
// 1942f8f stats said "stored ... in 7 features" after 3 extractions of
// archive members.
func TestStatsCountsArchiveIndexesApart(t *testing.T) {
	store, err := cache.Open(cache.Options{Dir: t.TempDir(), MaxBytes: 64 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	idx := archiveIndexes{cache: store, source: "s3://b", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, a := range []string{"a.tar", "b.tar", "c.tar"} {
		idx.PutIndex(a, `"e"#part1`, make([]byte, 300))
		idx.PutIndex(a, `"e"`, make([]byte, 40))
	}
	if err := store.Put(cache.Key{Source: "s3://b", Object: "a.tar/x.jpg", ETag: `"e"`, ModelDigest: "d", DType: "float32"}, make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	var s figures.Stats
	s.Cache = store.Stats()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printStats(&out, "/mnt/x", data); err != nil {
		t.Fatal(err)
	}
	if want := `(?m)^  stored +8\.\d KiB in 1 features, [0-9.]+ ?[KM]?i?B in 6 archive index entries \(bound 64\.0 MiB for both\)$`; !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("featurefs stats: want a line matching %s:\n%s", want, out.String())
	}
	out.Reset()
	cacheStats(&out, store, false)
	if want := `(?m)^ +1 features \(8(\.\d+)?KiB\), 6 archive index entries \([0-9.]+[KM]?i?B\)$`; !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("featurefs cache stats: want a line matching %s:\n%s", want, out.String())
	}
}

// extract's summary says where the images were decoded when the GPU
// decoded some, in the words gpu-check's decode step counts.
func TestExtractDecodeLine(t *testing.T) {
	if got := decodeLine(extractor.Stats{}, 10); got != "" {
		t.Errorf("without a GPU decoder: %q", got)
	}
	st := extractor.Stats{GPUDecode: &api.GPUDecodeStats{Decoded: 7, KeptOnCPU: 2, Refused: 1}}
	if got, want := decodeLine(st, 10), "7 decoded on the GPU, 3 decoded on the CPU (2 by their kind, 1 refused and 0 failed by the GPU decoder)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
