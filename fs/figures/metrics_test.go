package figures

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featurefs/featurefs/extractor/api"
)

// deviceItems gathers featurefs_device_batched_items_total from a
// collector over st: images per device label.
func deviceItems(t *testing.T, st Stats) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(func() Stats { return st }))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "featurefs_device_batched_items_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "device" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// With models on several GPUs, the images each computed are exported per
// device; on one device there is no such sample.
func TestDeviceMetricsPerGPU(t *testing.T) {
	st := Stats{Extractor: api.Stats{Device: "cuda:0,2", Devices: []api.DeviceStats{
		{Device: "cuda:0", Batches: 3, BatchedItems: 700},
		{Device: "cuda:2", Batches: 1, BatchedItems: 256},
	}}}
	if got := deviceItems(t, st); len(got) != 2 || got["cuda:0"] != 700 || got["cuda:2"] != 256 {
		t.Errorf("per-device images %v, want cuda:0 700 and cuda:2 256", got)
	}
	if got := deviceItems(t, Stats{Extractor: api.Stats{Device: "cuda:0"}}); len(got) != 0 {
		t.Errorf("one device: per-device samples %v, want none", got)
	}
}

// gather returns every sample of the collector over st, by metric name
// and label values joined with ",".
func gather(t *testing.T, st Stats) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(func() Stats { return st }))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetValue()
			}
			out[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// The archive figures are exported when the source shows archives, and
// absent when it does not.
func TestArchiveMetrics(t *testing.T) {
	a := ArchiveStats{IndexMemoryHits: 5, IndexStoreHits: 4, IndexBuilds: 3, IndexStreamBuilds: 2, RangedGets: 7,
		StreamGets: 2, BytesRead: 1000, StreamedMembers: 9, StreamBreaks: 1, BadArchives: 1}
	got := gather(t, Stats{Archives: &a})
	for name, want := range map[string]float64{
		"featurefs_archive_index_reads_total,memory": 5, "featurefs_archive_index_reads_total,store": 4,
		"featurefs_archive_index_reads_total,ranged": 3, "featurefs_archive_index_reads_total,stream": 2,
		"featurefs_archive_gets_total,ranged": 7, "featurefs_archive_gets_total,stream": 2,
		"featurefs_archive_read_bytes_total": 1000, "featurefs_archive_streamed_members_total": 9,
		"featurefs_archive_stream_breaks_total": 1, "featurefs_archive_bad_total": 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for name := range gather(t, Stats{}) {
		if strings.HasPrefix(name, "featurefs_archive_") {
			t.Errorf("no archives: %s exported", name)
		}
	}
}
