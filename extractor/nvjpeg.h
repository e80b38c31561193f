/* nvJPEG through dlopen/dlsym only (nvjpeg.go, nvjpeg.c): the binary links
 * no CUDA library and no CUDA header is needed to build it.
 *
 * The nvJPEG and CUDA runtime declarations below are written by hand. Their
 * values and signatures are those of:
 *   - nvjpeg.h of CUDA 12.6 (NVJPEG_VER 12.3.3.54; the copy at
 *     zspace/system.cuda-12.6, include/nvjpeg.h): nvjpegStatus_t,
 *     nvjpegChromaSubsampling_t, nvjpegOutputFormat_t (NVJPEG_OUTPUT_RGBI =
 *     5), nvjpegBackend_t (NVJPEG_BACKEND_DEFAULT = 0, _HARDWARE = 3),
 *     NVJPEG_MAX_COMPONENT = 4, nvjpegImage_t, and the prototypes of every
 *     function resolved (nvjpegGetProperty, nvjpegCreateEx, nvjpegDestroy,
 *     nvjpegJpegStateCreate/Destroy, nvjpegGetImageInfo,
 *     nvjpegDecodeBatchedInitialize, nvjpegDecodeBatched,
 *     nvjpegJpegStreamCreate/Destroy, nvjpegJpegStreamParseHeader,
 *     nvjpegDecodeBatchedSupported, and the optional
 *     nvjpegDecodeBatchedPreAllocate). The same enums and prototypes are in
 *     CUDA 11.6's nvjpeg.h and in NVIDIA's nvJPEG documentation of CUDA 13
 *     (section 2.2.1 lists nvjpegBackend_t with the same values, plus
 *     NVJPEG_BACKEND_LOSSLESS_JPEG = 6).
 *   - library_types.h: libraryPropertyType MAJOR_VERSION = 0,
 *     MINOR_VERSION = 1, PATCH_LEVEL = 2.
 *   - driver_types.h / cuda_runtime_api.h: cudaError_t is an int enum with
 *     cudaSuccess = 0; cudaMemcpyKind cudaMemcpyDeviceToHost = 2;
 *     cudaStreamNonBlocking = 0x01; cudaStream_t is a pointer
 *     (struct CUstream_st *).
 * nvjpegDecodeBatchedSupported sets *is_supported to 0 when the stream IS
 * supported (NVIDIA's hardware-decode sample and DALI test == 0). */
#ifndef FEATUREFS_NVJPEG_H
#define FEATUREFS_NVJPEG_H

#include <stddef.h>

/* ---- nvjpeg.h (hand copy, values as cited above) ---- */

typedef enum {
	NVJPEG_STATUS_SUCCESS = 0,
	NVJPEG_STATUS_NOT_INITIALIZED = 1,
	NVJPEG_STATUS_INVALID_PARAMETER = 2,
	NVJPEG_STATUS_BAD_JPEG = 3,
	NVJPEG_STATUS_JPEG_NOT_SUPPORTED = 4,
	NVJPEG_STATUS_ALLOCATOR_FAILURE = 5,
	NVJPEG_STATUS_EXECUTION_FAILED = 6,
	NVJPEG_STATUS_ARCH_MISMATCH = 7,
	NVJPEG_STATUS_INTERNAL_ERROR = 8,
	NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
	NVJPEG_STATUS_INCOMPLETE_BITSTREAM = 10
} nvjpegStatus_t;

typedef enum {
	NVJPEG_CSS_444 = 0,
	NVJPEG_CSS_422 = 1,
	NVJPEG_CSS_420 = 2,
	NVJPEG_CSS_440 = 3,
	NVJPEG_CSS_411 = 4,
	NVJPEG_CSS_410 = 5,
	NVJPEG_CSS_GRAY = 6,
	NVJPEG_CSS_410V = 7,
	NVJPEG_CSS_UNKNOWN = -1
} nvjpegChromaSubsampling_t;

typedef enum {
	NVJPEG_OUTPUT_UNCHANGED = 0,
	NVJPEG_OUTPUT_YUV = 1,
	NVJPEG_OUTPUT_Y = 2,
	NVJPEG_OUTPUT_RGB = 3,
	NVJPEG_OUTPUT_BGR = 4,
	NVJPEG_OUTPUT_RGBI = 5, /* interleaved RGB in channel[0] */
	NVJPEG_OUTPUT_BGRI = 6
} nvjpegOutputFormat_t;

typedef enum {
	NVJPEG_BACKEND_DEFAULT = 0,
	NVJPEG_BACKEND_HYBRID = 1,
	NVJPEG_BACKEND_GPU_HYBRID = 2,
	NVJPEG_BACKEND_HARDWARE = 3
} nvjpegBackend_t;

#define NVJPEG_MAX_COMPONENT 4
/* nvjpegCreateEx flags (nvjpeg.h: NVJPEG_FLAGS_DEFAULT 0,
 * NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE 1, NVJPEG_FLAGS_ENABLE_MEMORY_POOLS
 * 1<<1, NVJPEG_FLAGS_BITSTREAM_STRICT 1<<2). */
#define NVJPEG_FLAGS_BITSTREAM_STRICT (1 << 2)

typedef struct {
	unsigned char *channel[NVJPEG_MAX_COMPONENT];
	size_t pitch[NVJPEG_MAX_COMPONENT];
} nvjpegImage_t;

typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
/* Only NULL is passed for these: their layout is not needed. */
typedef struct nvjpegDevAllocator nvjpegDevAllocator_t;
typedef struct nvjpegPinnedAllocator nvjpegPinnedAllocator_t;

/* library_types.h */
typedef enum { MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 } libraryPropertyType;

/* ---- cuda_runtime_api.h / driver_types.h (hand copy) ---- */

typedef int cudaError_t; /* enum cudaError; cudaSuccess = 0 */
typedef struct CUstream_st *cudaStream_t;
enum { cudaMemcpyDeviceToHost = 2 };
#define cudaStreamNonBlocking 0x01

/* ---- featurefs's binding (nvjpeg.c) ---- */

/* Where a ffs_nvj_decode failed (ffs_nvj_result.stage). */
enum {
	FFS_NVJ_OK = 0,
	FFS_NVJ_SET_DEVICE = 1, /* cudaSetDevice: cuda error */
	FFS_NVJ_MALLOC = 2,     /* cudaMalloc of the output buffer: cuda error */
	FFS_NVJ_INIT = 3,       /* nvjpegDecodeBatchedInitialize: nvjpeg status */
	FFS_NVJ_DECODE = 4,     /* nvjpegDecodeBatched: nvjpeg status */
	FFS_NVJ_COPY = 5,       /* cudaMemcpyAsync to the host: cuda error */
	FFS_NVJ_SYNC = 6        /* cudaStreamSynchronize: cuda error */
};

/* The functions resolved from the two libraries. */
typedef struct {
	/* libcudart.so.13 */
	cudaError_t (*cudaSetDevice)(int);
	cudaError_t (*cudaStreamCreateWithFlags)(cudaStream_t *, unsigned int);
	cudaError_t (*cudaStreamDestroy)(cudaStream_t);
	cudaError_t (*cudaStreamSynchronize)(cudaStream_t);
	cudaError_t (*cudaMalloc)(void **, size_t);
	cudaError_t (*cudaFree)(void *);
	cudaError_t (*cudaMemcpyAsync)(void *, const void *, size_t, int, cudaStream_t);
	cudaError_t (*cudaGetLastError)(void);
	const char *(*cudaGetErrorString)(cudaError_t);
	/* libnvjpeg.so.13 */
	nvjpegStatus_t (*nvjpegGetProperty)(libraryPropertyType, int *);
	nvjpegStatus_t (*nvjpegCreateEx)(nvjpegBackend_t, nvjpegDevAllocator_t *, nvjpegPinnedAllocator_t *, unsigned int, nvjpegHandle_t *);
	nvjpegStatus_t (*nvjpegDestroy)(nvjpegHandle_t);
	nvjpegStatus_t (*nvjpegJpegStateCreate)(nvjpegHandle_t, nvjpegJpegState_t *);
	nvjpegStatus_t (*nvjpegJpegStateDestroy)(nvjpegJpegState_t);
	nvjpegStatus_t (*nvjpegGetImageInfo)(nvjpegHandle_t, const unsigned char *, size_t, int *, nvjpegChromaSubsampling_t *, int *, int *);
	nvjpegStatus_t (*nvjpegDecodeBatchedInitialize)(nvjpegHandle_t, nvjpegJpegState_t, int, int, nvjpegOutputFormat_t);
	nvjpegStatus_t (*nvjpegDecodeBatched)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *, const size_t *, nvjpegImage_t *, cudaStream_t);
	nvjpegStatus_t (*nvjpegJpegStreamCreate)(nvjpegHandle_t, nvjpegJpegStream_t *);
	nvjpegStatus_t (*nvjpegJpegStreamDestroy)(nvjpegJpegStream_t);
	nvjpegStatus_t (*nvjpegJpegStreamParseHeader)(nvjpegHandle_t, const unsigned char *, size_t, nvjpegJpegStream_t);
	nvjpegStatus_t (*nvjpegDecodeBatchedSupported)(nvjpegHandle_t, nvjpegJpegStream_t, int *);
	/* Optional (NULL when absent): */
	nvjpegStatus_t (*nvjpegDecodeBatchedPreAllocate)(nvjpegHandle_t, nvjpegJpegState_t, int, int, int, nvjpegChromaSubsampling_t, nvjpegOutputFormat_t);
} ffs_nvj_syms;

/* One decoder: the libraries' functions, a CUDA stream, an nvJPEG handle,
 * decoder state and (hardware backend) a parsed-stream object, and the
 * device output buffer kept between calls. One thread at a time. */
typedef struct {
	ffs_nvj_syms f;
	int dev;
	int backend;     /* NVJPEG_BACKEND_HARDWARE or NVJPEG_BACKEND_DEFAULT */
	int strict;      /* made with NVJPEG_FLAGS_BITSTREAM_STRICT */
	int hw_status;   /* the hardware backend's status (0: in use) */
	const char *hw_what; /* the call that refused it */
	int prealloc_status; /* nvjpegDecodeBatchedPreAllocate's (hardware; -1: not called) */
	int max_batch;
	cudaStream_t stream;
	int have_stream;
	nvjpegHandle_t handle;
	nvjpegJpegState_t state;
	nvjpegJpegStream_t jstream; /* hardware backend only */
	int batch;                  /* the batch size initialized; 0: none */
	unsigned char *buf;         /* device output buffer */
	size_t buf_cap;             /* its size */
	size_t max_kept;            /* buf is freed after a call when larger */
	nvjpegImage_t *out;         /* max_batch output descriptors */
	size_t *off;                /* max_batch offsets into buf */
} ffs_nvj;

/* ffs_nvj_load dlopens cudart then nvjpeg (RTLD_NOW|RTLD_GLOBAL) and
 * resolves every function. It returns NULL with err (errlen bytes) naming
 * the library or the symbol that is missing. The libraries stay loaded. */
ffs_nvj *ffs_nvj_load(const char *nvjpeg_path, const char *cudart_path, char *err, size_t errlen);

/* ffs_nvj_version reads nvjpegGetProperty's MAJOR, MINOR and PATCH (no GPU
 * needed). Returns the nvjpeg status. */
int ffs_nvj_version(ffs_nvj *c, int *major, int *minor, int *patch);

/* ffs_nvj_init makes the decoder on device dev: cudaSetDevice, a
 * non-blocking stream, nvjpegCreateEx with the hardware backend, else the
 * default backend, the decoder state and (hardware) a jpeg stream and, when
 * the library has it, nvjpegDecodeBatchedPreAllocate(1, 1, 1, 444, RGBI),
 * which NVIDIA's nvImageCodec calls so that the hardware decoder uses its
 * memory pool (its failure is not an error). On
 * failure it returns nonzero with err saying which call failed; what was
 * made is freed by ffs_nvj_free. */
int ffs_nvj_init(ffs_nvj *c, int dev, int max_batch, size_t max_kept, char *err, size_t errlen);

/* ffs_nvj_info reads one image's header: nvjpegGetImageInfo (components,
 * width and height of component 0) and, with the hardware backend,
 * nvjpegJpegStreamParseHeader and nvjpegDecodeBatchedSupported
 * (*supported = 1 when the batched decoder takes it). Returns 0, else the
 * failing nvjpeg status with *stage 1 (GetImageInfo) or 2 (the support
 * check). */
int ffs_nvj_info(ffs_nvj *c, const unsigned char *data, size_t len, int *components, int *w, int *h, int *supported, int *stage);

/* ffs_nvj_decode decodes n images (data[i], lens[i], w[i] x h[i] from
 * their headers) in one nvjpegDecodeBatched call into the device buffer
 * (grown as needed) as interleaved RGB, pitch 3*w, then copies image i to
 * dst[i] (3*w*h bytes) and waits for the stream. Returns 0, else the failing
 * call's status (nvjpeg status or cuda error) with *stage (FFS_NVJ_*). After
 * a failed decode the next call initializes the batch again. */
int ffs_nvj_decode(ffs_nvj *c, int n, const unsigned char *const *data, const size_t *lens, const int *w, const int *h,
	unsigned char *const *dst, int *stage);

/* ffs_nvj_health waits for the stream and clears a non-sticky error: it
 * returns 0 when the CUDA context still works, else the (sticky) error. */
int ffs_nvj_health(ffs_nvj *c);

/* ffs_nvj_error_string is cudaGetErrorString (never NULL). */
const char *ffs_nvj_error_string(ffs_nvj *c, int err);

/* ffs_nvj_kept is the device memory the decoder holds between calls. */
size_t ffs_nvj_kept(ffs_nvj *c);

/* ffs_nvj_free frees the GPU objects and memory and c itself (NULL: no-op).
 * The libraries stay loaded. */
void ffs_nvj_free(ffs_nvj *c);

#endif
