package mountopts

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/spec"
)

// ServeOptions are the settings of `featurefs serve` beyond the Options it
// shares with mount (source, models, cache, device; docs/SERVE.md).
type ServeOptions struct {
	// Listen is the host:port the server listens on (--listen).
	Listen string
	// TokenFile holds the bearer token clients must send (--token-file).
	// Empty: $FEATUREFS_TOKEN.
	TokenFile string
	// NoAuth accepts requests without a token (--no-auth); for trusted
	// networks only.
	NoAuth bool
	// TLSCert and TLSKey are the PEM certificate and key to serve HTTPS
	// with (--tls-cert, --tls-key); both or neither.
	TLSCert, TLSKey string
	// MaxConcurrent bounds the features computed at once over all requests
	// (--max-concurrent).
	MaxConcurrent int
	// MaxBatchItems bounds the items of one batch request
	// (--max-batch-items).
	MaxBatchItems int
	// MaxRequestBytes bounds a request body (--max-request-bytes, e.g. 1MiB).
	MaxRequestBytes int64
	// ItemTimeout bounds the fetch and extraction of one feature
	// (--item-timeout).
	ItemTimeout time.Duration
	// Heartbeat is how often a batch stream with nothing to send sends a
	// heartbeat (--heartbeat).
	Heartbeat time.Duration
	// WireCompression is how features are compressed for clients that
	// accept it (--wire-compression): s2 (the default), zstd-fastest, zstd
	// or off.
	WireCompression string
	// MaxConns bounds the connections held at once (--max-conns; 0: 4096,
	// and never more than the descriptor limit less a reserve:
	// httplimit.ConnBudget).
	MaxConns int
	// MaxConnsPerPeer bounds the connections of one client address
	// (--max-conns-per-peer; an IPv6 /64 counts as one).
	MaxConnsPerPeer int
	// WriteTimeout bounds how long a client may take to accept each
	// 256 KiB of an answer (--write-timeout); past it the connection is
	// closed and its work cancelled.
	WriteTimeout time.Duration
	// MaxBufferedBytes bounds the bytes of answers computed and not yet
	// written, over all requests (--max-buffered-bytes).
	MaxBufferedBytes int64
	// MaxBufferedBytesPerRequest bounds them per request
	// (--max-buffered-bytes-per-request).
	MaxBufferedBytesPerRequest int64
}

// DefaultServeCacheDir is serve's default CacheDir,
// ~/.cache/featurefs/serve-cache: a mount's default cache directory is
// another (~/.cache/featurefs/cache), so that `featurefs serve` and
// `featurefs mount --remote` on one host run with their defaults.
func DefaultServeCacheDir() string { return spec.DefaultServeCacheDir() }

// DefaultServe returns the defaults of the serve settings.
func DefaultServe() ServeOptions {
	return ServeOptions{
		Listen:          "127.0.0.1:7070",
		MaxConcurrent:   64,
		MaxBatchItems:   1024,
		MaxRequestBytes: MiB,
		ItemTimeout:     5 * time.Minute,
		Heartbeat:       2 * time.Second,
		WireCompression: "s2",
		MaxConnsPerPeer: 128,
		WriteTimeout:    30 * time.Second,

		MaxBufferedBytes:           256 * MiB,
		MaxBufferedBytesPerRequest: 64 * MiB,
	}
}

// Validate checks the serve settings and returns all problems found, one
// per line.
func (s *ServeOptions) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		bad("--listen %q: want HOST:PORT, e.g. 0.0.0.0:7070", s.Listen)
	}
	if s.NoAuth && s.TokenFile != "" {
		bad("--no-auth and --token-file: choose one")
	}
	if s.TokenFile != "" {
		if _, err := os.Stat(s.TokenFile); err != nil {
			bad("--token-file %s: %v", s.TokenFile, errors.Unwrap(err))
		}
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		bad("--tls-cert and --tls-key: give both or neither")
	}
	for flag, p := range map[string]string{"--tls-cert": s.TLSCert, "--tls-key": s.TLSKey} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			bad("%s %s: %v", flag, p, errors.Unwrap(err))
		}
	}
	if s.MaxConcurrent <= 0 {
		bad("--max-concurrent %d: must be positive", s.MaxConcurrent)
	}
	if s.MaxBatchItems <= 0 {
		bad("--max-batch-items %d: must be positive", s.MaxBatchItems)
	}
	if s.MaxRequestBytes < 1024 {
		bad("--max-request-bytes %s: must be at least 1KiB", FormatSize(s.MaxRequestBytes))
	}
	if s.ItemTimeout <= 0 {
		bad("--item-timeout %v: must be positive", s.ItemTimeout)
	}
	if s.WireCompression != "off" {
		// zeros stays in the cache: mounts of older builds accept ffz1
		// blobs but do not know that method.
		if m, err := codec.ParseMethod(s.WireCompression); err != nil || m == codec.Zeros {
			bad("--wire-compression %q: s2, zstd-fastest, zstd or off", s.WireCompression)
		}
	}
	if s.Heartbeat <= 0 {
		bad("--heartbeat %v: must be positive", s.Heartbeat)
	}
	if s.MaxConns < 0 {
		bad("--max-conns %d: must be positive (0: from the descriptor limit)", s.MaxConns)
	}
	if s.MaxConnsPerPeer <= 0 {
		bad("--max-conns-per-peer %d: must be positive", s.MaxConnsPerPeer)
	}
	if s.WriteTimeout <= 0 {
		bad("--write-timeout %v: must be positive", s.WriteTimeout)
	}
	if s.MaxBufferedBytes < MiB {
		bad("--max-buffered-bytes %s: must be at least 1MiB", FormatSize(s.MaxBufferedBytes))
	}
	if s.MaxBufferedBytesPerRequest < MiB || s.MaxBufferedBytesPerRequest > s.MaxBufferedBytes {
		bad("--max-buffered-bytes-per-request %s: must be at least 1MiB and at most --max-buffered-bytes (%s)",
			FormatSize(s.MaxBufferedBytesPerRequest), FormatSize(s.MaxBufferedBytes))
	}
	return errors.Join(errs...)
}
