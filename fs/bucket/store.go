package bucket

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/cache/safefile"
)

// Store is a Bucket that also writes objects with user metadata: the
// backing of the feature store (package fs/featurestore). S3 stores keep
// the metadata as the object's x-amz-meta-* headers; a local directory keeps
// it in a sidecar file KEY + MetaSuffix, written before the object.
type Store interface {
	Bucket
	// Put writes an object with user metadata (names in lower case).
	Put(ctx context.Context, key string, data []byte, meta map[string]string) error
	// GetMeta is Get that also returns the object's user metadata (nil
	// when it has none).
	GetMeta(ctx context.Context, key string, maxBytes int64) ([]byte, Object, map[string]string, error)
}

// MetaSuffix ends the sidecar file that holds an object's user metadata in
// a local-directory Store.
const MetaSuffix = ".meta.json"

// OpenStore returns the writable Store named by dest, as Open names a
// source: "s3://BUCKET[/PREFIX]" (the bucket must exist) or a directory,
// created if missing.
func OpenStore(ctx context.Context, dest string, opts S3Options) (Store, error) {
	if dir, ok := strings.CutPrefix(dest, "file://"); ok || (!strings.Contains(dest, "://") && dest != "") {
		if !ok {
			dir = dest
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("bucket: store %s: %w", dest, err)
		}
	}
	b, err := Open(ctx, dest, opts)
	if err != nil {
		return nil, err
	}
	s, ok := b.(Store)
	if !ok {
		return nil, fmt.Errorf("bucket: store %s: not writable", dest)
	}
	return s, nil
}

var _ Store = (*s3Bucket)(nil)

// Put writes key with its user metadata (PutObject, one request).
func (b *s3Bucket) Put(ctx context.Context, key string, data []byte, meta map[string]string) error {
	if key == "" || strings.HasSuffix(key, "/") {
		return fmt.Errorf("bucket: put %s: invalid key", b.url(key))
	}
	_, err := b.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(b.name),
		Key:           aws.String(b.prefix + key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/octet-stream"),
		Metadata:      meta,
	})
	if err != nil {
		return fmt.Errorf("bucket: put %s: %w", b.url(key), err)
	}
	return nil
}

// GetMeta is Get that also returns the user metadata.
func (b *s3Bucket) GetMeta(ctx context.Context, key string, maxBytes int64) ([]byte, Object, map[string]string, error) {
	var meta map[string]string
	data, obj, err := b.get(ctx, key, maxBytes, &meta)
	return data, obj, meta, err
}

var _ Store = (*localBucket)(nil)

// Put writes the file key (its directories as needed) and its metadata
// sidecar (none for empty metadata), each to a temporary name renamed into
// place, the sidecar first:
// a reader may see new metadata with old data, never a torn file, and the
// checksum in the metadata tells the two apart.
func (b *localBucket) Put(ctx context.Context, key string, data []byte, meta map[string]string) error {
	if !cleanKey(key) || strings.HasSuffix(key, MetaSuffix) {
		return fmt.Errorf("bucket: put %q: invalid key", key)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bucket: put %s: %w", b.url(key), err)
	}
	if dir := path.Dir(key); dir != "." {
		if err := b.root.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("bucket: put %s: %w", b.url(key), err)
		}
	}
	if len(meta) == 0 {
		if err := b.root.Remove(key + MetaSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("bucket: put %s: %w", b.url(key), err)
		}
		return b.writeRename(key, data)
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("bucket: put %s: %w", b.url(key), err)
	}
	if err := b.writeRename(key+MetaSuffix, m); err != nil {
		return err
	}
	return b.writeRename(key, data)
}

// writeRename writes data to a temporary file (O_EXCL) beside key and
// renames it to key, inside the store's root: nothing outside the
// directory is written, and a symbolic link at key is refused
// (cache/safefile).
func (b *localBucket) writeRename(key string, data []byte) error {
	if err := safefile.WriteFileIn(b.root, filepath.FromSlash(key), data, 0o600); err != nil {
		return fmt.Errorf("bucket: put %s: %w", b.url(key), err)
	}
	return nil
}

// GetMeta is Get that also reads the metadata sidecar (nil metadata when
// there is none).
func (b *localBucket) GetMeta(ctx context.Context, key string, maxBytes int64) ([]byte, Object, map[string]string, error) {
	data, obj, err := b.Get(ctx, key, maxBytes)
	if err != nil {
		return nil, Object{}, nil, err
	}
	raw, err := b.root.ReadFile(key + MetaSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return data, obj, nil, nil
	}
	if err != nil {
		return nil, Object{}, nil, fmt.Errorf("bucket: get %s: metadata: %w", b.url(key), err)
	}
	var meta map[string]string
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, Object{}, nil, fmt.Errorf("bucket: get %s: metadata: %w", b.url(key), err)
	}
	return data, obj, meta, nil
}

var _ Bucket = (*s3Bucket)(nil)

// Keys lists the keys under keyPrefix in its directory (ListObjectsV2 with
// a delimiter, at most max keys).
func (b *s3Bucket) Keys(ctx context.Context, keyPrefix string, n int) ([]string, error) {
	out, err := b.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:    aws.String(b.name),
		Prefix:    aws.String(b.prefix + keyPrefix),
		Delimiter: aws.String("/"),
		MaxKeys:   aws.Int32(int32(min(max(n, 1), 1000))),
	})
	if err != nil {
		return nil, fmt.Errorf("bucket: list %s: %w", b.url(keyPrefix), err)
	}
	var keys []string
	for _, o := range out.Contents {
		if k := strings.TrimPrefix(aws.ToString(o.Key), b.prefix); k != "" && !strings.HasSuffix(k, "/") {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

var _ Bucket = (*localBucket)(nil)

// Keys returns the regular files of keyPrefix's directory whose names start
// with its last component.
func (b *localBucket) Keys(ctx context.Context, keyPrefix string, n int) ([]string, error) {
	dir, part := path.Split(keyPrefix)
	rel := "."
	if dir != "" {
		rel = strings.TrimSuffix(dir, "/")
		if !cleanKey(rel) {
			return nil, nil
		}
	}
	f, err := b.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(b.notFound("list", rel+"/", err), ErrNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("bucket: list %s: %w", b.url(keyPrefix), err)
	}
	defer f.Close()
	names, err := b.sortedNames(ctx, rel, f)
	if err != nil {
		return nil, err
	}
	var keys []string
	for i := sort.SearchStrings(names, part); i < len(names) && strings.HasPrefix(names[i], part) && len(keys) < n; i++ {
		if fi, err := b.root.Stat(dir + names[i]); err == nil && fi.Mode().IsRegular() {
			keys = append(keys, dir+names[i])
		}
	}
	return keys, nil
}
