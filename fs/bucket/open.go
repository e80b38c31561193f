package bucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/featurefs/featurefs/extractor/spec"
)

// Defaults used by DefaultS3Options and for zero-valued S3Options fields.
const (
	// DefaultTimeout bounds one HTTP attempt (request and body read).
	DefaultTimeout = 60 * time.Second
	// DefaultMaxRetries is the number of retries after a failed attempt.
	DefaultMaxRetries = 3
	// DefaultMaxConcurrentGets bounds the concurrent GETs of one bucket.
	DefaultMaxConcurrentGets = 64
	// DefaultMaxObjectBytes bounds a Get called with maxBytes <= 0: the
	// one default of --max-object-size (spec.DefaultMaxObjectSize).
	DefaultMaxObjectBytes = spec.DefaultMaxObjectSize
	// DefaultListPageSize is the number of entries one List call asks for.
	DefaultListPageSize = 1000
	// DefaultProbeTimeout bounds the reachability check Open makes.
	DefaultProbeTimeout = 10 * time.Second
	// DefaultListFanout is how many list requests a mount of an S3 source
	// has in flight at once for its listings (fs/namespace's
	// Config.ListFanout: key ranges of a large prefix, directories listed
	// ahead of a walk); a small share of DefaultMaxConcurrentGets, the
	// bound the bucket puts on its GETs, so that listing never takes more
	// of the store than reads may.
	DefaultListFanout = 8
)

// Errors Open returns (wrapped, with the cause) when an S3 source cannot be
// used. They let a caller tell the three common setup mistakes apart.
var (
	// ErrUnreachable is matched when the endpoint does not answer.
	ErrUnreachable = errors.New("endpoint unreachable")
	// ErrNoSuchBucket is matched when the bucket does not exist.
	ErrNoSuchBucket = errors.New("bucket does not exist")
	// ErrAccessDenied is matched when the store refuses the credentials.
	ErrAccessDenied = errors.New("access denied")
)

// S3Options configures Open. The zero value of each field means its
// default, so S3Options{} is usable; DefaultS3Options spells the defaults out.
// Only MaxConcurrentGets, MaxObjectBytes and ListPageSize apply to a local
// directory source.
type S3Options struct {
	// Endpoint is the base URL of an S3-compatible store, e.g.
	// "http://127.0.0.1:9000" for MinIO; empty means AWS S3.
	Endpoint string
	// Region is the signing region; empty means the AWS config's region,
	// else us-east-1.
	Region string
	// Profile names a shared-config profile (~/.aws/config); empty means the
	// default credential chain (environment, shared config, IMDS, ...).
	Profile string
	// PathStyle forces path-style addressing (http://host/bucket/key). It is
	// always on when Endpoint is set, as MinIO and Ceph RGW need it.
	PathStyle bool
	// Timeout bounds one HTTP attempt, including reading the body; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is the number of retries (exponential backoff with jitter)
	// after a failed attempt; 0 means DefaultMaxRetries, negative means none.
	MaxRetries int
	// MaxConcurrentGets bounds the Gets in flight on this bucket (a Get
	// waits, honouring its context, for a slot); 0 means
	// DefaultMaxConcurrentGets.
	MaxConcurrentGets int
	// MaxObjectBytes is the size limit of a Get called with maxBytes <= 0;
	// 0 means DefaultMaxObjectBytes.
	MaxObjectBytes int64
	// ListPageSize is the number of entries (objects + prefixes) one List
	// call returns at most; 0 means DefaultListPageSize (S3 caps it at 1000).
	ListPageSize int
	// ProbeTimeout bounds the reachability check Open makes; 0 means
	// DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Credentials, when non-nil, replaces the default credential chain
	// (tests use static credentials this way).
	Credentials aws.CredentialsProvider
	// NoProbe skips the listing Open makes to check the bucket: a feature
	// store that is down when a mount starts is used once it answers.
	NoProbe bool
}

// DefaultS3Options returns the default options: AWS S3, region from the AWS
// config (else us-east-1), the default credential chain, 60 s per attempt,
// 3 retries, 64 concurrent Gets, 256 MiB per object, 1000 entries per page.
func DefaultS3Options() S3Options {
	return S3Options{
		Timeout:           DefaultTimeout,
		MaxRetries:        DefaultMaxRetries,
		MaxConcurrentGets: DefaultMaxConcurrentGets,
		MaxObjectBytes:    DefaultMaxObjectBytes,
		ListPageSize:      DefaultListPageSize,
		ProbeTimeout:      DefaultProbeTimeout,
	}
}

// withDefaults fills zero fields with their defaults.
func (o S3Options) withDefaults() S3Options {
	d := DefaultS3Options()
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = d.MaxRetries
	}
	if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.MaxConcurrentGets <= 0 {
		o.MaxConcurrentGets = d.MaxConcurrentGets
	}
	if o.MaxObjectBytes <= 0 {
		o.MaxObjectBytes = d.MaxObjectBytes
	}
	if o.ListPageSize <= 0 {
		o.ListPageSize = d.ListPageSize
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = d.ProbeTimeout
	}
	return o
}

// Open returns the Bucket named by source: "s3://BUCKET[/PREFIX]" for S3 (or
// the S3-compatible store at opts.Endpoint), else a local directory given as
// a path or a "file://" URL. With a PREFIX, keys are relative to it.
//
// For S3, Open checks that the bucket can be listed, within
// opts.ProbeTimeout, and fails with one error matching ErrUnreachable,
// ErrNoSuchBucket or ErrAccessDenied for the three usual setup mistakes.
func Open(ctx context.Context, source string, opts S3Options) (Bucket, error) {
	opts = opts.withDefaults()
	switch {
	case strings.HasPrefix(source, "s3://"):
		name, prefix, _ := strings.Cut(strings.TrimPrefix(source, "s3://"), "/")
		if name == "" {
			return nil, fmt.Errorf("bucket: source %q: missing bucket name (want s3://BUCKET[/PREFIX])", source)
		}
		return openS3(ctx, name, prefix, opts)
	case strings.HasPrefix(source, "file://"):
		return openLocal(strings.TrimPrefix(source, "file://"), opts)
	case strings.Contains(source, "://"):
		return nil, fmt.Errorf("bucket: source %q: unsupported scheme (want s3://BUCKET[/PREFIX] or a directory)", source)
	case source == "":
		return nil, errors.New("bucket: empty source (want s3://BUCKET[/PREFIX] or a directory)")
	default:
		return openLocal(source, opts)
	}
}

// semaphore bounds concurrent operations; acquire honours ctx.
type semaphore chan struct{}

func (s semaphore) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s semaphore) release() { <-s }

// limit returns the effective size limit for a Get.
func limit(maxBytes, def int64) int64 {
	if maxBytes <= 0 {
		return def
	}
	return maxBytes
}

// checkPrefix validates a List prefix: "" or ending in '/'.
func checkPrefix(prefix string) error {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("bucket: list prefix %q must be empty or end in '/'", prefix)
	}
	return nil
}
