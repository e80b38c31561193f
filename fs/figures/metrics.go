package figures

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricDesc is one metric the collector exports: its description and how
// each of its samples is read from a Stats snapshot.
type metricDesc struct {
	desc    *prometheus.Desc
	kind    prometheus.ValueType
	samples func(s *Stats) []sample
}

// sample is one value with its label values.
type sample struct {
	v      float64
	labels []string
}

func one(v float64) []sample { return []sample{{v: v}} }

// collector exports a Stats snapshot, read on every scrape, as Prometheus
// metrics; the figures are the stats file's, so the two always agree.
type collector struct {
	stats   func() Stats
	metrics []metricDesc
}

// NewCollector returns a prometheus.Collector exporting the figures of
// stats under the featurefs_ prefix. Each scrape reads one Stats snapshot,
// the same figures as MOUNT/.featurefs/stats when stats is the tree's.
func NewCollector(stats func() Stats) prometheus.Collector { return newCollector(stats) }

// newCollector builds the collector over a Stats source.
func newCollector(stats func() Stats) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("featurefs_"+name, help, labels, nil)
	}
	c := &collector{stats: stats}
	c.metrics = []metricDesc{
		{d("uptime_seconds", "Seconds since the mount started."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(s.UptimeSeconds) }},
		{d("device_info", "Where models run (value 1).", "device", "dtype", "source"), prometheus.GaugeValue,
			func(s *Stats) []sample { return []sample{{1, []string{s.Device, string(s.DType), s.Source}}} }},
		{d("model_loaded_timestamp_seconds", "When each model's version was loaded (Unix seconds; 0 for a model feature servers run), labelled with the model file's SHA-256.", "model", "digest"), prometheus.GaugeValue,
			func(s *Stats) []sample {
				var out []sample
				for _, m := range s.Models {
					out = append(out, sample{m.LoadedUnix, []string{m.Name, m.Digest}})
				}
				return out
			}},
		{d("extractions_total", "Extractions finished, by outcome.", "outcome"), prometheus.CounterValue,
			func(s *Stats) []sample {
				return []sample{{float64(s.Extraction.Completed), []string{"completed"}}, {float64(s.Extraction.Failed), []string{"failed"}}}
			}},
		{d("extraction_rate", "Extractions completed per second over the last featurefs_extraction_rate_window_seconds."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(s.Extraction.RatePerSecond) }},
		{d("extraction_rate_window_seconds", "The span featurefs_extraction_rate is measured over."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(s.Extraction.RateWindowSeconds) }},
		{d("batches_total", "Model runs."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.Extraction.Batches)) }},
		{d("batched_items_total", "Images computed by model runs."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.Extraction.BatchedItems)) }},
		{d("device_batched_items_total", "Images computed by model runs on each GPU, where models run on several (none on one device).", "device"), prometheus.CounterValue,
			func(s *Stats) []sample {
				out := make([]sample, 0, len(s.Extractor.Devices))
				for _, d := range s.Extractor.Devices {
					out = append(out, sample{float64(d.BatchedItems), []string{d.Device}})
				}
				return out
			}},
		{d("mean_batch_size", "Mean images per model run since mount."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(s.Extraction.MeanBatchSize) }},
		{d("queue_depth", "Extraction requests queued for a fetch worker, by priority.", "priority"), prometheus.GaugeValue,
			func(s *Stats) []sample {
				return []sample{{float64(s.Queue.Foreground), []string{"foreground"}}, {float64(s.Queue.Background), []string{"background"}}}
			}},
		{d("extraction_decoded_waiting", "Inputs decoded and waiting for a batch."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.Queue.DecodedWaiting)) }},
		{d("extraction_running", "Inputs in the model run now."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.Queue.Running)) }},
		{d("extraction_in_flight", "Distinct extraction requests not yet answered."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.Queue.InFlight)) }},
		{d("cache_hits_total", "Feature lookups answered by the cache."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.CacheHits)) }},
		{d("cache_misses_total", "Feature lookups the cache did not answer."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.CacheMisses)) }},
		{d("cache_partial_reads_total", "Feature file reads answered from the part of a cached feature they asked for."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.CachePartialReads)) }},
		{d("cache_hit_ratio", "cache_hits / (cache_hits + cache_misses) since mount."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(s.CacheHitRatio) }},
		{d("cache_bytes", "Bytes held by the feature cache."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.Cache.Bytes)) }},
		{d("cache_max_bytes", "The feature cache's bound in bytes."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.Cache.MaxBytes)) }},
		{d("cache_compression_ratio", "Bytes written to the feature cache before compression over after, since mount (0 before any)."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(s.Cache.CompressionRatio) }},
		{d("cache_codec_seconds_total", "Time the feature cache spent compressing (op=compress) and checking and decompressing (op=decompress).", "op"), prometheus.CounterValue,
			func(s *Stats) []sample {
				return []sample{{s.Cache.CompressSeconds, []string{"compress"}}, {s.Cache.DecompressSeconds, []string{"decompress"}}}
			}},
		{d("cache_entries", "Features held by the feature cache."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.Cache.Entries)) }},
		{d("cache_evictions_total", "Features evicted from the feature cache."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.Cache.Evictions)) }},
		{d("cache_write_queue_features", "Features queued for their cache write (written in the background, off the read path)."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.FS.WriteQueued)) }},
		{d("cache_write_queue_bytes", "Bytes of the features queued for their cache write."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.FS.WriteQueuedBytes)) }},
		{d("cache_write_queue_peak_bytes", "The most bytes queued for cache writes at once since mount."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.FS.WriteQueuePeakBytes)) }},
		{d("cache_write_queue_max_bytes", "The bound on the bytes queued for cache writes."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.FS.WriteQueueMaxBytes)) }},
		{d("cache_writes_total", "Cache writes, by how they were done: by the background writers, inline (a feature larger than the queue, or a wait for room that ended), skipped (a read's feature that found the queue full: served, not cached), or dropped by a close that timed out.", "mode"), prometheus.CounterValue,
			func(s *Stats) []sample {
				w := &s.FS.CacheWriteStats
				return []sample{{float64(w.BackgroundWrites), []string{"background"}}, {float64(w.InlineWrites), []string{"inline"}}, {float64(w.SkippedWrites), []string{"skipped"}},
					{float64(w.DroppedWrites), []string{"dropped"}}}
			}},
		{d("cache_write_waits_total", "Prefetch and warm-up producers that waited for room in the cache write queue."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.WriteWaits)) }},
		{d("cache_write_queue_reads_total", "Feature lookups answered from the cache write queue (also counted as cache hits)."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.WriteQueueReads)) }},
		{d("store_requests_total", "Object store calls, by operation.", "op"), prometheus.CounterValue,
			func(s *Stats) []sample {
				return []sample{{float64(s.Store.Gets), []string{"get"}}, {float64(s.Store.ListCalls), []string{"list"}},
					{float64(s.Store.StatCalls), []string{"stat"}}}
			}},
		{d("store_errors_total", "Failed object store calls, by operation (stat: not-found excluded).", "op"), prometheus.CounterValue,
			func(s *Stats) []sample {
				return []sample{{float64(s.Store.GetErrors), []string{"get"}}, {float64(s.Store.ListErrors), []string{"list"}},
					{float64(s.Store.StatErrors), []string{"stat"}}}
			}},
		{d("store_fetched_bytes_total", "Bytes fetched from the object store."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.Store.BytesFetched)) }},
		{d("feature_store_requests_total", "Feature store outcomes, by kind (hit, miss, mismatch, get_error, skipped, put, put_error, dropped); none without --feature-store.", "kind"), prometheus.CounterValue,
			func(s *Stats) []sample {
				f := s.FeatureStore
				if f == nil {
					return nil
				}
				return []sample{{float64(f.Hits), []string{"hit"}}, {float64(f.Misses), []string{"miss"}},
					{float64(f.Mismatches), []string{"mismatch"}}, {float64(f.GetErrors), []string{"get_error"}},
					{float64(f.Skipped), []string{"skipped"}}, {float64(f.Puts), []string{"put"}},
					{float64(f.PutErrors), []string{"put_error"}}, {float64(f.Dropped), []string{"dropped"}}}
			}},
		{d("feature_store_bytes_total", "Bytes read from (op=get) and written to (op=put) the feature store.", "op"), prometheus.CounterValue,
			func(s *Stats) []sample {
				if f := s.FeatureStore; f != nil {
					return []sample{{float64(f.HitBytes), []string{"get"}}, {float64(f.PutBytes), []string{"put"}}}
				}
				return nil
			}},
		{d("feature_store_queued", "Feature store writes waiting."), prometheus.GaugeValue,
			func(s *Stats) []sample {
				if f := s.FeatureStore; f != nil {
					return one(float64(f.Queued))
				}
				return nil
			}},
		{d("served_bytes_total", "Bytes returned by reads of feature files."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.BytesServed)) }},
		{d("reads_total", "Reads of feature files that returned data."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.Reads)) }},
		{d("read_requests_total", "FUSE READ requests of feature files, by the size the kernel asked for (size: le_4k, le_32k, le_128k, le_512k, le_1m, gt_1m; a request counts in the first that holds it).", "size"), prometheus.CounterValue,
			func(s *Stats) []sample {
				counts := s.FS.ReadSizes.Counts()
				out := make([]sample, len(counts))
				for i, n := range counts {
					out[i] = sample{float64(n), []string{ReadSizeLabels[i]}}
				}
				return out
			}},
		{d("metadata_bytes", "Bytes the metadata budget counts now, by part (listings: cached listings; nodes: entries held for the kernel; archive_indexes: archive indexes kept in memory).", "part"), prometheus.GaugeValue,
			func(s *Stats) []sample {
				return []sample{{float64(s.FS.ListingBytes), []string{"listings"}}, {float64(s.FS.NodeBytes), []string{"nodes"}},
					{float64(s.FS.ArchiveIndexBytes), []string{"archive_indexes"}}}
			}},
		{d("metadata_max_bytes", "The metadata budget (--metadata-cache-size): listings and the kernel's entries together."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.FS.MetadataMaxBytes)) }},
		{d("kernel_nodes", "Entries the tree holds for the kernel (inodes under the layer directories)."), prometheus.GaugeValue,
			func(s *Stats) []sample { return one(float64(s.FS.KernelNodes)) }},
		{d("listings_dropped_total", "Listings dropped, coldest first, for the metadata budget."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.ListingsDropped)) }},
		{d("crowded_lookups_total", "Lookups answered by Stat calls, not a listing read for them, as the listings filled the metadata budget."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.CrowdedLookups)) }},
		{d("kernel_entries_forgotten_total", "Kernel entries of feature files the kernel was told to drop for the metadata budget."), prometheus.CounterValue,
			func(s *Stats) []sample { return one(float64(s.FS.KernelForgets)) }},
		{d("archive_index_reads_total", "Archive indexes looked up, by where they came from (memory: kept in memory; store: the feature cache; ranged: built with ranged GETs; stream: built in a streaming read's pass); none without archives.", "source"), prometheus.CounterValue,
			func(s *Stats) []sample {
				a := s.Archives
				if a == nil {
					return nil
				}
				return []sample{{float64(a.IndexMemoryHits), []string{"memory"}}, {float64(a.IndexStoreHits), []string{"store"}},
					{float64(a.IndexBuilds), []string{"ranged"}}, {float64(a.IndexStreamBuilds), []string{"stream"}}}
			}},
		{d("archive_gets_total", "GETs of archives, by kind (ranged: indexes, members, read-ahead chunks; stream: one whole-archive read by warm or prefetch).", "kind"), prometheus.CounterValue,
			func(s *Stats) []sample {
				if a := s.Archives; a != nil {
					return []sample{{float64(a.RangedGets), []string{"ranged"}}, {float64(a.StreamGets), []string{"stream"}}}
				}
				return nil
			}},
		{d("archive_read_bytes_total", "Archive bytes those GETs returned."), prometheus.CounterValue,
			func(s *Stats) []sample {
				if a := s.Archives; a != nil {
					return one(float64(a.BytesRead))
				}
				return nil
			}},
		{d("archive_streamed_members_total", "Archive members streaming reads handed over with their bytes."), prometheus.CounterValue,
			func(s *Stats) []sample {
				if a := s.Archives; a != nil {
					return one(float64(a.StreamedMembers))
				}
				return nil
			}},
		{d("archive_stream_breaks_total", "Streaming archive reads that broke part way (the members left read with ranged GETs)."), prometheus.CounterValue,
			func(s *Stats) []sample {
				if a := s.Archives; a != nil {
					return one(float64(a.StreamBreaks))
				}
				return nil
			}},
		{d("archive_bad_total", "Archives found bad (each logged once)."), prometheus.CounterValue,
			func(s *Stats) []sample {
				if a := s.Archives; a != nil {
					return one(float64(a.BadArchives))
				}
				return nil
			}},
		{d("errors_total", "Errors answered to reads and listings, by kind.", "kind"), prometheus.CounterValue,
			func(s *Stats) []sample {
				by := s.Errors.ByKind()
				out := make([]sample, 0, len(by))
				for _, k := range ErrorKinds() {
					out = append(out, sample{float64(by[k]), []string{k}})
				}
				return out
			}},
	}
	return c
}

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

// Collect reads one Stats snapshot and sends every metric of it.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range c.metrics {
		for _, smp := range m.samples(&s) {
			metric, err := prometheus.NewConstMetric(m.desc, m.kind, smp.v, smp.labels...)
			if err != nil {
				metric = prometheus.NewInvalidMetric(m.desc, err)
			}
			ch <- metric
		}
	}
}

// MetricsHandler returns an http.Handler serving the metrics of stats
// (NewCollector), with the Go runtime's and the process's, in the Prometheus
// exposition format. It uses a registry of its own (nothing global).
func MetricsHandler(stats func() Stats) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(stats), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
