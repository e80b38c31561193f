package fs

import (
	"context"
	"errors"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/views"
)

var _ = (gofs.NodeGetxattrer)((*featureFile)(nil))
var _ = (gofs.NodeListxattrer)((*featureFile)(nil))

// Getxattr answers augment.Xattr on a view file (--augment): its view's
// parameters as JSON (views.Feature.Params), for the object version the
// file is of. Every other attribute, and every file of a plain layer, has
// none. Only a mount with --augment answers extended attributes at all
// (Mount's DisableXAttrs).
func (ff *featureFile) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr != augment.Xattr {
		return 0, syscall.ENODATA
	}
	feat := views.Feature{P: ff.fs.p, FV: ff.fv, Obj: ff.obj}
	b, err := feat.Params(ctx)
	switch {
	case errors.Is(err, features.ErrNoViewParams):
		return 0, syscall.EOPNOTSUPP
	case err != nil:
		return 0, ff.fs.errno(err, ff.obj.Key)
	case b == nil:
		return 0, syscall.ENODATA
	}
	return xattrValue(b, dest)
}

// Listxattr lists augment.Xattr on a view file, nothing elsewhere.
func (ff *featureFile) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if ff.fv.Aug == nil && ff.fv.FAug == nil {
		return 0, 0
	}
	return xattrValue([]byte(augment.Xattr+"\x00"), dest)
}

// xattrValue answers a getxattr or listxattr of value: its size when dest
// is empty (the caller asks how large), ERANGE when dest is too small.
func xattrValue(value, dest []byte) (uint32, syscall.Errno) {
	switch {
	case len(dest) == 0:
		return uint32(len(value)), 0
	case len(dest) < len(value):
		return uint32(len(value)), syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}
