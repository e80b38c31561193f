package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
)

// maxPlainBytes bounds a plain file's content (a label, a caption, a JSON
// record: small).
const maxPlainBytes = 16 << 20

// plainFile is an object shown as it is, read-only: an archive member
// beside an image of the same sample (bucket.Object.Plain; WebDataset's
// key.cls, key.json, key.txt), so that labels travel with the features.
// Every read GETs the object (one ranged GET of the member); the kernel
// keeps its pages (noOpen).
type plainFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs  *FS
	obj bucket.Object
}

var _ = (gofs.NodeGetattrer)((*plainFile)(nil))
var _ = (gofs.NodeReader)((*plainFile)(nil))

// Getattr reports the object's size and time.
func (pf *plainFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fileAttr(&out.Attr, pf.obj.Size, pf.obj.ModTime)
	return 0
}

// Read returns part of the object's bytes.
func (pf *plainFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	data, _, err := pf.fs.p.Bucket().Get(ctx, pf.obj.Key, maxPlainBytes)
	if err != nil {
		return nil, pf.fs.errno(err, pf.obj.Key)
	}
	return fuse.ReadResultData(sliceAt(data, dest, off)), 0
}
