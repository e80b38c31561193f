package fs

import (
	"context"
	"strconv"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/fs/views"
)

// augmentJSONL is a view directory's parameters file (views.AugJSONL
// says what it holds).
const augmentJSONL = views.AugmentJSONL

// viewFiles returns the view files of d's directory and the bucket's entry
// called augment.jsonl when it shows one (views.AugFiles), from one
// listing.
func viewFiles(ctx context.Context, d *prefixDir) (files []naming.Entry, taken *naming.Entry, err error) {
	es, err := views.ListAll(d.fs.ns)(ctx, d.prefix)
	if err != nil {
		return nil, nil, err
	}
	files, taken = views.AugFiles(es)
	return files, taken, nil
}

// augJSONLIno is the inode number of d's augment.jsonl file (nil: the
// number readdir reports, without the listing): it carries the listing's
// version, so a changed directory is a new file.
func augJSONLIno(d *prefixDir, file views.File) uint64 {
	var v uint64
	if file != nil {
		v = file.Version()
	}
	return ino('j', "features", d.view.Model, d.view.Dir, d.prefix, strconv.FormatUint(v, 16))
}

// augJSONLLookup answers a lookup of name in view directory d, where name
// is augment.jsonl's usual or moved name (augmentJSONL.Is): the bucket's
// entry when it has the usual name, the augment.jsonl node under the name
// the directory's listing gives it, else ENOENT.
func augJSONLLookup(ctx context.Context, d *prefixDir, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	files, taken, err := viewFiles(ctx, d)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+name)
	}
	if taken != nil && name == string(augmentJSONL) {
		if taken.Dir {
			d.fs.revalidateDir(ctx, taken.Sub)
		}
		return d.child(ctx, *taken, out), 0
	}
	if name != augmentJSONL.Name(taken != nil) {
		return nil, syscall.ENOENT
	}
	file := views.NewAugJSONL(d.fs.p, d.view.View(), d.prefix, files)
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: augJSONLIno(d, file)}
	fileAttr(&out.Attr, file.Size(), file.ModTime())
	if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
		return ch, 0
	}
	// One listing gives the file its size and its bytes (viewFile).
	return d.NewInode(ctx, &viewFile{fs: d.fs, noOpen: noOpen{d.fs}, file: file, name: d.prefix + name}, id), 0
}
