package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/featurefs/featurefs/fs/figures"
)

const statsUsage = `Usage: featurefs stats [--json] MOUNTPOINT

Prints the live figures of a featurefs mount (MOUNTPOINT/.featurefs/stats):
extraction rate and batching, the extraction queue, the feature cache, the
object store, bytes served, errors by kind and the device. --json prints the
file as it is.
`

// runStats implements "featurefs stats MOUNTPOINT".
func runStats(args []string) int {
	fl := flag.NewFlagSet("featurefs stats", flag.ContinueOnError)
	fl.Usage = func() { fmt.Fprint(fl.Output(), statsUsage); fl.PrintDefaults() }
	asJSON := fl.Bool("json", false, "print the stats file's JSON as it is")
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(os.Stderr, "featurefs stats: want one MOUNTPOINT, got %d arguments\n\n%s", len(pos), statsUsage)
		return 2
	}
	mnt := pos[0]
	data, err := os.ReadFile(filepath.Join(mnt, ".featurefs", "stats"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "featurefs stats: %s is not a featurefs mount (no .featurefs/stats)\n", mnt)
		} else {
			fmt.Fprintf(os.Stderr, "featurefs stats: %v\n", err)
		}
		return 1
	}
	if *asJSON {
		os.Stdout.Write(data)
		return 0
	}
	if err := printStats(os.Stdout, mnt, data); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs stats: %s/.featurefs/stats: %v\n", mnt, err)
		return 1
	}
	return 0
}

// knownStatsKeys are the stats file's top-level keys printStats shows in its
// own sections; any other object is shown as a section of its own.
var knownStatsKeys = map[string]bool{
	"source": true, "device": true, "dtype": true, "cache": true, "extractor": true, "fs": true,
	"recent_errors": true, "uptime_seconds": true, "extraction": true, "queue": true,
	"cache_hit_ratio": true, "store": true, "bytes_served": true, "errors": true,
	"feature_store": true, "cpu_seconds": true, "models": true, "memory": true,
}

// printStats renders the stats file's JSON as aligned sections.
func printStats(w io.Writer, mnt string, data []byte) error {
	var s figures.Stats
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	up := time.Duration(s.UptimeSeconds * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(w, "featurefs mount %s\nsource %s, up %s, %.1f CPU seconds\n", mnt, s.Source, up, s.CPUSeconds)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	section := func(name string) { fmt.Fprintf(tw, "\n%s\n", name) }
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	x := s.Extraction
	section("extraction")
	row("rate", "%.2f features/s (last %.0fs)", x.RatePerSecond, x.RateWindowSeconds)
	row("completed", "%d", x.Completed)
	row("failed", "%d", x.Failed)
	row("mean batch size", "%.2f (%d images in %d batches)", x.MeanBatchSize, x.BatchedItems, x.Batches)
	row("time", "fetch %.1fs, decode %.1fs, inference %.1fs (summed over workers)",
		s.Extractor.FetchSeconds, s.Extractor.DecodeSeconds, s.Extractor.InferSeconds)
	if d := s.Extractor.JPEGDecode; d != "" {
		row("jpeg decode", "%s", d)
	}
	if g := s.Extractor.GPUDecode; g != nil {
		row("on the GPU", "%d decoded in %d batches (%.1fs); on the CPU: %d by their kind, %d refused, %d failed",
			g.Decoded, g.Batches, g.Seconds, g.KeptOnCPU, g.Refused, g.Failed)
	}
	if w := s.Extractor.Wire; w != nil {
		ratio := 0.0
		if w.Bytes > 0 {
			ratio = float64(w.RawBytes) / float64(w.Bytes)
		}
		row("from servers", "%s on the wire for %s of features (%.2fx); %.1fs decompressing",
			humanBytes(w.Bytes), humanBytes(w.RawBytes), ratio, w.DecompressSeconds)
	}

	q := s.Queue
	section("queue")
	row("foreground", "%d", q.Foreground)
	row("background", "%d", q.Background)
	row("decoded, waiting", "%d", q.DecodedWaiting)
	row("running", "%d", q.Running)
	row("in flight", "%d", q.InFlight)

	c := s.Cache
	section("cache")
	row("hit ratio", "%.1f%% (%d hits, %d misses)", 100*s.CacheHitRatio, s.FS.CacheHits, s.FS.CacheMisses)
	// Archive indexes the cache keeps (cmd/featurefs's archiveIndexes)
	// are not features: counted apart.
	row("stored", "%s in %d features, %s in %d archive index entries (bound %s for both)",
		humanBytes(c.Bytes-c.ArchiveIndexBytes), c.Entries-c.ArchiveIndexEntries,
		humanBytes(c.ArchiveIndexBytes), c.ArchiveIndexEntries, humanBytes(c.MaxBytes))
	row("writes", "%d (%d evictions)", c.Puts, c.Evictions)
	cw := s.FS.CacheWriteStats
	row("write queue", "%d features (%s) queued, peak %s of %s; %d written in the background, %d inline, %d skipped (read while the queue was full: not cached), %d dropped",
		cw.WriteQueued, humanBytes(cw.WriteQueuedBytes), humanBytes(cw.WriteQueuePeakBytes), humanBytes(cw.WriteQueueMaxBytes),
		cw.BackgroundWrites, cw.InlineWrites, cw.SkippedWrites, cw.DroppedWrites)
	written := fmt.Sprintf("%.2fx on what was written (%s raw, %s stored); %.1fs compressing, %.1fs decompressing",
		c.CompressionRatio, humanBytes(c.PutRawBytes), humanBytes(c.PutStoredBytes), c.CompressSeconds, c.DecompressSeconds)
	switch {
	case c.RawFiles:
		// The auto policy: naming only the small values' codec read as if
		// every feature were compressed with it.
		row("compression", "auto: small values %s; large features raw, or zeros-elision where it costs a small share of the extraction (%d compressed on the write path; extraction %.2f ms per feature, zeros-elision %.2f ms per MB, as last measured); raw files compacted at rest: %d (%s saved, %d abandoned)",
			c.Compression, c.AutoCompressedPuts, 1e3*c.ExtractSecondsPerFeature, 1e3*c.CodecSecondsPerMB, c.Compactions, humanBytes(c.CompactionSavedBytes), c.CompactionsAbandoned)
		row("", "%s", written)
	case c.Compression != "":
		row("compression", "%s, %s", c.Compression, written)
	default:
		row("compression", "off")
	}
	row("on disk", "%s (%s evicted, reclaimed after %s)", humanBytes(c.DiskBytes), humanBytes(c.EvictedSinceReclaimBytes), humanBytes(c.ReclaimAfterBytes))

	if len(s.Models) > 0 {
		section("models")
		for _, m := range s.Models {
			loaded := m.LoadedAt
			if loaded == "" {
				loaded = "the servers'"
			}
			row(m.Name, "sha256 %.12s, loaded %s", m.Digest, loaded)
		}
	}

	st := s.Store
	section("store")
	row("bytes fetched", "%s", humanBytes(st.BytesFetched))
	row("gets", "%d (%d failed)", st.Gets, st.GetErrors)
	row("list calls", "%d (%d failed)", st.ListCalls, st.ListErrors)
	row("stat calls", "%d (%d failed)", st.StatCalls, st.StatErrors)

	if m := s.Memory; m != nil {
		section("memory")
		row("resident", "%s (peak %s): %s anonymous, %s of mapped files", humanBytes(m.RSSBytes), humanBytes(m.PeakRSSBytes),
			humanBytes(m.AnonBytes), humanBytes(m.FileBytes))
		row("go heap", "%s in objects, %s free (held), %s returned; stacks %s, runtime %s; next collection at %s (GOGC %d)",
			humanBytes(m.GoHeapObjectsBytes+m.GoHeapUnusedBytes), humanBytes(m.GoHeapFreeBytes), humanBytes(m.GoHeapReleasedBytes),
			humanBytes(m.GoStacksBytes), humanBytes(m.GoRuntimeBytes), humanBytes(m.GoHeapGoalBytes), m.GoGCPercent)
		if m.GoMemoryLimitBytes > 0 {
			row("go memory limit", "%s", humanBytes(m.GoMemoryLimitBytes))
		}
		row("c heap", "%s in use, %s free; sessions %s (%d idle closed to open another within --memory-limit)",
			humanBytes(m.CHeapInUseBytes), humanBytes(m.CHeapFreeBytes), humanBytes(m.SessionBytes), m.SessionsClosedForMemory)
		row("idle releases", "%d", m.IdleReleases)
		for _, b := range m.Bounds {
			used := "not counted"
			if b.UsedBytes != nil {
				used = humanBytes(*b.UsedBytes)
			}
			flag := ""
			if b.Flag != "" {
				flag = " (" + b.Flag + ")"
			}
			row("bound "+b.Name, "%s of %s%s", used, humanBytes(b.MaxBytes), flag)
		}
		row("bounds, summed", "%s", humanBytes(m.BoundsTotalBytes))
	}

	if f := s.FeatureStore; f != nil {
		section("feature store")
		only := ""
		if f.StoreOnly {
			only = " (store only: nothing computed here)"
		}
		row("store", "%s%s", f.Store, only)
		row("reads", "%d hits (%s), %d misses, %d mismatches, %d failed, %d skipped while failing",
			f.Hits, humanBytes(f.HitBytes), f.Misses, f.Mismatches, f.GetErrors, f.Skipped)
		row("writes", "%d (%s), %d failed, %d dropped, %d queued (%s)",
			f.Puts, humanBytes(f.PutBytes), f.PutErrors, f.Dropped, f.Queued, humanBytes(f.QueuedBytes))
	}

	section("served")
	row("bytes served", "%s", humanBytes(s.BytesServed))
	row("reads", "%d (%d answered from part of a cached feature)", s.FS.Reads, s.FS.CachePartialReads)
	rs := s.FS.ReadSizes
	row("read sizes", "<=4K %d, <=32K %d, <=128K %d, <=512K %d, <=1M %d, >1M %d (READ requests)",
		rs.Le4K, rs.Le32K, rs.Le128K, rs.Le512K, rs.Le1M, rs.Over1M)

	section("errors")
	by := s.Errors.ByKind()
	for _, k := range figures.ErrorKinds() {
		row(k, "%d", by[k])
	}

	section("device")
	row("device", "%s", s.Device)
	row("dtype", "%s", s.DType)

	// Sections added to the stats file that this command does not know of.
	var extra []string
	for k, v := range raw {
		if !knownStatsKeys[k] && len(bytes.TrimSpace(v)) > 0 && bytes.TrimSpace(v)[0] == '{' {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		var fields map[string]any
		if json.Unmarshal(raw[k], &fields) != nil {
			continue
		}
		section(k)
		names := make([]string, 0, len(fields))
		for n := range fields {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			v, _ := json.Marshal(fields[n])
			row(strings.ReplaceAll(n, "_", " "), "%s", v)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(s.RecentErrors); n > 0 {
		fmt.Fprintf(w, "\nrecent errors (last %d)\n", min(n, 5))
		for _, e := range s.RecentErrors[max(0, n-5):] {
			fmt.Fprintf(w, "  %s  %s: %s\n", e.Time, e.Key, e.Error)
		}
	}
	return nil
}

// humanBytes formats a byte count with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), -1
	for v >= unit && u < 4 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[u])
}
