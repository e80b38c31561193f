package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/views"
)

// The generated directories and files (fs/views: arrays/, predictions/,
// augment.jsonl, the layers tables, plain members) are rendered by two
// generic nodes: viewDir over any views.Dir, viewFile over any
// views.File. A new view is a views.Dir or views.File and touches no
// go-fuse code.

// viewDir renders a views.Dir: its listing, and a node per name it looks
// up (a new one when the name's inode number changed: a changed file is a
// new file).
type viewDir struct {
	gofs.Inode
	readOnly
	fs   *FS
	dir  views.Dir
	path string // its path in the mount, with a final slash: for errors
}

var _ = (gofs.NodeGetattrer)((*viewDir)(nil))
var _ = (gofs.NodeLookuper)((*viewDir)(nil))
var _ = (gofs.NodeReaddirer)((*viewDir)(nil))
var _ = (gofs.NodeOnAdder)((*viewDir)(nil))
var _ = (gofs.NodeOnForgetter)((*viewDir)(nil))

// OnAdd counts the node in the metadata budget (budget.go).
func (d *viewDir) OnAdd(ctx context.Context) { d.fs.nodeAdded() }

// OnForget takes the node out of the metadata budget.
func (d *viewDir) OnForget() { d.fs.nodeForgotten() }

// Getattr reports a read-only directory.
func (d *viewDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}

// Readdir lists the directory.
func (d *viewDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	es, err := d.dir.List(ctx)
	if err != nil {
		return nil, d.fs.errno(err, d.path)
	}
	list := make([]fuse.DirEntry, len(es))
	for i, e := range es {
		list[i] = fuse.DirEntry{Name: e.Name, Mode: syscall.S_IFREG, Ino: e.Ino}
		if e.Dir {
			list[i].Mode = syscall.S_IFDIR
		}
	}
	return gofs.NewListDirStream(list), 0
}

// Lookup finds what a name stands for.
func (d *viewDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fs.stats.lookups.Add(1)
	n, err := d.dir.Lookup(ctx, name)
	if err != nil {
		return nil, d.fs.errno(err, d.path+name)
	}
	return d.fs.viewChild(ctx, &d.Inode, name, d.path+name, n, out)
}

// viewChild returns parent's child name for n (the one the kernel has
// when its inode number is n's), filling its attributes.
func (f *FS) viewChild(ctx context.Context, parent *gofs.Inode, name, path string, n views.Node, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: n.Ino}
	var op gofs.InodeEmbedder
	if n.Dir != nil {
		id.Mode = syscall.S_IFDIR
		f.dirAttr(&out.Attr)
		op = &viewDir{fs: f, dir: n.Dir, path: path + "/"}
	} else {
		vf := &viewFile{fs: f, noOpen: noOpen{f}, file: n.File, name: path}
		if errno := vf.attr(ctx, &out.Attr); errno != 0 {
			return nil, errno
		}
		op = vf
	}
	if ch := parent.GetChild(name); ch != nil && ch.StableAttr() == id {
		return ch, 0
	}
	return parent.NewInode(ctx, op, id), 0
}

// viewFile renders any views.File: its attributes, and its bytes at an
// offset. It is made per version of the file (the inode number carries
// the version), so an open file keeps its bytes.
type viewFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs   *FS
	file views.File
	name string // for errors: its path in the mount
}

var _ = (gofs.NodeGetattrer)((*viewFile)(nil))
var _ = (gofs.NodeReader)((*viewFile)(nil))

// attr fills the file's attributes: a views.Stater's taken again, any
// other's known without computing it.
func (vf *viewFile) attr(ctx context.Context, out *fuse.Attr) syscall.Errno {
	if st, ok := vf.file.(views.Stater); ok {
		size, mtime, err := st.Stat(ctx)
		if err != nil {
			return vf.fs.errno(err, vf.name)
		}
		fileAttr(out, size, mtime)
		return 0
	}
	fileAttr(out, vf.file.Size(), vf.file.ModTime())
	return 0
}

// Getattr reports the file's size, known without computing it.
func (vf *viewFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return vf.attr(ctx, &out.Attr)
}

// Read renders [off, off+len(dest)).
func (vf *viewFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := vf.file.ReadAt(ctx, dest, off)
	if err != nil {
		if ctx.Err() != nil {
			return nil, syscall.EINTR
		}
		return nil, vf.fs.errno(err, vf.name)
	}
	vf.fs.stats.reads.Add(1)
	vf.fs.stats.readBytes.Add(int64(n))
	return fuse.ReadResultData(dest[:n]), 0
}
