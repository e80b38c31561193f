package extractor

// Pinned (page-locked) host memory for GPU batches: the CUDA runtime copies
// it to the GPU by DMA, asynchronously, where pageable memory goes through
// a staging buffer. The runtime's functions are looked up in the process
// (libcudart.so.13 is loaded RTLD_GLOBAL by loadCUDALibs), so nothing links
// against CUDA and the CPU build runs without it.
//
// Run on an H100 by `make gpu-check` (docs/bench/gpu.md); on a machine
// without CUDA pinnedAlloc reports the runtime missing and callers use
// ordinary memory.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#ifndef RTLD_DEFAULT
#define RTLD_DEFAULT ((void *)0) // glibc's value, defined by dlfcn.h only with _GNU_SOURCE
#endif

typedef int (*ffs_set_device_fn)(int);
typedef int (*ffs_host_alloc_fn)(void **, size_t, unsigned int);
typedef int (*ffs_free_host_fn)(void *);
typedef const char *(*ffs_error_string_fn)(int);

// ffs_pinned_alloc allocates bytes of pinned host memory, portable across
// devices, with device dev current on this thread (so that no context is
// made on device 0 for a process that runs on another). It returns 0 on
// success, -1 when the CUDA runtime is not loaded, else the CUDA error
// (*msg says which).
static int ffs_pinned_alloc(int dev, size_t bytes, void **p, const char **msg) {
	ffs_set_device_fn set_device = (ffs_set_device_fn)dlsym(RTLD_DEFAULT, "cudaSetDevice");
	ffs_host_alloc_fn host_alloc = (ffs_host_alloc_fn)dlsym(RTLD_DEFAULT, "cudaHostAlloc");
	ffs_error_string_fn error_string = (ffs_error_string_fn)dlsym(RTLD_DEFAULT, "cudaGetErrorString");
	if (!set_device || !host_alloc) return -1;
	int rc = set_device(dev);
	if (rc == 0) rc = host_alloc(p, bytes, 1); // cudaHostAllocPortable
	if (rc != 0 && error_string) *msg = error_string(rc);
	return rc;
}

static int ffs_pinned_free(void *p) {
	ffs_free_host_fn free_host = (ffs_free_host_fn)dlsym(RTLD_DEFAULT, "cudaFreeHost");
	if (!free_host) return -1;
	return free_host(p);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// errNoCUDARuntime is pinnedAlloc's error where the CUDA runtime is not
// loaded (the CPU build, or before loadCUDALibs).
var errNoCUDARuntime = errors.New("CUDA runtime not loaded")

// pinnedAlloc returns n float32s of pinned host memory for GPU dev and the
// function that frees it. The slice's memory is C memory: it may be passed
// to ONNX Runtime as a tensor's data and must not be used after free.
func pinnedAlloc(dev, n int) ([]float32, func(), error) {
	if n <= 0 {
		return nil, func() {}, nil
	}
	var p unsafe.Pointer
	var msg *C.char
	rc := C.ffs_pinned_alloc(C.int(dev), C.size_t(n)*4, &p, &msg)
	switch {
	case rc == -1:
		return nil, nil, errNoCUDARuntime
	case rc != 0:
		why := "unknown"
		if msg != nil {
			why = C.GoString(msg)
		}
		return nil, nil, fmt.Errorf("cudaHostAlloc of %d bytes on cuda:%d: error %d: %s", n*4, dev, int(rc), why)
	}
	var once sync.Once
	free := func() { once.Do(func() { C.ffs_pinned_free(p) }) }
	return unsafe.Slice((*float32)(p), n), free, nil
}

// hostAllocator returns the scheduler's batch buffer allocator: pinned
// memory for GPU dev, falling back to ordinary memory (logged once by
// onFallback) when pinning fails; ordinary memory on the CPU.
func hostAllocator(gpu bool, dev int, onFallback func(error)) func(int) ([]float32, func()) {
	plain := func(n int) ([]float32, func()) { return make([]float32, n), nil }
	if !gpu {
		return plain
	}
	var once sync.Once
	return func(n int) ([]float32, func()) {
		b, free, err := pinnedAlloc(dev, n)
		if err != nil {
			once.Do(func() { onFallback(err) })
			return plain(n)
		}
		return b, free
	}
}
