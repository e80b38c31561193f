package fs

import (
	"context"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// layersFile is features/<model>/layers: the model's layer table (index,
// tensor, shape, bytes per sample, cumulative GFLOPs, digest). Replaced
// when the model is (FS.ModelReplaced).
type layersFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs   *FS
	data atomic.Pointer[[]byte]
}

func newLayersFile(f *FS, table string) *layersFile {
	lf := &layersFile{fs: f, noOpen: noOpen{f}}
	b := []byte(table)
	lf.data.Store(&b)
	return lf
}

var _ = (gofs.NodeGetattrer)((*layersFile)(nil))
var _ = (gofs.NodeReader)((*layersFile)(nil))

// Getattr reports the table's size.
func (lf *layersFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fileAttr(&out.Attr, int64(len(*lf.data.Load())), lf.fs.p.Started())
	return 0
}

// Read returns part of the table. The kernel keeps its pages (noOpen)
// until a reload replaces it.
func (lf *layersFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return fuse.ReadResultData(sliceAt(*lf.data.Load(), dest, off)), 0
}

// sliceAt returns the part of data a read of len(dest) bytes at off sees.
func sliceAt(data, dest []byte, off int64) []byte {
	if off >= int64(len(data)) || off < 0 {
		return nil
	}
	return data[off:min(off+int64(len(dest)), int64(len(data)))]
}
