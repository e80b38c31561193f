package views

import (
	"context"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
)

// maxPlainBytes bounds a plain file's content (a label, a caption, a JSON
// record: small).
const maxPlainBytes = 16 << 20

// Object is an object shown as it is, read-only: an archive member beside
// an image of the same sample (bucket.Object.Plain; WebDataset's key.cls,
// key.json, key.txt), so that labels travel with the features. Every read
// GETs the object (one ranged GET of the member); the kernel keeps its
// pages.
type Object struct {
	b   bucket.Bucket
	obj bucket.Object
}

// NewObject returns obj of b as a File.
func NewObject(b bucket.Bucket, obj bucket.Object) *Object { return &Object{b: b, obj: obj} }

// Size is the object's.
func (o *Object) Size() int64 { return o.obj.Size }

// ModTime is the object's.
func (o *Object) ModTime() time.Time { return o.obj.ModTime }

// Version is 0: the inode number carries the object's ETag.
func (o *Object) Version() uint64 { return 0 }

// ReadAt copies the object's bytes at off.
func (o *Object) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	data, _, err := o.b.Get(ctx, o.obj.Key, maxPlainBytes)
	if err != nil {
		return 0, err
	}
	return copy(p, SliceAt(data, len(p), off)), nil
}
