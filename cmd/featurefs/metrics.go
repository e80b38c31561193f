package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/httplimit"
)

// The metrics listener's bounds (docs/RELIABILITY.md).
const (
	metricsMaxConns        = 64
	metricsMaxConnsPerPeer = 16
	metricsTimeout         = 10 * time.Second // headers, a body, each 256 KiB of an answer
	metricsIdleTimeout     = time.Minute
)

// startMetrics listens on addr (--metrics-addr) and serves, until stop is
// called, the mount's Prometheus metrics at /metrics and the stats file's
// JSON at /stats. It listens before returning, so a bad or taken address
// fails the mount before anything is mounted.
func startMetrics(addr string, tree *featurefs.FS, log *slog.Logger) (stop func(), err error) {
	nl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, failf(exitUsage, "--metrics-addr %s: %w", addr, err)
	}
	// Small bounds: a scraper needs one connection, and this port must
	// never take the descriptors the filesystem needs.
	ln := httplimit.Wrap(nl, httplimit.Config{MaxConns: metricsMaxConns, MaxConnsPerPeer: metricsMaxConnsPerPeer, Name: "metrics", Logger: log})
	mux := http.NewServeMux()
	mux.Handle("/metrics", featurefs.MetricsHandler(tree))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(tree.Stats()); err != nil {
			log.Warn("featurefs: writing /stats", slog.Any("err", err))
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "featurefs: /metrics (Prometheus), /stats (JSON, as MOUNT/.featurefs/stats)\n")
	})
	srv := ln.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer httplimit.Admit(r)() // every request is served: none is kept before another
		mux.ServeHTTP(w, r)
	}), httplimit.Timeouts{Header: metricsTimeout, Body: metricsTimeout, Write: metricsTimeout, Idle: metricsIdleTimeout},
		slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("featurefs: metrics server stopped", slog.String("addr", addr), slog.Any("err", err))
		}
	}()
	log.Info("featurefs: serving metrics", slog.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	}, nil
}
