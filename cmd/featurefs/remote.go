package main

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/mountopts"
)

// remoteSource is the SOURCE shown for a remote mount (/proc/mounts).
func remoteSource(r mountopts.RemoteOptions) string {
	return "featurefs+" + strings.Join(r.URLs, ",")
}

// unknownAuthority reports whether err is a TLS handshake that failed
// because the server's certificate chains to no trusted CA.
func unknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua)
}

// dialRemote connects to the feature servers of a --remote mount.
func dialRemote(ctx context.Context, r mountopts.RemoteOptions, metadataTTL time.Duration, log *slog.Logger) (*remote.Client, error) {
	token, err := remote.LoadToken(r.TokenFile)
	if err != nil {
		return nil, failf(exitUsage, "--remote-token-file: %w", err)
	}
	tlsCfg, err := remote.TLSConfig(r.CAFile)
	if err != nil {
		return nil, failf(exitUsage, "--remote-ca: %w", err)
	}
	c, err := remote.Dial(ctx, remote.ClientConfig{
		URLs:        r.URLs,
		Token:       token,
		TLS:         tlsCfg,
		Timeout:     r.Timeout,
		MaxBatch:    r.MaxBatch,
		MaxWait:     r.BatchWait,
		MaxInFlight: r.MaxInFlight,
		// The servers' model version is asked for as often as listings
		// are read again (at least every second): a mount whose reads
		// all hit its cache follows a reload within --metadata-ttl.
		PollInterval: max(metadataTTL, time.Second),
		Logger:       log,
	})
	switch {
	case errors.Is(err, remote.ErrUnauthorized) && token == "":
		return nil, failf(exitSource, "--remote %s: the feature server wants a token and none was given: pass --remote-token-file FILE (a copy of the server's --token-file) or set %s",
			strings.Join(r.URLs, ","), remote.TokenEnv)
	case errors.Is(err, remote.ErrUnauthorized):
		return nil, failf(exitSource, "--remote: %w (check --remote-token-file or %s)", err, remote.TokenEnv)
	case err != nil && unknownAuthority(err) && r.CAFile == "":
		return nil, failf(exitSource, "--remote: %s (the server's certificate is signed by a CA this host does not trust: pass --remote-ca FILE, the PEM certificate of that CA)",
			strings.TrimPrefix(err.Error(), "remote: "))
	case err != nil && unknownAuthority(err):
		return nil, failf(exitSource, "--remote: %s (the server's certificate is not signed by a CA in --remote-ca %s or the system's)",
			strings.TrimPrefix(err.Error(), "remote: "), r.CAFile)
	case err != nil:
		return nil, failf(exitSource, "--remote: %s", strings.TrimPrefix(err.Error(), "remote: "))
	}
	log.Info("featurefs: feature servers", slog.String("source", c.Info().Source), slog.String("servers", strings.Join(c.URLs(), ",")),
		slog.String("device", c.Info().Device), slog.String("dtype", string(c.Info().DType)))
	return c, nil
}
