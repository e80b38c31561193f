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

// maxJPEGArena bounds the memory one preprocessing scratch keeps for
// libjpeg's large allocations between decodes (jpegdec.c): enough for the
// coefficient buffer of a progressive 4000x3000 4:2:0 photo (36 MB);
// larger needs are malloc'd and freed on each decode.
const maxJPEGArena = 48 << 20

// decodeJPEGRows decodes the whole JPEG at 1/denom of its size (1, 2, 4 or
// 8; see scaledSize) and writes rows [y0, y0+rows) of the decoded image as
// 8-bit RGB into out (3*sw bytes per row, sw the decoded width):
// corruption or truncation anywhere in the file is an error, as in PIL.
// libjpeg's large allocations (a progressive JPEG's coefficients) come from
// *arena when it is not nil and they fit; it is grown, up to maxJPEGArena,
// to what this decode needed, for the next one.
func decodeJPEGRows(data []byte, denom int, out []byte, y0, rows int, arena *[]byte) error {
	if len(data) == 0 {
		return badImage("empty file", nil)
	}
	var info C.ff_jpeg_info
	var outp, ap *C.uchar
	if len(out) > 0 {
		outp = (*C.uchar)(unsafe.Pointer(&out[0]))
	}
	if arena != nil && len(*arena) > 0 {
		ap = (*C.uchar)(unsafe.Pointer(&(*arena)[0]))
	}
	var need C.size_t
	alen := 0
	if arena != nil {
		alen = len(*arena)
	}
	ret := C.ff_jpeg_decode((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)), C.int(denom),
		outp, C.size_t(len(out)), C.int(y0), C.int(rows), ap, C.size_t(alen), &need, &info)
	if arena != nil && int(need) > alen && int(need) <= maxJPEGArena {
		*arena = make([]byte, int(need))
	}
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
