/* A fake NVML (libnvidia-ml.so.1) for featurefs's tests: one GPU, "Fake
 * H100 80GB", 80 GiB with 79 GiB free, compute capability 9.0, driver
 * 580.65.06, CUDA 13.0, 42% busy. FEATUREFS_FAKE_NVML_GPUS=N (1 to 4)
 * lists N GPUs: then cuda:1 is "Fake A100 40GB" (40 GiB, 30 GiB free, 8.0),
 * cuda:2 "Fake L4 24GB" (24 GiB, 512 MiB free, 8.9), cuda:3 like cuda:0.
 * It exports the functions go-nvml calls for featurefs's device choice,
 * doctor and bench; every other NVML function is absent. Built by the
 * tests with gcc -shared. */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef void *nvmlDevice_t;

struct fake_gpu {
	const char *name;
	unsigned long long total, free;
	int major, minor;
};

static struct fake_gpu gpus[4] = {
	{"Fake H100 80GB", 80ULL << 30, 79ULL << 30, 9, 0},
	{"Fake A100 40GB", 40ULL << 30, 30ULL << 30, 8, 0},
	{"Fake L4 24GB", 24ULL << 30, 512ULL << 20, 8, 9},
	{"Fake H100 80GB", 80ULL << 30, 79ULL << 30, 9, 0},
};

static unsigned int gpu_count(void) {
	const char *n = getenv("FEATUREFS_FAKE_NVML_GPUS");
	int c = n ? atoi(n) : 1;
	return c < 1 ? 1 : c > 4 ? 4 : (unsigned int)c;
}

nvmlReturn_t nvmlInit(void) { return 0; }
nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake NVML error"; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) {
	strncpy(v, "580.65.06", n);
	return 0;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { *v = 13000; return 0; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 13000; return 0; }

nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { *n = gpu_count(); return 0; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = gpu_count(); return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) {
	if (i >= gpu_count()) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*d = &gpus[i];
	return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex(i, d); }
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	struct fake_gpu *g = d;
	m->total = g->total;
	m->free = g->free;
	m->used = g->total - g->free;
	return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int n) {
	strncpy(name, ((struct fake_gpu *)d)->name, n);
	return 0;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
	*major = ((struct fake_gpu *)d)->major;
	*minor = ((struct fake_gpu *)d)->minor;
	return 0;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	(void)d;
	u->gpu = 42;
	u->memory = 7;
	return 0;
}
