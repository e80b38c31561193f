/* A fake libnvjpeg.so.13 for nvjpeg_test.go, linked against the fake
 * libcudart.so.13 (fake_cudart.c) for its log and its "device memory".
 *
 * It reads a JPEG's size and components from its SOF marker (real JPEGs
 * and the tests' synthetic ones) and "decodes" it to a known pattern:
 * pixel (x, y), channel c = (7x + 13y + 101c + seed) & 255 with c = 0 for
 * gray images and seed = the sum of the file's bytes & 255. Behaviour the
 * tests ask for:
 *   - data containing FAKE-BADHDR: nvjpegGetImageInfo fails (BAD_JPEG);
 *   - FAKE-CORRUPT: nvjpegDecodeBatched fails (BAD_JPEG) for the whole
 *     batch it is in, writing nothing, and the state needs
 *     nvjpegDecodeBatchedInitialize again, as the documentation says;
 *   - FAKE-STICKY: nvjpegDecodeBatched fails (EXECUTION_FAILED) and the
 *     CUDA context is lost (every CUDA call fails from then on);
 *   - FAKE-UNSUPPORTED, or an SOF other than baseline (0xC0):
 *     nvjpegDecodeBatchedSupported says not supported;
 *   - FAKE_NVJPEG_NO_STRICT set: nvjpegCreateEx refuses the
 *     NVJPEG_FLAGS_BITSTREAM_STRICT flag (INVALID_PARAMETER)
 *   - FAKE_NVJPEG_NO_HW set: nvjpegCreateEx refuses the hardware backend
 *     (NVJPEG_STATUS_ARCH_MISMATCH), as on a GPU without JPEG engines.
 * Built with -DFAKE_OMIT_DECODE_BATCHED it lacks nvjpegDecodeBatched; with
 * -DFAKE_OMIT_PREALLOCATE, the optional nvjpegDecodeBatchedPreAllocate. */
#include <stdlib.h>
#include <string.h>

#include "nvjpeg.h"

extern void fake_log(const char *fmt, ...);
extern int fake_cuda_owns(const void *p, size_t n);
extern void fake_cuda_set_sticky(void);

struct nvjpegHandle {
	int backend;
};
struct nvjpegJpegState {
	int batch;
	int needs_init;
};
struct nvjpegJpegStream {
	int parsed, sof, comps, w, h, unsupported;
};

static int has(const unsigned char *d, size_t n, const char *m) {
	size_t k = strlen(m);
	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(d + i, m, k) == 0) return 1;
	return 0;
}

/* parse finds the SOF marker: its type, size and components. */
static int parse(const unsigned char *d, size_t n, int *sof, int *comps, int *w, int *h) {
	if (!d || n < 4 || d[0] != 0xFF || d[1] != 0xD8) return NVJPEG_STATUS_BAD_JPEG;
	if (has(d, n, "FAKE-BADHDR")) return NVJPEG_STATUS_BAD_JPEG;
	size_t i = 2;
	while (i + 4 <= n) {
		if (d[i] != 0xFF) return NVJPEG_STATUS_BAD_JPEG;
		int m = d[i + 1];
		if (m == 0xFF) {
			i++;
			continue;
		}
		if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) {
			i += 2;
			continue;
		}
		if (m == 0xD9 || m == 0xDA) return NVJPEG_STATUS_BAD_JPEG; /* no frame before the scan */
		size_t len = (size_t)d[i + 2] << 8 | d[i + 3];
		if (len < 2 || i + 2 + len > n) return NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
		if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
			if (len < 8) return NVJPEG_STATUS_BAD_JPEG;
			*sof = m;
			*h = d[i + 5] << 8 | d[i + 6];
			*w = d[i + 7] << 8 | d[i + 8];
			*comps = d[i + 9];
			return 0;
		}
		i += 2 + len;
	}
	return NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
}

nvjpegStatus_t nvjpegGetProperty(libraryPropertyType t, int *v) {
	fake_log("nvjpegGetProperty %d", (int)t);
	switch (t) {
	case MAJOR_VERSION: *v = 13; return 0;
	case MINOR_VERSION: *v = 0; return 0;
	case PATCH_LEVEL: *v = 1; return 0;
	}
	return NVJPEG_STATUS_INVALID_PARAMETER;
}

nvjpegStatus_t nvjpegCreateEx(nvjpegBackend_t backend, nvjpegDevAllocator_t *da, nvjpegPinnedAllocator_t *pa, unsigned int flags, nvjpegHandle_t *h) {
	fake_log("nvjpegCreateEx %d", (int)backend);
	if (da || pa || !h) return NVJPEG_STATUS_INVALID_PARAMETER;
	/* BITSTREAM_STRICT is taken unless FAKE_NVJPEG_NO_STRICT is set. */
	if (flags & ~(unsigned)NVJPEG_FLAGS_BITSTREAM_STRICT) return NVJPEG_STATUS_INVALID_PARAMETER;
	if (flags && getenv("FAKE_NVJPEG_NO_STRICT")) return NVJPEG_STATUS_INVALID_PARAMETER;
	if (backend == NVJPEG_BACKEND_HARDWARE && getenv("FAKE_NVJPEG_NO_HW")) return NVJPEG_STATUS_ARCH_MISMATCH;
	if (backend != NVJPEG_BACKEND_HARDWARE && backend != NVJPEG_BACKEND_DEFAULT) return NVJPEG_STATUS_INVALID_PARAMETER;
	*h = calloc(1, sizeof **h);
	(*h)->backend = backend;
	return 0;
}

nvjpegStatus_t nvjpegDestroy(nvjpegHandle_t h) {
	fake_log("nvjpegDestroy");
	free(h);
	return 0;
}

nvjpegStatus_t nvjpegJpegStateCreate(nvjpegHandle_t h, nvjpegJpegState_t *s) {
	fake_log("nvjpegJpegStateCreate");
	if (!h || !s) return NVJPEG_STATUS_INVALID_PARAMETER;
	*s = calloc(1, sizeof **s);
	(*s)->needs_init = 1;
	return 0;
}

nvjpegStatus_t nvjpegJpegStateDestroy(nvjpegJpegState_t s) {
	fake_log("nvjpegJpegStateDestroy");
	free(s);
	return 0;
}

nvjpegStatus_t nvjpegJpegStreamCreate(nvjpegHandle_t h, nvjpegJpegStream_t *js) {
	fake_log("nvjpegJpegStreamCreate");
	if (!h || !js) return NVJPEG_STATUS_INVALID_PARAMETER;
	*js = calloc(1, sizeof **js);
	return 0;
}

nvjpegStatus_t nvjpegJpegStreamDestroy(nvjpegJpegStream_t js) {
	fake_log("nvjpegJpegStreamDestroy");
	free(js);
	return 0;
}

nvjpegStatus_t nvjpegGetImageInfo(nvjpegHandle_t h, const unsigned char *d, size_t n, int *comps, nvjpegChromaSubsampling_t *css, int *widths, int *heights) {
	fake_log("nvjpegGetImageInfo");
	if (!h) return NVJPEG_STATUS_INVALID_PARAMETER;
	int sof, c, w, ht;
	int st = parse(d, n, &sof, &c, &w, &ht);
	if (st) return st;
	*comps = c;
	*css = c == 1 ? NVJPEG_CSS_GRAY : NVJPEG_CSS_420;
	for (int i = 0; i < NVJPEG_MAX_COMPONENT; i++) widths[i] = heights[i] = 0;
	for (int i = 0; i < c && i < NVJPEG_MAX_COMPONENT; i++) {
		widths[i] = i ? (w + 1) / 2 : w;
		heights[i] = i ? (ht + 1) / 2 : ht;
	}
	return 0;
}

nvjpegStatus_t nvjpegJpegStreamParseHeader(nvjpegHandle_t h, const unsigned char *d, size_t n, nvjpegJpegStream_t js) {
	fake_log("nvjpegJpegStreamParseHeader");
	if (!h || !js) return NVJPEG_STATUS_INVALID_PARAMETER;
	memset(js, 0, sizeof *js);
	int st = parse(d, n, &js->sof, &js->comps, &js->w, &js->h);
	if (st) return st;
	js->parsed = 1;
	js->unsupported = js->sof != 0xC0 || (js->comps != 1 && js->comps != 3) || has(d, n, "FAKE-UNSUPPORTED");
	return 0;
}

nvjpegStatus_t nvjpegDecodeBatchedSupported(nvjpegHandle_t h, nvjpegJpegStream_t js, int *is) {
	fake_log("nvjpegDecodeBatchedSupported");
	if (!h || !js || !js->parsed || !is) return NVJPEG_STATUS_INVALID_PARAMETER;
	*is = js->unsupported; /* 0: supported */
	return 0;
}

nvjpegStatus_t nvjpegDecodeBatchedInitialize(nvjpegHandle_t h, nvjpegJpegState_t s, int batch, int threads, nvjpegOutputFormat_t fmt) {
	fake_log("nvjpegDecodeBatchedInitialize %d %d %d", batch, threads, (int)fmt);
	if (!h || !s || batch < 1 || threads < 1 || fmt != NVJPEG_OUTPUT_RGBI) return NVJPEG_STATUS_INVALID_PARAMETER;
	s->batch = batch;
	s->needs_init = 0;
	return 0;
}

#ifndef FAKE_OMIT_PREALLOCATE
nvjpegStatus_t nvjpegDecodeBatchedPreAllocate(nvjpegHandle_t h, nvjpegJpegState_t s, int batch, int w, int ht, nvjpegChromaSubsampling_t css, nvjpegOutputFormat_t fmt) {
	fake_log("nvjpegDecodeBatchedPreAllocate %d %d %d %d %d", batch, w, ht, (int)css, (int)fmt);
	if (!h || !s) return NVJPEG_STATUS_INVALID_PARAMETER;
	return 0;
}
#endif

#ifndef FAKE_OMIT_DECODE_BATCHED
nvjpegStatus_t nvjpegDecodeBatched(nvjpegHandle_t h, nvjpegJpegState_t s, const unsigned char *const *data, const size_t *lens, nvjpegImage_t *out, cudaStream_t stream) {
	fake_log("nvjpegDecodeBatched %d", s ? s->batch : -1);
	if (!h || !s || !stream || s->needs_init) return NVJPEG_STATUS_INVALID_PARAMETER;
	int sof, c, w, ht;
	for (int i = 0; i < s->batch; i++) {
		int st = parse(data[i], lens[i], &sof, &c, &w, &ht);
		if (!st && has(data[i], lens[i], "FAKE-CORRUPT")) st = NVJPEG_STATUS_BAD_JPEG;
		if (!st && has(data[i], lens[i], "FAKE-STICKY")) {
			fake_cuda_set_sticky();
			st = NVJPEG_STATUS_EXECUTION_FAILED;
		}
		if (!st && h->backend == NVJPEG_BACKEND_HARDWARE && (sof != 0xC0 || has(data[i], lens[i], "FAKE-UNSUPPORTED")))
			st = NVJPEG_STATUS_JPEG_NOT_SUPPORTED;
		if (!st && (out[i].pitch[0] < (size_t)3 * w || !fake_cuda_owns(out[i].channel[0], out[i].pitch[0] * ht)))
			st = NVJPEG_STATUS_INVALID_PARAMETER;
		if (st) {
			s->needs_init = 1;
			return st;
		}
	}
	for (int i = 0; i < s->batch; i++) {
		parse(data[i], lens[i], &sof, &c, &w, &ht);
		unsigned seed = 0;
		for (size_t k = 0; k < lens[i]; k++) seed += data[i][k];
		for (int y = 0; y < ht; y++) {
			unsigned char *row = out[i].channel[0] + (size_t)y * out[i].pitch[0];
			for (int x = 0; x < w; x++)
				for (int ch = 0; ch < 3; ch++)
					row[3 * x + ch] = (unsigned char)(7 * x + 13 * y + (c == 1 ? 0 : 101 * ch) + seed);
		}
	}
	return 0;
}
#endif
