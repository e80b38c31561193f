/* A fake libcudart.so.13 for nvjpeg_test.go: no GPU, "device memory" is
 * host memory from malloc, tracked so that the fake nvJPEG and the copies
 * can check that they are given device pointers, and every call is
 * appended to the file $FAKE_CUDA_LOG (one line each) so that tests can
 * check the calls, their order, and that everything made is freed.
 *
 *   FAKE_CUDA_DEVICES  how many devices there are (default 1)
 *
 * It does not export cudaHostAlloc: gpumem.go's pinnedAlloc, which looks
 * the runtime up in the process, keeps finding no runtime. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvjpeg.h"

#define MAX_ALLOCS 4096

static struct {
	void *p;
	size_t n;
} allocs[MAX_ALLOCS];
/* A "lost context": every call fails from then on. Unlike a real
 * process's, it lasts only while $FAKE_CUDA_LOG names the same file (one
 * test), so that the tests of one process stay independent. */
static char sticky_log[4096];
static int sticky_set;

static int is_sticky(void) {
	const char *p = getenv("FAKE_CUDA_LOG");
	return sticky_set && strcmp(p ? p : "", sticky_log) == 0;
}
#define sticky is_sticky()
static int last_error;
static int streams;

void fake_log(const char *fmt, ...) {
	const char *path = getenv("FAKE_CUDA_LOG");
	if (!path || !*path) return;
	FILE *f = fopen(path, "a");
	if (!f) return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

/* fake_cuda_owns: [p, p+n) lies in one allocation of cudaMalloc. */
int fake_cuda_owns(const void *p, size_t n) {
	const char *c = p;
	for (int i = 0; i < MAX_ALLOCS; i++) {
		const char *a = allocs[i].p;
		if (a && c >= a && c + n <= a + allocs[i].n) return 1;
	}
	return 0;
}

void fake_cuda_set_sticky(void) {
	const char *p = getenv("FAKE_CUDA_LOG");
	snprintf(sticky_log, sizeof sticky_log, "%s", p ? p : "");
	sticky_set = 1;
}

#define STICKY 700 /* cudaErrorIllegalAddress */

cudaError_t cudaSetDevice(int dev) {
	const char *s = getenv("FAKE_CUDA_DEVICES");
	int n = s && *s ? atoi(s) : 1;
	fake_log("cudaSetDevice %d", dev);
	if (sticky) return STICKY;
	if (dev < 0 || dev >= n) return last_error = 101; /* cudaErrorInvalidDevice */
	return 0;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
	fake_log("cudaStreamCreateWithFlags %u", flags);
	if (sticky) return STICKY;
	*s = (cudaStream_t)malloc(16);
	streams++;
	return 0;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
	fake_log("cudaStreamDestroy");
	free(s);
	streams--;
	return sticky ? STICKY : 0;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
	(void)s;
	fake_log("cudaStreamSynchronize");
	return sticky ? STICKY : 0;
}

cudaError_t cudaMalloc(void **p, size_t n) {
	const char *lim = getenv("FAKE_CUDA_MALLOC_LIMIT");
	fake_log("cudaMalloc %zu", n);
	if (sticky) return STICKY;
	if (lim && *lim && n > (size_t)atoll(lim)) return last_error = 2; /* cudaErrorMemoryAllocation */
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (!allocs[i].p) {
			allocs[i].p = malloc(n ? n : 1);
			allocs[i].n = n;
			*p = allocs[i].p;
			return 0;
		}
	}
	return last_error = 2;
}

cudaError_t cudaFree(void *p) {
	if (!p) return 0;
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (allocs[i].p == p) {
			fake_log("cudaFree %zu", allocs[i].n);
			free(p);
			allocs[i].p = NULL;
			allocs[i].n = 0;
			return sticky ? STICKY : 0;
		}
	}
	fake_log("cudaFree unknown");
	return last_error = 1; /* cudaErrorInvalidValue */
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s) {
	(void)s;
	fake_log("cudaMemcpyAsync %zu %d", n, kind);
	if (sticky) return STICKY;
	if (kind != cudaMemcpyDeviceToHost || !fake_cuda_owns(src, n) || fake_cuda_owns(dst, n)) return last_error = 1;
	memcpy(dst, src, n);
	return 0;
}

cudaError_t cudaGetLastError(void) {
	fake_log("cudaGetLastError");
	if (sticky) return STICKY;
	int e = last_error;
	last_error = 0;
	return e;
}

const char *cudaGetErrorString(cudaError_t e) {
	switch (e) {
	case 0: return "no error";
	case 1: return "invalid argument";
	case 2: return "out of memory";
	case 101: return "invalid device ordinal";
	case STICKY: return "an illegal memory access was encountered";
	}
	return "unknown error";
}
