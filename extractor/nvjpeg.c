/* nvJPEG through dlopen/dlsym: see nvjpeg.h and nvjpeg.go. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvjpeg.h"

/* Offsets into the device buffer are aligned to this (cudaMalloc's own
 * alignment is 256 bytes). */
#define FFS_NVJ_ALIGN 256
/* The device buffer grows in steps of this, so that batches of slightly
 * different sizes do not each reallocate it. */
#define FFS_NVJ_GROW ((size_t)4 << 20)

static void set_err(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
	if (err && errlen) snprintf(err, errlen, fmt, a, b);
}

ffs_nvj *ffs_nvj_load(const char *nvjpeg_path, const char *cudart_path, char *err, size_t errlen) {
	/* cudart first: libnvjpeg may need it by its soname. */
	void *rt = dlopen(cudart_path, RTLD_NOW | RTLD_GLOBAL);
	if (!rt) {
		const char *e = dlerror();
		set_err(err, errlen, "cannot load %s: %s", cudart_path, e ? e : "unknown dlopen error");
		return NULL;
	}
	void *nj = dlopen(nvjpeg_path, RTLD_NOW | RTLD_GLOBAL);
	if (!nj) {
		const char *e = dlerror();
		set_err(err, errlen, "cannot load %s: %s", nvjpeg_path, e ? e : "unknown dlopen error");
		return NULL;
	}
	ffs_nvj *c = calloc(1, sizeof *c);
	if (!c) {
		set_err(err, errlen, "%s%s", "out of memory", "");
		return NULL;
	}
	c->dev = -1;
	/* Every function is resolved now, so that a library of the wrong
	 * version fails here, naming the symbol, and never later. */
#define SYM(lib, path, name)                                                                  \
	do {                                                                                  \
		*(void **)(&c->f.name) = dlsym(lib, #name);                                   \
		if (!c->f.name) {                                                             \
			set_err(err, errlen, "%s has no symbol %s", path, #name);             \
			free(c);                                                              \
			return NULL;                                                          \
		}                                                                             \
	} while (0)
	SYM(rt, cudart_path, cudaSetDevice);
	SYM(rt, cudart_path, cudaStreamCreateWithFlags);
	SYM(rt, cudart_path, cudaStreamDestroy);
	SYM(rt, cudart_path, cudaStreamSynchronize);
	SYM(rt, cudart_path, cudaMalloc);
	SYM(rt, cudart_path, cudaFree);
	SYM(rt, cudart_path, cudaMemcpyAsync);
	SYM(rt, cudart_path, cudaGetLastError);
	SYM(rt, cudart_path, cudaGetErrorString);
	SYM(nj, nvjpeg_path, nvjpegGetProperty);
	SYM(nj, nvjpeg_path, nvjpegCreateEx);
	SYM(nj, nvjpeg_path, nvjpegDestroy);
	SYM(nj, nvjpeg_path, nvjpegJpegStateCreate);
	SYM(nj, nvjpeg_path, nvjpegJpegStateDestroy);
	SYM(nj, nvjpeg_path, nvjpegGetImageInfo);
	SYM(nj, nvjpeg_path, nvjpegDecodeBatchedInitialize);
	SYM(nj, nvjpeg_path, nvjpegDecodeBatched);
	SYM(nj, nvjpeg_path, nvjpegJpegStreamCreate);
	SYM(nj, nvjpeg_path, nvjpegJpegStreamDestroy);
	SYM(nj, nvjpeg_path, nvjpegJpegStreamParseHeader);
	SYM(nj, nvjpeg_path, nvjpegDecodeBatchedSupported);
#undef SYM
	*(void **)(&c->f.nvjpegDecodeBatchedPreAllocate) = dlsym(nj, "nvjpegDecodeBatchedPreAllocate");
	c->prealloc_status = -1;
	return c;
}

int ffs_nvj_version(ffs_nvj *c, int *major, int *minor, int *patch) {
	int st = c->f.nvjpegGetProperty(MAJOR_VERSION, major);
	if (st == 0) st = c->f.nvjpegGetProperty(MINOR_VERSION, minor);
	if (st == 0) st = c->f.nvjpegGetProperty(PATCH_LEVEL, patch);
	return st;
}

/* destroy_nvjpeg frees the nvJPEG objects of c (not the stream). */
static void destroy_nvjpeg(ffs_nvj *c) {
	if (c->jstream) c->f.nvjpegJpegStreamDestroy(c->jstream);
	if (c->state) c->f.nvjpegJpegStateDestroy(c->state);
	if (c->handle) c->f.nvjpegDestroy(c->handle);
	c->jstream = NULL;
	c->state = NULL;
	c->handle = NULL;
	c->batch = 0;
}

/* make_nvjpeg makes the handle, state and (hardware) jpeg stream with
 * backend; on failure it frees what it made and returns the status, *what
 * naming the call. */
static int make_nvjpeg(ffs_nvj *c, int backend, const char **what) {
	/* NVJPEG_FLAGS_BITSTREAM_STRICT: a stream that breaks the standard
	 * (a truncated file) is an error, not pixels made up for its missing
	 * part, as libjpeg-turbo under PIL fails it (the error sends the image
	 * to the CPU decoder, whose verdict it gets). A library that refuses
	 * the flag (INVALID_PARAMETER) is used without it. */
	int st = c->f.nvjpegCreateEx((nvjpegBackend_t)backend, NULL, NULL, NVJPEG_FLAGS_BITSTREAM_STRICT, &c->handle);
	c->strict = st == 0;
	if (st == NVJPEG_STATUS_INVALID_PARAMETER)
		st = c->f.nvjpegCreateEx((nvjpegBackend_t)backend, NULL, NULL, 0, &c->handle);
	if (st != 0) {
		c->handle = NULL;
		*what = "nvjpegCreateEx";
		return st;
	}
	st = c->f.nvjpegJpegStateCreate(c->handle, &c->state);
	if (st != 0) {
		c->state = NULL;
		*what = "nvjpegJpegStateCreate";
		destroy_nvjpeg(c);
		return st;
	}
	if (backend == NVJPEG_BACKEND_HARDWARE) {
		st = c->f.nvjpegJpegStreamCreate(c->handle, &c->jstream);
		if (st != 0) {
			c->jstream = NULL;
			*what = "nvjpegJpegStreamCreate";
			destroy_nvjpeg(c);
			return st;
		}
		/* nvImageCodec's hardware decoder does this even without a size
		 * hint: the decoder then uses a memory pool (">20% for 8GPU
		 * training", its comment says). */
		if (c->f.nvjpegDecodeBatchedPreAllocate)
			c->prealloc_status = c->f.nvjpegDecodeBatchedPreAllocate(c->handle, c->state, 1, 1, 1, NVJPEG_CSS_444, NVJPEG_OUTPUT_RGBI);
	}
	c->backend = backend;
	return 0;
}

int ffs_nvj_init(ffs_nvj *c, int dev, int max_batch, size_t max_kept, char *err, size_t errlen) {
	char num[32];
	c->dev = dev;
	c->max_batch = max_batch;
	c->max_kept = max_kept;
	c->out = calloc((size_t)max_batch, sizeof *c->out);
	c->off = calloc((size_t)max_batch, sizeof *c->off);
	if (!c->out || !c->off) {
		set_err(err, errlen, "%s%s", "out of memory", "");
		return -1;
	}
	int rc = c->f.cudaSetDevice(dev);
	if (rc != 0) {
		snprintf(num, sizeof num, "%d", dev);
		set_err(err, errlen, "cudaSetDevice(%s): %s", num, c->f.cudaGetErrorString(rc));
		return rc;
	}
	rc = c->f.cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
	if (rc != 0) {
		set_err(err, errlen, "cudaStreamCreateWithFlags: %s%s", c->f.cudaGetErrorString(rc), "");
		return rc;
	}
	c->have_stream = 1;
	const char *what = "";
	/* The hardware backend first (A100, H100, H200: JPEG engines); any
	 * refusal (NVJPEG_STATUS_ARCH_MISMATCH where the GPU has none) falls
	 * back to the default backend (CUDA cores). */
	c->hw_status = make_nvjpeg(c, NVJPEG_BACKEND_HARDWARE, &what);
	if (c->hw_status == 0) return 0;
	c->hw_what = what;
	int st = make_nvjpeg(c, NVJPEG_BACKEND_DEFAULT, &what);
	if (st != 0) {
		snprintf(num, sizeof num, "%d", st);
		set_err(err, errlen, "%s (default backend): nvJPEG status %s", what, num);
		return st;
	}
	return 0;
}

int ffs_nvj_info(ffs_nvj *c, const unsigned char *data, size_t len, int *components, int *w, int *h, int *supported, int *stage) {
	int widths[NVJPEG_MAX_COMPONENT] = {0}, heights[NVJPEG_MAX_COMPONENT] = {0};
	nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
	*stage = 1;
	int st = c->f.nvjpegGetImageInfo(c->handle, data, len, components, &css, widths, heights);
	if (st != 0) return st;
	*w = widths[0];
	*h = heights[0];
	*supported = 1;
	if (c->backend != NVJPEG_BACKEND_HARDWARE) return 0;
	*stage = 2;
	st = c->f.nvjpegJpegStreamParseHeader(c->handle, data, len, c->jstream);
	if (st != 0) return st;
	int is = -1;
	st = c->f.nvjpegDecodeBatchedSupported(c->handle, c->jstream, &is);
	if (st != 0) return st;
	*supported = (is == 0); /* 0 means supported */
	return 0;
}

static void free_buf(ffs_nvj *c) {
	if (c->buf) c->f.cudaFree(c->buf);
	c->buf = NULL;
	c->buf_cap = 0;
}

int ffs_nvj_decode(ffs_nvj *c, int n, const unsigned char *const *data, const size_t *lens, const int *w, const int *h,
	unsigned char *const *dst, int *stage) {
	int rc;
	*stage = FFS_NVJ_OK;
	if (n <= 0) return 0;
	if (n > c->max_batch) {
		*stage = FFS_NVJ_INIT;
		return NVJPEG_STATUS_INVALID_PARAMETER;
	}
	/* The CUDA runtime's current device is per thread, and the goroutine
	 * calling may run on any thread: set it on each call. */
	rc = c->f.cudaSetDevice(c->dev);
	if (rc != 0) {
		*stage = FFS_NVJ_SET_DEVICE;
		return rc;
	}
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		c->off[i] = total;
		size_t sz = (size_t)3 * (size_t)w[i] * (size_t)h[i];
		total += (sz + FFS_NVJ_ALIGN - 1) / FFS_NVJ_ALIGN * FFS_NVJ_ALIGN;
	}
	if (total > c->buf_cap) {
		free_buf(c);
		size_t want = (total + FFS_NVJ_GROW - 1) / FFS_NVJ_GROW * FFS_NVJ_GROW;
		void *p = NULL;
		rc = c->f.cudaMalloc(&p, want);
		if (rc != 0 && want > total) {
			c->f.cudaGetLastError();
			rc = c->f.cudaMalloc(&p, total); /* without the slack */
			want = total;
		}
		if (rc != 0) {
			c->f.cudaGetLastError(); /* out of memory is not sticky: clear it */
			*stage = FFS_NVJ_MALLOC;
			return rc;
		}
		c->buf = p;
		c->buf_cap = want;
	}
	if (c->batch != n) {
		/* max_cpu_threads 1: nvJPEG's samples pass 1 (0 is refused by
		 * some versions); the batch size must be initialized again when
		 * it changes or after a failed batch. */
		int st = c->f.nvjpegDecodeBatchedInitialize(c->handle, c->state, n, 1, NVJPEG_OUTPUT_RGBI);
		if (st != 0) {
			c->batch = 0;
			*stage = FFS_NVJ_INIT;
			return st;
		}
		c->batch = n;
	}
	for (int i = 0; i < n; i++) {
		memset(&c->out[i], 0, sizeof c->out[i]);
		c->out[i].channel[0] = c->buf + c->off[i];
		c->out[i].pitch[0] = (size_t)3 * (size_t)w[i];
	}
	int st = c->f.nvjpegDecodeBatched(c->handle, c->state, data, lens, c->out, c->stream);
	if (st != 0) {
		c->batch = 0;
		*stage = FFS_NVJ_DECODE;
		return st;
	}
	for (int i = 0; i < n; i++) {
		size_t sz = (size_t)3 * (size_t)w[i] * (size_t)h[i];
		rc = c->f.cudaMemcpyAsync(dst[i], c->buf + c->off[i], sz, cudaMemcpyDeviceToHost, c->stream);
		if (rc != 0) {
			c->f.cudaStreamSynchronize(c->stream); /* no copy left running into dst */
			*stage = FFS_NVJ_COPY;
			return rc;
		}
	}
	rc = c->f.cudaStreamSynchronize(c->stream);
	if (rc != 0) {
		*stage = FFS_NVJ_SYNC;
		return rc;
	}
	if (c->buf_cap > c->max_kept) free_buf(c);
	return 0;
}

int ffs_nvj_health(ffs_nvj *c) {
	int rc = c->f.cudaSetDevice(c->dev);
	if (rc != 0) return rc;
	rc = c->f.cudaStreamSynchronize(c->stream);
	/* A non-sticky error of the failed call is cleared; a sticky one (the
	 * context is lost) is returned by the synchronize and by every later
	 * call. */
	c->f.cudaGetLastError();
	return rc;
}

const char *ffs_nvj_error_string(ffs_nvj *c, int err) {
	const char *s = c->f.cudaGetErrorString(err);
	return s ? s : "unknown CUDA error";
}

size_t ffs_nvj_kept(ffs_nvj *c) { return c->buf_cap; }

void ffs_nvj_free(ffs_nvj *c) {
	if (!c) return;
	if (c->dev >= 0 && (c->handle || c->have_stream || c->buf)) c->f.cudaSetDevice(c->dev);
	if (c->have_stream) c->f.cudaStreamSynchronize(c->stream);
	free_buf(c);
	destroy_nvjpeg(c);
	if (c->have_stream) c->f.cudaStreamDestroy(c->stream);
	free(c->out);
	free(c->off);
	free(c);
}
