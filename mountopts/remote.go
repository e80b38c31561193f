package mountopts

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// RemoteOptions are the settings of a mount of feature servers
// (`featurefs mount --remote URL[,URL...] MOUNTPOINT`, docs/SERVE.md).
type RemoteOptions struct {
	// URLs are the feature servers (featurefs serve), http:// or
	// https://HOST:PORT (--remote, comma-separated). Empty: an embedded
	// mount of SOURCE.
	URLs []string
	// TokenFile holds the bearer token sent to the servers
	// (--remote-token-file). Empty: $FEATUREFS_TOKEN.
	TokenFile string
	// CAFile is a PEM file of CA certificates to trust for https:// servers
	// besides the system's (--remote-ca).
	CAFile string
	// Timeout is how long a server may stay silent before the reads
	// waiting on it fail with EIO (--remote-timeout).
	Timeout time.Duration
	// MaxBatch is the most features asked for in one request
	// (--remote-max-batch).
	MaxBatch int
	// BatchWait is how long a request waits for more reads to join it
	// (--remote-batch-wait).
	BatchWait time.Duration
	// MaxInFlight is the most batch requests in flight per server
	// (--remote-max-inflight).
	MaxInFlight int
	// Split is split execution (--split, docs/SPLIT.md): auto, none, raw or
	// a layer number; all but none need the --model files (the servers'
	// models). Empty: none.
	Split string
}

// DefaultRemote returns the defaults of the remote settings (no URL), from
// the option table.
func DefaultRemote() RemoteOptions { return Default().Remote }

// SetURLs parses a --remote value: comma-separated server URLs.
func (r *RemoteOptions) SetURLs(value string) error {
	var urls []string
	for u := range strings.SplitSeq(value, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return fmt.Errorf("--remote %q: want URL[,URL...], e.g. http://storage1:7070", value)
	}
	r.URLs = append(r.URLs, urls...)
	return nil
}

// Enabled reports whether the mount is of feature servers.
func (r *RemoteOptions) Enabled() bool { return len(r.URLs) > 0 }

// checkURLs checks the --remote URLs.
func (r *RemoteOptions) checkURLs() error {
	var errs []error
	for _, raw := range r.URLs {
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("--remote %q: want http://HOST:PORT or https://HOST:PORT", raw))
		} else if _, _, err := net.SplitHostPort(u.Host); err != nil && u.Port() == "" && u.Scheme == "http" {
			errs = append(errs, fmt.Errorf("--remote %q: name the port, e.g. http://%s:7070", raw, u.Host))
		}
	}
	return errors.Join(errs...)
}
