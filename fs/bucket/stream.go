package bucket

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Streamer is implemented by buckets that can read part of an object as a
// stream: one request whose body is read as it comes, never held whole.
// fs/archive reads an archive's members in order with it (warm,
// prefetch).
type Streamer interface {
	// GetStream opens key from offset off for n bytes (n <= 0: to the
	// object's end) and returns its body and the object's metadata (Size
	// is the whole object's). The stream holds one of the bucket's GET
	// slots until it is closed.
	GetStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, Object, error)
}

var (
	_ Streamer = (*s3Bucket)(nil)
	_ Streamer = (*localBucket)(nil)
)

// slotBody releases a GET slot when its body is closed (once).
type slotBody struct {
	io.ReadCloser
	release func()
	done    bool
}

func (s *slotBody) Close() error {
	err := s.ReadCloser.Close()
	if !s.done {
		s.done = true
		s.release()
	}
	return err
}

// GetStream opens key from off with one GetObject (a Range header unless
// it is the whole object), holding one of the bucket's GET slots until
// the body is closed.
func (b *s3Bucket) GetStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, Object, error) {
	if key == "" {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), ErrNotFound)
	}
	if off < 0 {
		return nil, Object{}, fmt.Errorf("bucket: get %s: bad offset %d", b.url(key), off)
	}
	if err := b.sem.acquire(ctx); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(b.name), Key: aws.String(b.prefix + key)}
	switch {
	case n > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		b.sem.release()
		return nil, Object{}, b.wrap("get", key, err)
	}
	obj := Object{Key: key, ETag: etag(out.ETag), ModTime: aws.ToTime(out.LastModified), Size: -1}
	if cr := aws.ToString(out.ContentRange); cr != "" {
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			var total int64
			if _, err := fmt.Sscan(cr[i+1:], &total); err == nil {
				obj.Size = total
			}
		}
	} else if out.ContentLength != nil {
		obj.Size = *out.ContentLength
	}
	return &slotBody{ReadCloser: out.Body, release: b.sem.release}, obj, nil
}

// GetStream opens the regular file key from off (n <= 0: to its end).
func (b *localBucket) GetStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, Object, error) {
	if !cleanKey(key) {
		return nil, Object{}, fmt.Errorf("bucket: get %q: %w", key, ErrNotFound)
	}
	if off < 0 {
		return nil, Object{}, fmt.Errorf("bucket: get %s: bad offset %d", b.url(key), off)
	}
	if err := b.sem.acquire(ctx); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	f, fi, err := b.openRegular(key)
	if err != nil {
		b.sem.release()
		return nil, Object{}, err
	}
	end := fi.Size()
	if n > 0 {
		end = min(end, off+n)
	}
	body := struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, max(end-off, 0)), f}
	return &slotBody{ReadCloser: body, release: b.sem.release}, objectFromInfo(key, fi), nil
}
