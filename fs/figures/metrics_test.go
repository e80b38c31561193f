package figures

import (
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
