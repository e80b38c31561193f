package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/httplimit"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/mountopts"
)

const serveUsage = `Usage: featurefs serve [flags] SOURCE       SOURCE = s3://BUCKET[/PREFIX] | DIR

Serves SOURCE's features over HTTP next to the store (near-data mode), for
'featurefs mount --remote URL MOUNTPOINT' on training hosts. The API and the
flags are described in docs/SERVE.md. Clients must send the bearer token in
--token-file (or, without it, the token in $FEATUREFS_TOKEN) unless --no-auth.
Reloads a model file that changed, or all on SIGHUP (docs/MODELS.md, Reload).
Stops on SIGTERM/SIGINT.
Exit codes as featurefs mount: 2 bad options, 4 model/ONNX Runtime/asked-for
GPU, 5 source, 6 cache directory, 1 other (e.g. the address is in use).

Flags:
`

// The time bounds of serve's requests (docs/SERVE.md, Bounds).
const (
	serveHeaderTimeout = 10 * time.Second // a request's headers (and a TLS handshake)
	serveBodyTimeout   = 30 * time.Second // a request's body, from its headers
	serveIdleTimeout   = 2 * time.Minute  // a kept-alive connection between requests
)

// serveFlags binds the serve flags (the option table's Serve set): the
// source, model and cache options shared with mount, and the server's own
// (o.Serve).
func serveFlags(o *mountopts.Options) *flag.FlagSet {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	bindOptions(fl, o, mountopts.Serve)
	return fl
}

// defaultServe returns serve's defaults: mount's, but for the cache
// directory (not a mount's: a server and a --remote mount of it may run on
// one host).
func defaultServe() mountopts.Options {
	o := mountopts.Default()
	o.CacheDir = mountopts.DefaultServeCacheDir()
	return o
}

// parseServe builds serve's options (parseWithConfig).
func parseServe(args []string) (mountopts.Options, mountopts.ServeOptions, []string, error) {
	o, pos, err := parseWithConfig(args, defaultServe,
		func(o *mountopts.Options) *mountopts.Options { return o }, serveFlags)
	return o, o.Serve, pos, err
}

func runServe(args []string) int {
	o, so, pos, err := parseServe(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stderr, serveUsage)
		fl := serveFlags(&o)
		fl.SetOutput(os.Stderr)
		fl.PrintDefaults()
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs serve: %v\nRun 'featurefs serve -h' for the flags.\n", err)
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintf(os.Stderr, "featurefs serve: want SOURCE, got %d arguments\n\n%s", len(pos), serveUsage)
		return exitUsage
	}
	if err := errors.Join(o.Validate(), so.Validate()); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs serve: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nfeaturefs serve: "))
		return validateCode(err)
	}
	source := pos[0]
	if !strings.Contains(source, "://") {
		if abs, err := filepath.Abs(source); err == nil {
			source = abs
		}
	}
	if err := serveFeatures(o, so, source); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs serve: %v\n", err)
		return exitCode(err)
	}
	return exitOK
}

// serveFeatures runs the feature server until SIGTERM or SIGINT.
func serveFeatures(o mountopts.Options, so mountopts.ServeOptions, source string) (err error) {
	token := ""
	if !so.NoAuth {
		if token, err = remote.LoadToken(so.TokenFile); err != nil {
			return failf(exitUsage, "--token-file: %w", err)
		}
		if token == "" {
			return failf(exitUsage, "no token: give --token-file FILE or set %s (or --no-auth on a trusted network)", remote.TokenEnv)
		}
	}
	log, logc, err := newLogger(o)
	if err != nil {
		return err
	}
	defer logc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warn := func(msg string) { fmt.Fprintf(os.Stderr, "featurefs serve: warning: %s\n", oneLine(msg)) }
	st, err := openStack(ctx, o, stackOptions{source: source, log: log, warn: warn,
		readTimeout: so.ItemTimeout, storeWait: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }() // after the server (deferred below) has closed

	srv, err := remote.NewServer(st.pipe, remote.ServerConfig{
		Token:           token,
		NoAuth:          so.NoAuth,
		MaxConcurrent:   so.MaxConcurrent,
		MaxBatchItems:   so.MaxBatchItems,
		MaxRequestBytes: so.MaxRequestBytes,
		Heartbeat:       so.Heartbeat,
		WireCompression: codecMethod(so.WireCompression),

		MaxBufferedBytes:           so.MaxBufferedBytes,
		MaxBufferedBytesPerRequest: so.MaxBufferedBytesPerRequest,
		WriteTimeout:               so.WriteTimeout,
		BodyTimeout:                serveBodyTimeout,
	})
	if err != nil {
		return failf(exitModel, "%w", err)
	}
	defer srv.Close() // after the HTTP server's shutdown, before the extractor and the cache close
	nl, err := net.Listen("tcp", so.Listen)
	if err != nil {
		return failf(exitOther, "--listen %s: %w", so.Listen, err)
	}
	maxConns, nofile := httplimit.ConnBudget(cmp.Or(so.MaxConns, httplimit.DefaultMaxConns))
	if so.MaxConns > maxConns {
		warn(fmt.Sprintf("--max-conns %d is more than the descriptor limit (%d) allows with a reserve for the cache and the store: holding at most %d", so.MaxConns, nofile, maxConns))
	}
	ln := httplimit.Wrap(nl, httplimit.Config{MaxConns: maxConns, MaxConnsPerPeer: so.MaxConnsPerPeer, Name: "serve", Logger: log})
	limits := ln.Stats()
	log.Info("featurefs serve: connection bounds", slog.Int("max_conns", limits.MaxConns), slog.Int("max_conns_per_peer", limits.MaxConnsPerPeer),
		slog.Uint64("descriptor_limit", nofile), slog.Duration("header_timeout", serveHeaderTimeout), slog.Duration("body_timeout", serveBodyTimeout),
		slog.Duration("write_timeout", so.WriteTimeout), slog.Int64("max_buffered_bytes", so.MaxBufferedBytes),
		slog.Int64("max_buffered_bytes_per_request", so.MaxBufferedBytesPerRequest))
	scheme := "http"
	if so.TLSCert != "" {
		scheme = "https"
	}
	// The server applies the body and write bounds itself (remote.Server).
	hs := ln.Server(srv, httplimit.Timeouts{Header: serveHeaderTimeout, Body: serveBodyTimeout, Write: so.WriteTimeout, Idle: serveIdleTimeout},
		slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	errc := make(chan error, 1)
	go func() {
		if scheme == "https" {
			errc <- hs.ServeTLS(ln, so.TLSCert, so.TLSKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	// SIGTERM and SIGINT are caught before the "listening" line: whoever
	// waits for that line to stop the server must not kill it.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// The model files are watched, and reloaded on SIGHUP, as a mount's
	// (reload.go); GET /v1/models and every answer's version follow.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	hup := make(chan struct{}, 1)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go func() {
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-hups:
				select {
				case hup <- struct{}{}:
				default: // a reload is already asked for
				}
			}
		}
	}()
	go watchModels(watchCtx, st.svc, log, hup, func(m *api.Model) {
		st.pipe.ModelsChanged()
		if err := srv.ModelsChanged(); err != nil {
			log.Warn("featurefs serve: the models answer could not be rebuilt", slog.Any("err", err))
		}
	})
	addr := scheme + "://" + ln.Addr().String()
	log.Info("featurefs serve: listening", slog.String("addr", addr), slog.String("source", st.source.Identity()),
		slog.String("device", st.ex.Device()), slog.Int("models", len(o.Models)), slog.Bool("auth", !so.NoAuth))
	// One line on stderr names the address (useful with --listen HOST:0).
	fmt.Fprintf(os.Stderr, "featurefs serve: listening on %s\n", addr)

	select {
	case err := <-errc:
		return failf(exitOther, "serving: %w", err)
	case s := <-sigs:
		log.Info("featurefs serve: stopping", slog.String("signal", s.String()))
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("featurefs serve: requests still running at shutdown", slog.Any("err", err))
		hs.Close()
	}
	return nil
}
