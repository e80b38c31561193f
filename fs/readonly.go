package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// readOnly answers EROFS to every change. Every node kind embeds it; the
// mount is read-only too, so the kernel usually answers before asking.
type readOnly struct{}

var (
	_ = (gofs.NodeSetattrer)((*readOnly)(nil))
	_ = (gofs.NodeCreater)((*readOnly)(nil))
	_ = (gofs.NodeMkdirer)((*readOnly)(nil))
	_ = (gofs.NodeMknoder)((*readOnly)(nil))
	_ = (gofs.NodeLinker)((*readOnly)(nil))
	_ = (gofs.NodeSymlinker)((*readOnly)(nil))
	_ = (gofs.NodeUnlinker)((*readOnly)(nil))
	_ = (gofs.NodeRmdirer)((*readOnly)(nil))
	_ = (gofs.NodeRenamer)((*readOnly)(nil))
	_ = (gofs.NodeSetxattrer)((*readOnly)(nil))
	_ = (gofs.NodeRemovexattrer)((*readOnly)(nil))
	_ = (gofs.NodeWriter)((*readOnly)(nil))
	_ = (gofs.NodeAllocater)((*readOnly)(nil))
	_ = (gofs.NodeCopyFileRanger)((*readOnly)(nil))
)

// Setattr refuses chmod, chown, truncate and utimes.
func (readOnly) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// Create refuses new files.
func (readOnly) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

// Mkdir refuses new directories.
func (readOnly) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Mknod refuses device nodes and fifos.
func (readOnly) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Link refuses hard links.
func (readOnly) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Symlink refuses symbolic links.
func (readOnly) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Unlink refuses removing files.
func (readOnly) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }

// Rmdir refuses removing directories.
func (readOnly) Rmdir(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }

// Rename refuses renames.
func (readOnly) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EROFS
}

// Setxattr refuses extended attributes.
func (readOnly) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.EROFS
}

// Removexattr refuses removing extended attributes.
func (readOnly) Removexattr(ctx context.Context, attr string) syscall.Errno { return syscall.EROFS }

// Write refuses writes.
func (readOnly) Write(ctx context.Context, f gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return 0, syscall.EROFS
}

// Allocate refuses fallocate.
func (readOnly) Allocate(ctx context.Context, f gofs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	return syscall.EROFS
}

// CopyFileRange refuses copy_file_range into the mount.
func (readOnly) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EROFS
}

// noOpen makes a file node's opens and closes cost no round trip to the
// daemon. Every file of the tree embeds it: its Open answers ENOSYS, and
// from the first such answer the kernel stops sending OPEN for any file of
// the mount (FUSE's no_open: a file's reads come without a handle, its
// close sends no RELEASE, and the kernel keeps its page cache across
// opens, as FOPEN_KEEP_CACHE did); its Flush answers ENOSYS, and the
// kernel stops sending FLUSH on close. The mount is read-only, so the
// kernel refuses an open for writing before it would ask. An open and
// close of a page-cached feature file cost about what they cost on a local
// disk (docs/bench/mount.md). What the OPEN did is done elsewhere: which
// object version a read serves (featureFile.Read), and dropping the
// kernel's pages of a file whose object changed (FS.dropChangedPages).
//
// The OPEN requests that do come are counted (FS.stats.opens): one per
// mount, or a few that raced the first answer.
type noOpen struct{ tree *FS }

var (
	_ = (gofs.NodeOpener)((*noOpen)(nil))
	_ = (gofs.NodeFlusher)((*noOpen)(nil))
)

// Open answers ENOSYS: see noOpen. With passthrough on (passthrough.go)
// it answers every open, keeping the kernel's page cache as no_open does:
// one ENOSYS would stop the kernel sending OPEN for any file of the
// mount, feature files included.
func (n noOpen) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if n.tree != nil {
		n.tree.stats.opens.Add(1)
		if n.tree.passthrough.Load() {
			return nil, fuse.FOPEN_KEEP_CACHE, 0
		}
	}
	return nil, 0, syscall.ENOSYS
}

// Flush answers ENOSYS: see noOpen.
func (noOpen) Flush(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	return syscall.ENOSYS
}

// dirAttr fills the attributes of a directory.
func (f *FS) dirAttr(out *fuse.Attr) {
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 2
	t := f.p.Started()
	out.SetTimes(&t, &t, &t)
}

// fileAttr fills the attributes of a regular file.
func fileAttr(out *fuse.Attr, size int64, mtime time.Time) {
	out.Mode = syscall.S_IFREG | 0o444
	out.Nlink = 1
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	// The preferred I/O size is a whole READ (maxRead): Python's open()
	// buffers st_blksize bytes, so np.load's first read(2) asks for the
	// whole of a layer12-sized file and the kernel sends one READ; with
	// 4096, that first small read started readahead at a few pages and
	// the rest of the file came in four more READs.
	out.Blksize = maxRead
	out.SetTimes(&mtime, &mtime, &mtime)
}
