package fs

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
)

var _ = (gofs.NodeGetxattrer)((*featureFile)(nil))
var _ = (gofs.NodeListxattrer)((*featureFile)(nil))

// Getxattr answers augment.Xattr on a view file (--augment): its view's
// parameters as JSON (the crop box in the image's pixels, the flip, the
// size, the seed and the view), for the object version the file is of.
// The image is fetched for its header the first time (the parameters are
// then remembered: features.Pipeline.ViewParams); no feature is computed.
// Every other attribute, and every file of a plain layer, has none. Only a
// mount with --augment answers extended attributes at all (Mount's
// DisableXAttrs).
func (ff *featureFile) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr != augment.Xattr || (ff.fv.Aug == nil && ff.fv.FAug == nil) {
		return 0, syscall.ENODATA
	}
	if ff.fv.FAug != nil {
		b, err := json.Marshal(ff.fs.p.FeatureParams(ff.fv, ff.obj))
		if err != nil {
			return 0, syscall.EIO
		}
		return xattrValue(b, dest)
	}
	params, err := ff.fs.p.ViewParams(ctx, ff.fv, ff.obj)
	if errors.Is(err, features.ErrNoViewParams) {
		return 0, syscall.EOPNOTSUPP
	}
	if err != nil {
		return 0, ff.fs.errno(err, ff.obj.Key)
	}
	b, err := json.Marshal(params)
	if err != nil {
		return 0, syscall.EIO
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
