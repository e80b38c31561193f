package extractor

// nvJPEG, the gpuJPEG of --decode gpu (issue 38), bound through dlopen and
// dlsym only (nvjpeg.c, nvjpeg.h): the binary links no CUDA library, builds
// without CUDA headers, and runs where there is none. libnvjpeg.so.13 and
// libcudart.so.13 are found as the other CUDA libraries are (findNVJPEG,
// cudalibs.go) and loaded by path, RTLD_GLOBAL, cudart first.
//
// The calls, in order (the first GPU session checks them against the real
// library):
//
//	open:   dlopen cudart, nvjpeg; dlsym every function; cudaSetDevice(dev);
//	        cudaStreamCreateWithFlags(NonBlocking);
//	        nvjpegCreateEx(HARDWARE, NULL, NULL, 0) -> nvjpegJpegStateCreate
//	        -> nvjpegJpegStreamCreate -> nvjpegDecodeBatchedPreAllocate(1, 1,
//	        1, CSS_444, RGBI) when the library has it (optional; its status
//	        is ignored); on any failure of the first three, the same with
//	        DEFAULT (no jpeg stream, no pre-allocation);
//	        nvjpegGetProperty(MAJOR, MINOR, PATCH).
//	Decode: per image nvjpegGetImageInfo, and with the hardware backend
//	        nvjpegJpegStreamParseHeader + nvjpegDecodeBatchedSupported;
//	        then for the images taken: cudaSetDevice(dev); cudaMalloc of the
//	        output buffer when it must grow (cudaFree of the old one);
//	        nvjpegDecodeBatchedInitialize(n, 1, RGBI) when n changed or the
//	        last batch failed; nvjpegDecodeBatched; cudaMemcpyAsync DtoH per
//	        image; cudaStreamSynchronize; cudaFree of the buffer when it is
//	        larger than maxKeptGPUBytes. When the batch fails: the same, one
//	        image at a time, so that only the bad image gets an error; after
//	        each failure cudaStreamSynchronize + cudaGetLastError tell
//	        whether the context still works.
//	Close:  cudaSetDevice; cudaStreamSynchronize; cudaFree;
//	        nvjpegJpegStreamDestroy; nvjpegJpegStateDestroy; nvjpegDestroy;
//	        cudaStreamDestroy. The libraries stay loaded (as cudalibs.go
//	        keeps them: dlclose of CUDA libraries is not safe).
//
// Threads: one goroutine at a time calls a decoder (gpuJPEG's contract), but
// it may run on any OS thread between calls. The CUDA runtime's current
// device is per thread, so every C entry point that touches the GPU calls
// cudaSetDevice(dev) first; nvJPEG's handle and state work from any thread
// of the process (the runtime's primary context is shared). So no
// runtime.LockOSThread.

/*
#cgo LDFLAGS: -ldl
#include <stdint.h>
#include <stdlib.h>
#include "nvjpeg.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// maxKeptGPUBytes bounds the device output buffer a decoder keeps between
// calls: a larger one (a batch of large images) is freed after its call.
// 256 MiB holds a batch of 256 ImageNet-sized (500x375) images.
const maxKeptGPUBytes = 256 << 20

// nvjpegErrLen is the size of the C error message buffers.
const nvjpegErrLen = 512

// nvjpegStatusNames are nvjpegStatus_t's names (nvjpeg.h).
var nvjpegStatusNames = []string{
	"NVJPEG_STATUS_SUCCESS",
	"NVJPEG_STATUS_NOT_INITIALIZED",
	"NVJPEG_STATUS_INVALID_PARAMETER",
	"NVJPEG_STATUS_BAD_JPEG",
	"NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
	"NVJPEG_STATUS_ALLOCATOR_FAILURE",
	"NVJPEG_STATUS_EXECUTION_FAILED",
	"NVJPEG_STATUS_ARCH_MISMATCH",
	"NVJPEG_STATUS_INTERNAL_ERROR",
	"NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
	"NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
}

// nvjpegStatus names an nvjpegStatus_t.
func nvjpegStatus(st C.int) string {
	if st >= 0 && int(st) < len(nvjpegStatusNames) {
		return nvjpegStatusNames[st]
	}
	return fmt.Sprintf("nvJPEG status %d", int(st))
}

// nvjpegBadBytes says whether an nvJPEG status is a verdict on the image's
// bytes (corrupt, truncated; the hardware engine reports a stream it fails
// on as EXECUTION_FAILED). Any other status (not supported, invalid
// parameter, allocator or internal failure) says nothing about the bytes:
// the image then goes to the CPU decoder, which judges it.
func nvjpegBadBytes(st C.int) bool {
	switch st {
	case C.NVJPEG_STATUS_BAD_JPEG, C.NVJPEG_STATUS_INCOMPLETE_BITSTREAM, C.NVJPEG_STATUS_EXECUTION_FAILED:
		return true
	}
	return false
}

// refused wraps a reason so that it matches errGPURefused.
func refused(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errGPURefused, fmt.Sprintf(format, a...))
}

// nvjpegLibs loads libcudart and libnvjpeg and resolves every function the
// decoder calls. The C struct it returns is freed with C.ffs_nvj_free.
func nvjpegLibs(nvjpegPath, cudartPath string) (*C.ffs_nvj, error) {
	if nvjpegPath == "" || cudartPath == "" {
		return nil, errors.New("nvJPEG: no library path given")
	}
	cn, cr := C.CString(nvjpegPath), C.CString(cudartPath)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cr))
	var msg [nvjpegErrLen]C.char
	c := C.ffs_nvj_load(cn, cr, &msg[0], C.size_t(len(msg)))
	if c == nil {
		return nil, fmt.Errorf("nvJPEG: %s", C.GoString(&msg[0]))
	}
	return c, nil
}

// nvjpegVersionOf returns nvjpegGetProperty's version, "13.0.1".
func nvjpegVersionOf(c *C.ffs_nvj) (string, error) {
	var major, minor, patch C.int
	if st := C.ffs_nvj_version(c, &major, &minor, &patch); st != 0 {
		return "", fmt.Errorf("nvJPEG: nvjpegGetProperty: %s", nvjpegStatus(st))
	}
	return fmt.Sprintf("%d.%d.%d", int(major), int(minor), int(patch)), nil
}

// probeNVJPEG loads the libraries and reads nvJPEG's version, without a
// GPU (doctor).
func probeNVJPEG(nvjpegPath, cudartPath string) (string, error) {
	c, err := nvjpegLibs(nvjpegPath, cudartPath)
	if err != nil {
		return "", err
	}
	defer C.ffs_nvj_free(c)
	return nvjpegVersionOf(c)
}

// nvjpegDecoder is the nvJPEG gpuJPEG. One goroutine at a time.
type nvjpegDecoder struct {
	c        *C.ffs_nvj // nil once closed
	dev      int
	maxBatch int
	desc     string
	// broken is set when the CUDA context failed (a sticky error): every
	// later image is refused, so the CPU decodes it.
	broken error
	// scratch, C memory of maxBatch entries each, reused by every call.
	data *C.uintptr_t // const unsigned char *const *: pinned Go pointers
	dst  *C.uintptr_t
	lens *C.size_t
	ws   *C.int
	hs   *C.int
}

var _ gpuJPEG = (*nvjpegDecoder)(nil)

// openNVJPEG loads nvJPEG and the CUDA runtime from the paths given (as
// findNVJPEG finds them) and makes a decoder of batches of at most
// maxBatch images on CUDA device dev: the hardware backend where the GPU
// has JPEG engines, else the default (CUDA) backend. A missing library or
// function is an error naming it.
func openNVJPEG(dev int, nvjpegPath, cudartPath string, maxBatch int) (gpuJPEG, error) {
	if maxBatch <= 0 {
		return nil, fmt.Errorf("nvJPEG: batch size %d", maxBatch)
	}
	if dev < 0 {
		return nil, fmt.Errorf("nvJPEG: device %d", dev)
	}
	c, err := nvjpegLibs(nvjpegPath, cudartPath)
	if err != nil {
		return nil, err
	}
	var msg [nvjpegErrLen]C.char
	if rc := C.ffs_nvj_init(c, C.int(dev), C.int(maxBatch), C.size_t(maxKeptGPUBytes), &msg[0], C.size_t(len(msg))); rc != 0 {
		C.ffs_nvj_free(c)
		return nil, fmt.Errorf("nvJPEG on cuda:%d: %s", dev, C.GoString(&msg[0]))
	}
	version, err := nvjpegVersionOf(c)
	if err != nil {
		C.ffs_nvj_free(c)
		return nil, err
	}
	hw := c.backend == C.NVJPEG_BACKEND_HARDWARE
	backend := "hardware backend"
	if !hw {
		backend = "default backend"
	}
	if c.strict == 0 {
		// A truncated JPEG may then decode on the GPU where PIL fails it.
		backend += ", not strict"
	}
	if !hw {
		backend += fmt.Sprintf("; hardware backend refused: %s %s", C.GoString(c.hw_what), nvjpegStatus(c.hw_status))
	}
	d := &nvjpegDecoder{c: c, dev: dev, maxBatch: maxBatch,
		desc: fmt.Sprintf("nvJPEG %s (%s) on cuda:%d", version, backend, dev)}
	n := C.size_t(maxBatch)
	d.data = (*C.uintptr_t)(C.calloc(n, C.size_t(unsafe.Sizeof(C.uintptr_t(0)))))
	d.dst = (*C.uintptr_t)(C.calloc(n, C.size_t(unsafe.Sizeof(C.uintptr_t(0)))))
	d.lens = (*C.size_t)(C.calloc(n, C.size_t(unsafe.Sizeof(C.size_t(0)))))
	d.ws = (*C.int)(C.calloc(n, C.size_t(unsafe.Sizeof(C.int(0)))))
	d.hs = (*C.int)(C.calloc(n, C.size_t(unsafe.Sizeof(C.int(0)))))
	if d.data == nil || d.dst == nil || d.lens == nil || d.ws == nil || d.hs == nil {
		d.Close()
		return nil, errors.New("nvJPEG: out of memory")
	}
	return d, nil
}

func (d *nvjpegDecoder) MaxBatch() int    { return d.maxBatch }
func (d *nvjpegDecoder) Describe() string { return d.desc }

// setKept changes the bound on the device memory kept between calls
// (tests).
func (d *nvjpegDecoder) setKept(n int) {
	if d.c != nil {
		d.c.max_kept = C.size_t(n)
	}
}

// kept is the device memory held between calls.
func (d *nvjpegDecoder) kept() int {
	if d.c == nil {
		return 0
	}
	return int(C.ffs_nvj_kept(d.c))
}

// Close frees the decoder's GPU objects and memory; a second call does
// nothing.
func (d *nvjpegDecoder) Close() error {
	if d.c == nil {
		return nil
	}
	C.ffs_nvj_free(d.c)
	d.c = nil
	for _, p := range []unsafe.Pointer{unsafe.Pointer(d.data), unsafe.Pointer(d.dst), unsafe.Pointer(d.lens), unsafe.Pointer(d.ws), unsafe.Pointer(d.hs)} {
		C.free(p)
	}
	d.data, d.dst, d.lens, d.ws, d.hs = nil, nil, nil, nil, nil
	return nil
}

// taken is an image the header check accepted.
type taken struct {
	i, w, h int
}

// Decode implements gpuJPEG.
func (d *nvjpegDecoder) Decode(imgs [][]byte, dst [][]byte) []error {
	errs := make([]error, len(imgs))
	if len(dst) != len(imgs) {
		for i := range errs {
			errs[i] = refused("decode arguments: %d images, %d destinations", len(imgs), len(dst))
		}
		return errs
	}
	for start := 0; start < len(imgs); start += max(d.maxBatch, 1) {
		end := min(start+d.maxBatch, len(imgs))
		d.decodeBatch(imgs[start:end], dst[start:end], errs[start:end])
	}
	return errs
}

// decodeBatch decodes at most maxBatch images.
func (d *nvjpegDecoder) decodeBatch(imgs, dst [][]byte, errs []error) {
	var ok []taken
	for i, img := range imgs {
		switch {
		case d.c == nil:
			errs[i] = refused("the nvJPEG decoder is closed")
			continue
		case d.broken != nil:
			errs[i] = refused("%v", d.broken)
			continue
		case len(img) == 0:
			errs[i] = badImage("empty file", nil)
			continue
		}
		var comps, w, h, supported, stage C.int
		st := C.ffs_nvj_info(d.c, (*C.uchar)(unsafe.Pointer(&img[0])), C.size_t(len(img)), &comps, &w, &h, &supported, &stage)
		switch {
		case st != 0 && stage == 1 && !nvjpegBadBytes(st):
			errs[i] = refused("nvjpegGetImageInfo: %s", nvjpegStatus(st))
		case st != 0 && stage == 1:
			errs[i] = badImage("reading jpeg header (nvJPEG)", fmt.Errorf("nvjpegGetImageInfo: %s", nvjpegStatus(st)))
		case st != 0:
			// The hardware backend's own parse: whatever it says, the
			// CPU decodes the image (and judges it).
			errs[i] = refused("hardware backend's check: %s", nvjpegStatus(st))
		case comps != 1 && comps != 3:
			errs[i] = refused("%d components", int(comps))
		case supported == 0:
			errs[i] = refused("the hardware backend does not take it (nvjpegDecodeBatchedSupported)")
		case w <= 0 || h <= 0:
			errs[i] = badImage(fmt.Sprintf("jpeg has no pixels (%dx%d)", int(w), int(h)), nil)
		case int64(len(dst[i])) != 3*int64(w)*int64(h):
			errs[i] = badImage(fmt.Sprintf("jpeg decode arguments: destination of %d bytes for %dx%d RGB (%d bytes)",
				len(dst[i]), int(w), int(h), 3*int64(w)*int64(h)), nil)
		default:
			ok = append(ok, taken{i: i, w: int(w), h: int(h)})
		}
	}
	if len(ok) == 0 {
		return
	}
	if err := d.run(imgs, dst, ok); err == nil {
		return
	} else if len(ok) == 1 {
		errs[ok[0].i] = d.failed(err)
		return
	}
	// One image in the batch is bad (or the batch could not run): each
	// alone, so that only the bad one gets an error.
	for _, t := range ok {
		if d.broken != nil {
			errs[t.i] = refused("%v", d.broken)
			continue
		}
		if err := d.run(imgs, dst, []taken{t}); err != nil {
			errs[t.i] = d.failed(err)
		}
	}
}

// decodeFailure is a failed ffs_nvj_decode.
type decodeFailure struct {
	stage, status C.int
}

func (f decodeFailure) Error() string {
	return fmt.Sprintf("stage %d status %d", int(f.stage), int(f.status))
}

// run decodes the images ok names in one batched call.
func (d *nvjpegDecoder) run(imgs, dst [][]byte, ok []taken) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	n := len(ok)
	data := unsafe.Slice(d.data, n)
	dsts := unsafe.Slice(d.dst, n)
	lens := unsafe.Slice(d.lens, n)
	ws := unsafe.Slice(d.ws, n)
	hs := unsafe.Slice(d.hs, n)
	for k, t := range ok {
		// The pointers are stored in C memory for the call: pinned.
		pin.Pin(&imgs[t.i][0])
		pin.Pin(&dst[t.i][0])
		data[k] = C.uintptr_t(uintptr(unsafe.Pointer(&imgs[t.i][0])))
		dsts[k] = C.uintptr_t(uintptr(unsafe.Pointer(&dst[t.i][0])))
		lens[k] = C.size_t(len(imgs[t.i]))
		ws[k], hs[k] = C.int(t.w), C.int(t.h)
	}
	var stage C.int
	st := C.ffs_nvj_decode(d.c, C.int(n), (**C.uchar)(unsafe.Pointer(d.data)), d.lens, d.ws, d.hs,
		(**C.uchar)(unsafe.Pointer(d.dst)), &stage)
	clear(data)
	clear(dsts)
	if st == 0 {
		return nil
	}
	f := decodeFailure{stage: stage, status: st}
	if rc := C.ffs_nvj_health(d.c); rc != 0 {
		d.broken = fmt.Errorf("the CUDA context of cuda:%d failed (%s) after %s; the CPU decodes from now on",
			d.dev, C.GoString(C.ffs_nvj_error_string(d.c, rc)), d.describeFailure(f))
	}
	return f
}

// describeFailure names the call that failed and its status.
func (d *nvjpegDecoder) describeFailure(f decodeFailure) string {
	cuda := func(call string) string {
		return fmt.Sprintf("%s: %s", call, C.GoString(C.ffs_nvj_error_string(d.c, f.status)))
	}
	switch f.stage {
	case C.FFS_NVJ_SET_DEVICE:
		return cuda("cudaSetDevice")
	case C.FFS_NVJ_MALLOC:
		return cuda("cudaMalloc")
	case C.FFS_NVJ_INIT:
		return "nvjpegDecodeBatchedInitialize: " + nvjpegStatus(f.status)
	case C.FFS_NVJ_DECODE:
		return "nvjpegDecodeBatched: " + nvjpegStatus(f.status)
	case C.FFS_NVJ_COPY:
		return cuda("cudaMemcpyAsync")
	case C.FFS_NVJ_SYNC:
		return cuda("cudaStreamSynchronize")
	}
	return f.Error()
}

// failed turns the failure of a one-image decode into that image's error:
// nvjpegDecodeBatched's verdict on its bytes (nvjpegBadBytes) is the
// image's own error; any other status, a CUDA failure (memory, copy) or a
// lost context sends it to the CPU.
func (d *nvjpegDecoder) failed(err error) error {
	var f decodeFailure
	if !errors.As(err, &f) {
		return refused("%v", err)
	}
	if d.broken != nil {
		return refused("%v", d.broken)
	}
	why := d.describeFailure(f)
	if f.stage == C.FFS_NVJ_DECODE && nvjpegBadBytes(f.status) {
		return badImage("decoding jpeg (nvJPEG)", errors.New(why))
	}
	return refused("%s", why)
}

// The GPU JPEG decoder of --decode gpu is nvJPEG, found where the CUDA
// libraries are.
func init() {
	gpuJPEGOpener = func(dev int, search cudaSearch, maxBatch int) (gpuJPEG, error) {
		nvjpeg, cudart, missing := findNVJPEG(search)
		if missing != "" {
			return nil, errors.New(missing)
		}
		return openNVJPEG(dev, nvjpeg, cudart, maxBatch)
	}
}
