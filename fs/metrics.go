package fs

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featurefs/featurefs/fs/figures"
)

// Collector returns a prometheus.Collector exporting f's figures under the
// featurefs_ prefix. Each scrape reads one Stats snapshot, the same figures
// as MOUNT/.featurefs/stats.
func (f *FS) Collector() prometheus.Collector { return figures.NewCollector(f.Stats) }

// MetricsHandler returns an http.Handler serving f's metrics, with the Go
// runtime's and the process's, in the Prometheus exposition format. It uses
// a registry of its own (nothing global).
func MetricsHandler(f *FS) http.Handler { return figures.MetricsHandler(f.Stats) }
