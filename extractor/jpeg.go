package extractor

// JPEG through libjpeg-turbo 2.1.5 (Debian's libjpeg62-turbo-dev, the
// library Debian's Pillow decodes with), linked statically so that the
// binary needs no new run-time library. jpegdec.c configures libjpeg as
// Pillow 9.4's decoder does; the pixels equal PIL's
// Image.open(f).convert("RGB") byte for byte.

/*
#cgo LDFLAGS: -l:libjpeg.a
#include <stdlib.h>
#include "jpegdec.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// jpegHeader is what a JPEG's markers say, read without decoding pixels.
type jpegHeader struct {
	w, h, components int
}

// jpegError turns a jpegdec.c result into an error matching ErrBadImage.
func jpegError(ret C.int, info *C.ff_jpeg_info) error {
	msg := C.GoString(&info.msg[0])
	switch ret {
	case C.FF_JPEG_TRUNCATED:
		return badImage("decoding jpeg", fmt.Errorf("truncated: %s", msg))
	case C.FF_JPEG_UNSUPPORTED:
		return badImage("unsupported jpeg: "+msg, nil)
	case C.FF_JPEG_BADARGS:
		// A caller's mistake, not the image's: still this file's error.
		return badImage("jpeg decode arguments: "+msg, nil)
	}
	return badImage("decoding jpeg", fmt.Errorf("libjpeg: %s", msg))
}

// readJPEGHeader reads the markers up to the first scan through libjpeg.
func readJPEGHeader(data []byte) (jpegHeader, error) {
	if len(data) == 0 {
		return jpegHeader{}, badImage("empty file", nil)
	}
	var info C.ff_jpeg_info
	ret := C.ff_jpeg_header((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)), &info)
	if ret != C.FF_JPEG_OK {
		return jpegHeader{}, jpegError(ret, &info)
	}
	return jpegHeader{w: int(info.width), h: int(info.height), components: int(info.components)}, nil
}

// decodeJPEGRows decodes the whole JPEG at 1/denom of its size (1, 2, 4 or
// 8; see scaledSize) and writes rows [y0, y0+rows) of the decoded image as
// 8-bit RGB into out (3*sw bytes per row, sw the decoded width):
// corruption or truncation anywhere in the file is an error, as in PIL.
func decodeJPEGRows(data []byte, denom int, out []byte, y0, rows int) error {
	if len(data) == 0 {
		return badImage("empty file", nil)
	}
	var info C.ff_jpeg_info
	var outp *C.uchar
	if len(out) > 0 {
		outp = (*C.uchar)(unsafe.Pointer(&out[0]))
	}
	ret := C.ff_jpeg_decode((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)), C.int(denom),
		outp, C.size_t(len(out)), C.int(y0), C.int(rows), &info)
	if ret != C.FF_JPEG_OK {
		return jpegError(ret, &info)
	}
	return nil
}

// scaledSize is the size libjpeg decodes a w x h JPEG to at 1/denom
// (jdiv_round_up, as Pillow's draft() computes it too).
func scaledSize(w, h, denom int) (int, int) {
	return (w + denom - 1) / denom, (h + denom - 1) / denom
}
