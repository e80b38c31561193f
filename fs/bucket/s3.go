package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// s3Bucket is a Bucket over S3 or an S3-compatible store.
type s3Bucket struct {
	// Constant data.
	client   *s3.Client
	name     string // bucket name
	prefix   string // "" or ending in '/'; prepended to every key
	identity string
	where    string // endpoint for messages: URL or "AWS S3 (region R)"
	pageSize int32
	maxBytes int64
	sem      semaphore // bounds Gets in flight
}

var _ Bucket = (*s3Bucket)(nil)

// openS3 builds the client and probes the bucket.
func openS3(ctx context.Context, name, prefix string, opts S3Options) (*s3Bucket, error) {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	source := "s3://" + name + "/" + prefix
	source = strings.TrimSuffix(source, "/")

	httpClient := awshttp.NewBuildableClient().
		WithTimeout(opts.Timeout).
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = min(d.Timeout, opts.Timeout) }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = max(tr.MaxIdleConns, opts.MaxConcurrentGets+16)
			tr.MaxIdleConnsPerHost = opts.MaxConcurrentGets + 16
		})
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = opts.MaxRetries + 1
				// Every request gets its retries: the GET semaphore, not a
				// retry quota, bounds the load during an outage.
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	if opts.Profile != "" {
		loadOpts = append(loadOpts, config.WithSharedConfigProfile(opts.Profile))
	}
	if opts.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(opts.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("bucket: %s: loading AWS configuration: %w", source, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if opts.Endpoint == "" && cfg.BaseEndpoint != nil {
		opts.Endpoint = *cfg.BaseEndpoint // AWS_ENDPOINT_URL[_S3] or the profile's endpoint_url
	}

	probeCtx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	defer cancel()
	// No credentials at all: go on anonymously (public buckets work), and
	// say why if the store then refuses.
	var credErr error
	if _, err := cfg.Credentials.Retrieve(probeCtx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bucket: %s: %w", source, ctx.Err())
		}
		credErr = err
		cfg.Credentials = aws.AnonymousCredentials{}
	}

	b := &s3Bucket{
		name:     name,
		prefix:   prefix,
		pageSize: int32(min(opts.ListPageSize, 1000)),
		maxBytes: opts.MaxObjectBytes,
		sem:      make(semaphore, opts.MaxConcurrentGets),
	}
	host := "aws"
	b.where = "AWS S3 (region " + cfg.Region + ")"
	if opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("bucket: %s: endpoint %q is not an http(s)://HOST[:PORT] URL", source, opts.Endpoint)
		}
		host = u.Host
		b.where = opts.Endpoint
	}
	b.identity = "s3://" + host + "/" + name + "/" + prefix
	b.client = s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
			o.UsePathStyle = true
		}
		if opts.PathStyle {
			o.UsePathStyle = true
		}
		o.DisableLogOutputChecksumValidationSkipped = true
	})

	if opts.NoProbe {
		return b, nil
	}
	// Probe: a one-key listing under the prefix (needs only s3:ListBucket
	// on that prefix, unlike HeadBucket).
	_, err = b.client.ListObjectsV2(probeCtx, &s3.ListObjectsV2Input{
		Bucket:  aws.String(name),
		Prefix:  aws.String(prefix),
		MaxKeys: aws.Int32(1),
	}, func(o *s3.Options) {
		o.Retryer = retry.AddWithMaxAttempts(o.Retryer, min(2, opts.MaxRetries+1))
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bucket: %s: %w", source, ctx.Err())
		}
		return nil, b.probeError(source, err, credErr, probeCtx.Err() != nil)
	}
	return b, nil
}

// openError is Open's error: one line a user can act on, matching both a
// kind (ErrUnreachable, ...) and the cause.
type openError struct {
	msg         string
	kind, cause error
}

func (e *openError) Error() string   { return e.msg }
func (e *openError) Unwrap() []error { return []error{e.kind, e.cause} }

func (b *s3Bucket) probeError(source string, err, credErr error, timedOut bool) error {
	code, status := apiCode(err)
	switch {
	case code == "NoSuchBucket":
		return &openError{fmt.Sprintf("bucket: %s: bucket %q does not exist at %s", source, b.name, b.where), ErrNoSuchBucket, err}
	case status == http.StatusForbidden || code == "AccessDenied" || code == "InvalidAccessKeyId" ||
		code == "SignatureDoesNotMatch" || code == "InvalidToken" || code == "ExpiredToken":
		msg := fmt.Sprintf("bucket: %s: access denied: check credentials (%s)", source, apiMessage(err))
		if credErr != nil {
			msg = fmt.Sprintf("bucket: %s: access denied: no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or --profile): %v", source, credErr)
		}
		return &openError{msg, ErrAccessDenied, err}
	case code == "" && (timedOut || isSendError(err)):
		return &openError{fmt.Sprintf("bucket: %s: endpoint %s unreachable: %s", source, b.where, netCause(err, timedOut)), ErrUnreachable, err}
	}
	return fmt.Errorf("bucket: %s: listing at %s failed: %w", source, b.where, err)
}

// apiCode returns the S3 error code and HTTP status of err, if any.
func apiCode(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func apiMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if m := ae.ErrorMessage(); m != "" {
			return ae.ErrorCode() + ": " + m
		}
		return ae.ErrorCode()
	}
	return err.Error()
}

func isSendError(err error) bool {
	var se *smithyhttp.RequestSendError
	var ne net.Error
	return errors.As(err, &se) || errors.As(err, &ne)
}

// netCause returns the innermost network error's text, the useful part of
// the SDK's long message.
func netCause(err error, timedOut bool) string {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	if timedOut {
		return "no answer within the probe timeout"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// isNotFound reports whether err says the object does not exist.
func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	code, status := apiCode(err)
	return code == "NoSuchKey" || code == "NotFound" || (status == http.StatusNotFound && code != "NoSuchBucket")
}

// Identity returns "s3://HOST/BUCKET/PREFIX", HOST being the endpoint's
// host:port or "aws".
func (b *s3Bucket) Identity() string { return b.identity }

func (b *s3Bucket) url(key string) string { return "s3://" + b.name + "/" + b.prefix + key }

func (b *s3Bucket) wrap(op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("bucket: %s %s: %w", op, b.url(key), ErrNotFound)
	}
	return fmt.Errorf("bucket: %s %s: %w", op, b.url(key), err)
}

func etag(s *string) string { return strings.Trim(aws.ToString(s), `"`) }

// List returns one ListObjectsV2 page of the entries directly under prefix,
// from a continuation token or, for a token of AfterToken, its StartAfter.
// Keys ending in '/' (folder markers) are left out.
func (b *s3Bucket) List(ctx context.Context, prefix, token string) (Page, error) {
	return b.list(ctx, prefix, token, b.pageSize)
}

var _ Peeker = (*s3Bucket)(nil)

// Peek lists the first n entries under prefix (one small ListObjectsV2).
func (b *s3Bucket) Peek(ctx context.Context, prefix string, n int) (Page, error) {
	return b.list(ctx, prefix, "", int32(min(max(n, 1), int(b.pageSize))))
}

func (b *s3Bucket) list(ctx context.Context, prefix, token string, maxKeys int32) (Page, error) {
	if err := checkPrefix(prefix); err != nil {
		return Page{}, err
	}
	in := &s3.ListObjectsV2Input{
		Bucket:    aws.String(b.name),
		Prefix:    aws.String(b.prefix + prefix),
		Delimiter: aws.String("/"),
		MaxKeys:   aws.Int32(maxKeys),
	}
	if key, ok := AfterKey(token); ok {
		in.StartAfter = aws.String(b.prefix + key)
	} else if token != "" {
		in.ContinuationToken = aws.String(token)
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return Page{}, fmt.Errorf("bucket: list %s: %w", b.url(prefix), err)
	}
	var page Page
	for _, p := range out.CommonPrefixes {
		page.Prefixes = append(page.Prefixes, strings.TrimPrefix(aws.ToString(p.Prefix), b.prefix))
	}
	for _, o := range out.Contents {
		key := strings.TrimPrefix(aws.ToString(o.Key), b.prefix)
		if key == "" || strings.HasSuffix(key, "/") {
			continue
		}
		page.Objects = append(page.Objects, Object{
			Key:     key,
			Size:    aws.ToInt64(o.Size),
			ETag:    etag(o.ETag),
			ModTime: aws.ToTime(o.LastModified),
		})
	}
	if aws.ToBool(out.IsTruncated) {
		page.Next = aws.ToString(out.NextContinuationToken)
	}
	return page, nil
}

// Stat returns an object's metadata (HeadObject).
func (b *s3Bucket) Stat(ctx context.Context, key string) (Object, error) {
	if key == "" {
		return Object{}, fmt.Errorf("bucket: stat %s: %w", b.url(key), ErrNotFound)
	}
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(b.name),
		Key:    aws.String(b.prefix + key),
	})
	if err != nil {
		return Object{}, b.wrap("stat", key, err)
	}
	return Object{
		Key:     key,
		Size:    aws.ToInt64(out.ContentLength),
		ETag:    etag(out.ETag),
		ModTime: aws.ToTime(out.LastModified),
	}, nil
}

// Get reads an object of at most maxBytes (<= 0: the bucket's
// MaxObjectBytes), waiting for one of the bucket's GET slots first.
func (b *s3Bucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, Object, error) {
	return b.get(ctx, key, maxBytes, nil)
}

// get is Get that also stores the user metadata in *meta when meta is not
// nil.
func (b *s3Bucket) get(ctx context.Context, key string, maxBytes int64, meta *map[string]string) ([]byte, Object, error) {
	if key == "" {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), ErrNotFound)
	}
	if err := b.sem.acquire(ctx); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	defer b.sem.release()
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(b.name),
		Key:    aws.String(b.prefix + key),
	})
	if err != nil {
		return nil, Object{}, b.wrap("get", key, err)
	}
	defer out.Body.Close()
	lim := limit(maxBytes, b.maxBytes)
	obj := Object{Key: key, ETag: etag(out.ETag), ModTime: aws.ToTime(out.LastModified)}
	if meta != nil {
		*meta = out.Metadata
	}
	var data []byte
	if out.ContentLength != nil && *out.ContentLength >= 0 {
		n := *out.ContentLength
		if n > lim {
			return nil, Object{}, fmt.Errorf("bucket: get %s: %d bytes, limit %d: %w", b.url(key), n, lim, ErrTooLarge)
		}
		data = make([]byte, n)
		if _, err := io.ReadFull(out.Body, data); err != nil {
			return nil, Object{}, fmt.Errorf("bucket: get %s: reading body: %w", b.url(key), err)
		}
		// Read to EOF: a checksum-validating body reports a mismatch there.
		if extra, err := io.Copy(io.Discard, io.LimitReader(out.Body, 1)); err != nil || extra != 0 {
			if err == nil {
				err = errors.New("body longer than Content-Length")
			}
			return nil, Object{}, fmt.Errorf("bucket: get %s: reading body: %w", b.url(key), err)
		}
	} else {
		data, err = io.ReadAll(io.LimitReader(out.Body, lim+1))
		if err != nil {
			return nil, Object{}, fmt.Errorf("bucket: get %s: reading body: %w", b.url(key), err)
		}
		if int64(len(data)) > lim {
			return nil, Object{}, fmt.Errorf("bucket: get %s: more than %d bytes: %w", b.url(key), lim, ErrTooLarge)
		}
	}
	obj.Size = int64(len(data))
	return data, obj, nil
}

var _ Ranger = (*s3Bucket)(nil)

// GetRange reads n bytes of key from off (one GetObject with a Range
// header), waiting for one of the bucket's GET slots first.
func (b *s3Bucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, Object, error) {
	if key == "" {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), ErrNotFound)
	}
	if off < 0 || n <= 0 {
		return nil, Object{}, fmt.Errorf("bucket: get %s: bad range %d+%d", b.url(key), off, n)
	}
	if err := b.sem.acquire(ctx); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	defer b.sem.release()
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(b.name),
		Key:    aws.String(b.prefix + key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	})
	if err != nil {
		return nil, Object{}, b.wrap("get", key, err)
	}
	defer out.Body.Close()
	obj := Object{Key: key, ETag: etag(out.ETag), ModTime: aws.ToTime(out.LastModified), Size: -1}
	// Content-Range: "bytes START-END/TOTAL".
	if cr := aws.ToString(out.ContentRange); cr != "" {
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			var total int64
			if _, err := fmt.Sscan(cr[i+1:], &total); err == nil {
				obj.Size = total
			}
		}
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, n+1))
	if err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: reading body: %w", b.url(key), err)
	}
	if int64(len(data)) > n {
		return nil, Object{}, fmt.Errorf("bucket: get %s: range %d+%d: the store sent more", b.url(key), off, n)
	}
	if obj.Size < 0 {
		obj.Size = off + int64(len(data))
	}
	return data, obj, nil
}
