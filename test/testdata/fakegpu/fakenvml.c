/* A fake NVML (libnvidia-ml.so.1) for featurefs's tests: one GPU, "Fake
 * H100 80GB", 80 GiB with 79 GiB free, compute capability 9.0, driver
 * 580.65.06, CUDA 13.0, 42% busy. It exports the functions go-nvml calls
 * for featurefs's device choice, doctor and bench; every other NVML
 * function is absent. Built by the tests with gcc -shared. */
#include <string.h>

typedef int nvmlReturn_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef void *nvmlDevice_t;

static int dev0;

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

nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { *n = 1; return 0; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) {
	if (i != 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*d = &dev0;
	return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex(i, d); }
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	(void)d;
	m->total = 80ULL << 30;
	m->free = 79ULL << 30;
	m->used = 1ULL << 30;
	return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int n) {
	(void)d;
	strncpy(name, "Fake H100 80GB", n);
	return 0;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
	(void)d;
	*major = 9;
	*minor = 0;
	return 0;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	(void)d;
	u->gpu = 42;
	u->memory = 7;
	return 0;
}
