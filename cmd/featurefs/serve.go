package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/mountopts"
)

const serveUsage = `Usage: featurefs serve [flags] SOURCE       SOURCE = s3://BUCKET[/PREFIX] | DIR

Serves SOURCE's features over HTTP next to the store (near-data mode), for
'featurefs mount --remote URL MOUNTPOINT' on training hosts. The API and the
flags are described in docs/SERVE.md. Clients must send the bearer token in
--token-file (or, without it, the token in $FEATUREFS_TOKEN) unless --no-auth.
Stops on SIGTERM/SIGINT.
Exit codes as featurefs mount: 2 bad options, 4 model/ONNX Runtime/asked-for
GPU, 5 source, 6 cache directory, 1 other (e.g. the address is in use).

Flags:
`

// serveFlags binds the serve flags: the source, model and cache options
// shared with mount, and the server's own.
func serveFlags(o *mountopts.Options, so *mountopts.ServeOptions) *flag.FlagSet {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	sourceFlags(fl, o)
	fl.StringVar(&o.LogFile, "log-file", o.LogFile, "log `file` (default stderr)")
	fl.Var(funcFlag{show: func() string { return strings.Join(o.ImageExtensions, ",") }, set: o.SetImageExtensions},
		"image-extensions", "object extensions served as features, comma-separated")

	fl.StringVar(&so.Listen, "listen", so.Listen, "`HOST:PORT` to listen on")
	fl.StringVar(&so.TokenFile, "token-file", so.TokenFile, "`file` holding the bearer token clients must send (without it: the token itself from $FEATUREFS_TOKEN)")
	fl.BoolVar(&so.NoAuth, "no-auth", so.NoAuth, "accept requests without a token (trusted networks only)")
	fl.StringVar(&so.TLSCert, "tls-cert", so.TLSCert, "PEM certificate `file`: serve HTTPS")
	fl.StringVar(&so.TLSKey, "tls-key", so.TLSKey, "PEM key `file` of --tls-cert")
	fl.IntVar(&so.MaxConcurrent, "max-concurrent", so.MaxConcurrent, "features computed at once, over all requests (a computation keeps its slot until it ends, even when its client went away)")
	fl.IntVar(&so.MaxBatchItems, "max-batch-items", so.MaxBatchItems, "items per batch request")
	fl.Var(sizeFlag{&so.MaxRequestBytes}, "max-request-bytes", "bound on a request body, e.g. 1MiB")
	fl.DurationVar(&so.ItemTimeout, "item-timeout", so.ItemTimeout, "bound on the fetch and extraction of one feature")
	fl.DurationVar(&so.Heartbeat, "heartbeat", so.Heartbeat, "heartbeat interval of a batch stream with nothing to send")
	fl.StringVar(&so.WireCompression, "wire-compression", so.WireCompression, "how features are compressed for mounts that accept it: s2, zstd-fastest, zstd or off")
	return fl
}

// serveArgs are serve's options: the source's, and the server's own.
type serveArgs struct {
	o  mountopts.Options
	so mountopts.ServeOptions
}

// defaultServeArgs returns serve's defaults: mount's, but for the cache
// directory (not a mount's: a server and a --remote mount of it may run on
// one host), and the server's own.
func defaultServeArgs() serveArgs {
	o := mountopts.Default()
	o.CacheDir = mountopts.DefaultServeCacheDir()
	return serveArgs{o, mountopts.DefaultServe()}
}

// parseServe builds serve's options (parseWithConfig).
func parseServe(args []string) (mountopts.Options, mountopts.ServeOptions, []string, error) {
	v, pos, err := parseWithConfig(args,
		defaultServeArgs,
		func(v *serveArgs) *mountopts.Options { return &v.o },
		func(v *serveArgs) *flag.FlagSet { return serveFlags(&v.o, &v.so) })
	return v.o, v.so, pos, err
}

func runServe(args []string) int {
	o, so, pos, err := parseServe(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stderr, serveUsage)
		fl := serveFlags(&o, &so)
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
	b, err := openSource(ctx, source, o)
	if err != nil {
		return err
	}
	warn := func(msg string) { fmt.Fprintf(os.Stderr, "featurefs serve: warning: %s\n", oneLine(msg)) }
	warnIfEmpty(ctx, b, source, log, warn)
	store, err := openCache(o, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil {
			log.Error("featurefs serve: closing the cache", slog.Any("err", cerr))
			err = errors.Join(err, cerr)
		}
	}()
	fst, err := openFeatureStore(ctx, o, log, warn)
	if err != nil {
		return err
	}
	defer closeFeatureStore(fst, 10*time.Second, log) // after the server (deferred below) has closed
	svc, err := newExtractor(o, o.DType, log, warn)
	if err != nil {
		return err
	}
	defer svc.Close()

	srv, err := remote.NewServer(remote.ServerConfig{
		Bucket:          b,
		Extractor:       svc,
		Cache:           store,
		Logger:          log,
		Token:           token,
		NoAuth:          so.NoAuth,
		MaxConcurrent:   so.MaxConcurrent,
		MaxBatchItems:   so.MaxBatchItems,
		MaxRequestBytes: so.MaxRequestBytes,
		ItemTimeout:     so.ItemTimeout,
		Heartbeat:       so.Heartbeat,
		NegativeTTL:     o.NegativeTTL,
		MaxObjectSize:   o.MaxObjectSize,
		ImageExtensions: o.ImageExtensions,
		FeatureStore:    fst,
		WireCompression: codecMethod(so.WireCompression),
	})
	if err != nil {
		return failf(exitModel, "%w", err)
	}
	defer srv.Close() // after the HTTP server's shutdown, before the extractor and the cache close
	ln, err := net.Listen("tcp", so.Listen)
	if err != nil {
		return failf(exitOther, "--listen %s: %w", so.Listen, err)
	}
	scheme := "http"
	if so.TLSCert != "" {
		scheme = "https"
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
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
	addr := scheme + "://" + ln.Addr().String()
	log.Info("featurefs serve: listening", slog.String("addr", addr), slog.String("source", b.Identity()),
		slog.String("device", svc.Device()), slog.Int("models", len(o.Models)), slog.Bool("auth", !so.NoAuth))
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
