package fs

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/featurefs/featurefs/fs/figures"
)

// scrape GETs url and parses the Prometheus text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("content type %q, want the text format", ct)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// metricValue returns the value of the sample of name whose labels include
// every label given, and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func TestMetricsEndpointAgreesWithStatsFile(t *testing.T) {
	s := statsScenario(t)
	// The reads' cache writes end in the background: once none is queued,
	// nothing changes between the scrape and the stats file.
	waitFor(t, 10*time.Second, "the queued cache writes", func() bool { return s.fs.Stats().FS.WriteQueued == 0 })
	srv := httptest.NewServer(MetricsHandler(s.fs))
	defer srv.Close()
	fams := scrape(t, srv.URL)
	st := readStatsFile(t, s.env) // nothing runs between the two: same figures

	type want struct {
		name   string
		labels []string
		value  float64
		kind   dto.MetricType
	}
	wants := []want{
		{"featurefs_extractions_total", []string{"outcome", "completed"}, float64(st.Extraction.Completed), dto.MetricType_COUNTER},
		{"featurefs_extractions_total", []string{"outcome", "failed"}, float64(st.Extraction.Failed), dto.MetricType_COUNTER},
		{"featurefs_extraction_rate", nil, st.Extraction.RatePerSecond, dto.MetricType_GAUGE},
		{"featurefs_extraction_rate_window_seconds", nil, st.Extraction.RateWindowSeconds, dto.MetricType_GAUGE},
		{"featurefs_batches_total", nil, float64(st.Extraction.Batches), dto.MetricType_COUNTER},
		{"featurefs_batched_items_total", nil, float64(st.Extraction.BatchedItems), dto.MetricType_COUNTER},
		{"featurefs_mean_batch_size", nil, st.Extraction.MeanBatchSize, dto.MetricType_GAUGE},
		{"featurefs_queue_depth", []string{"priority", "foreground"}, float64(st.Queue.Foreground), dto.MetricType_GAUGE},
		{"featurefs_queue_depth", []string{"priority", "background"}, float64(st.Queue.Background), dto.MetricType_GAUGE},
		{"featurefs_extraction_in_flight", nil, float64(st.Queue.InFlight), dto.MetricType_GAUGE},
		{"featurefs_cache_hits_total", nil, float64(st.FS.CacheHits), dto.MetricType_COUNTER},
		{"featurefs_cache_misses_total", nil, float64(st.FS.CacheMisses), dto.MetricType_COUNTER},
		{"featurefs_cache_hit_ratio", nil, st.CacheHitRatio, dto.MetricType_GAUGE},
		{"featurefs_store_fetched_bytes_total", nil, float64(st.Store.BytesFetched), dto.MetricType_COUNTER},
		{"featurefs_store_requests_total", []string{"op", "get"}, float64(st.Store.Gets), dto.MetricType_COUNTER},
		{"featurefs_store_errors_total", []string{"op", "get"}, float64(st.Store.GetErrors), dto.MetricType_COUNTER},
		{"featurefs_store_requests_total", []string{"op", "list"}, float64(st.Store.ListCalls), dto.MetricType_COUNTER},
		{"featurefs_served_bytes_total", nil, float64(st.BytesServed), dto.MetricType_COUNTER},
		{"featurefs_cache_write_queue_features", nil, float64(st.FS.WriteQueued), dto.MetricType_GAUGE},
		{"featurefs_cache_write_queue_bytes", nil, float64(st.FS.WriteQueuedBytes), dto.MetricType_GAUGE},
		{"featurefs_cache_write_queue_peak_bytes", nil, float64(st.FS.WriteQueuePeakBytes), dto.MetricType_GAUGE},
		{"featurefs_cache_write_queue_max_bytes", nil, float64(st.FS.WriteQueueMaxBytes), dto.MetricType_GAUGE},
		{"featurefs_cache_writes_total", []string{"mode", "background"}, float64(st.FS.BackgroundWrites), dto.MetricType_COUNTER},
		{"featurefs_cache_writes_total", []string{"mode", "inline"}, float64(st.FS.InlineWrites), dto.MetricType_COUNTER},
		{"featurefs_cache_writes_total", []string{"mode", "dropped"}, float64(st.FS.DroppedWrites), dto.MetricType_COUNTER},
		{"featurefs_cache_write_waits_total", nil, float64(st.FS.WriteWaits), dto.MetricType_COUNTER},
		{"featurefs_cache_write_queue_reads_total", nil, float64(st.FS.WriteQueueReads), dto.MetricType_COUNTER},
		{"featurefs_metadata_bytes", []string{"part", "listings"}, float64(st.FS.ListingBytes), dto.MetricType_GAUGE},
		{"featurefs_metadata_bytes", []string{"part", "nodes"}, float64(st.FS.NodeBytes), dto.MetricType_GAUGE},
		{"featurefs_metadata_max_bytes", nil, float64(st.FS.MetadataMaxBytes), dto.MetricType_GAUGE},
		{"featurefs_kernel_nodes", nil, float64(st.FS.KernelNodes), dto.MetricType_GAUGE},
		{"featurefs_listings_dropped_total", nil, float64(st.FS.ListingsDropped), dto.MetricType_COUNTER},
		{"featurefs_crowded_lookups_total", nil, float64(st.FS.CrowdedLookups), dto.MetricType_COUNTER},
		{"featurefs_kernel_entries_forgotten_total", nil, float64(st.FS.KernelForgets), dto.MetricType_COUNTER},
		{"featurefs_device_info", []string{"device", "fake", "dtype", "float32", "source", "fake://bucket"}, 1, dto.MetricType_GAUGE},
	}
	if len(st.Models) == 0 {
		t.Fatal("the stats list no model")
	}
	for _, m := range st.Models {
		wants = append(wants, want{"featurefs_model_loaded_timestamp_seconds", []string{"model", m.Name, "digest", m.Digest}, m.LoadedUnix, dto.MetricType_GAUGE})
	}
	for i, n := range st.FS.ReadSizes.Counts() {
		wants = append(wants, want{"featurefs_read_requests_total", []string{"size", figures.ReadSizeLabels[i]}, float64(n), dto.MetricType_COUNTER})
	}
	for kind, n := range st.Errors.ByKind() {
		wants = append(wants, want{"featurefs_errors_total", []string{"kind", kind}, float64(n), dto.MetricType_COUNTER})
	}
	for _, w := range wants {
		got, ok := metricValue(fams, w.name, w.labels...)
		if !ok {
			t.Errorf("%s%v: missing from the scrape", w.name, w.labels)
			continue
		}
		if got != w.value {
			t.Errorf("%s%v = %v, the stats file says %v", w.name, w.labels, got, w.value)
		}
		if k := fams[w.name].GetType(); k != w.kind {
			t.Errorf("%s is a %v, want a %v", w.name, k, w.kind)
		}
	}
	// The figures are not all zero (the comparison above would pass on an
	// empty snapshot otherwise), and the runtime's own metrics are there.
	if v, _ := metricValue(fams, "featurefs_served_bytes_total"); v == 0 {
		t.Error("served bytes 0 after reads")
	}
	if v, _ := metricValue(fams, "featurefs_cache_writes_total", "mode", "background"); v == 0 {
		t.Error("no cache write done in the background after reads that extracted")
	}
	if v, _ := metricValue(fams, "featurefs_read_requests_total", "size", "le_4k"); v == 0 {
		t.Error("no READ request of at most 4K counted after reads of small files")
	}
	if v, _ := metricValue(fams, "featurefs_errors_total", "kind", figures.ErrKindTimeout); v == 0 {
		t.Error("no timeout counted after a read past the timeout")
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no go_goroutines: the Go collector is not registered")
	}

	// Counters move on the next scrape.
	before, _ := metricValue(fams, "featurefs_errors_total", "kind", figures.ErrKindBadImage)
	if _, err := os.ReadFile(s.path("features", "tiny", "layer0", "d", "bad.npy")); err == nil {
		t.Fatal("bad.npy read without error")
	}
	after, _ := metricValue(scrape(t, srv.URL), "featurefs_errors_total", "kind", figures.ErrKindBadImage)
	if after <= before {
		t.Errorf("bad_image errors %v after another bad read, were %v", after, before)
	}
}
