package mountopts

import (
	"errors"
	"fmt"
	"time"

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

// DefaultServe returns the defaults of the serve settings, from the option
// table.
func DefaultServe() ServeOptions { return Default().Serve }

// Validate checks the serve settings and returns all problems found, one
// per line: each option's own check (the table), then the rules that tie
// them together.
func (s *ServeOptions) Validate() error {
	o := Options{Serve: *s}
	errs := o.checks(serveGroup)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.NoAuth && s.TokenFile != "" {
		bad("--no-auth and --token-file: choose one")
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		bad("--tls-cert and --tls-key: give both or neither")
	}
	if s.MaxBufferedBytesPerRequest < MiB || s.MaxBufferedBytesPerRequest > s.MaxBufferedBytes {
		bad("--max-buffered-bytes-per-request %s: must be at least 1MiB and at most --max-buffered-bytes (%s)",
			FormatSize(s.MaxBufferedBytesPerRequest), FormatSize(s.MaxBufferedBytes))
	}
	return errors.Join(errs...)
}
