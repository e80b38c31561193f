package extractor

// The ONNX Runtime shared library as a file: its version and API level read
// without making an environment (doctor, a clear error for a library too
// old for the Go binding), the execution provider libraries next to it, and
// dlopen for the CUDA libraries the CUDA provider needs (cudalibs.go).

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The first two members of ONNX Runtime's OrtApiBase (onnxruntime_c_api.h),
// the one struct of its C API that never changes.
typedef struct {
	const void *(*GetApi)(uint32_t version);
	const char *(*GetVersionString)(void);
} ffsOrtApiBase;

// ffs_errdup returns a copy of dlerror's message (the caller frees it):
// the message is per thread, so it is read in the same C call as the
// failing dlopen.
static char *ffs_errdup(void) {
	const char *e = dlerror();
	return strdup(e ? e : "unknown dlopen error");
}

// ffs_ort_probe opens the library at path and reads its version string. It
// returns 0 on success, 1 when dlopen failed (*err set), 2 when the library
// has no OrtGetApiBase. The library stays open: the environment
// onnxruntime_go makes later opens the same handle.
static int ffs_ort_probe(const char *path, const char **version, char **err) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		*err = ffs_errdup();
		return 1;
	}
	const ffsOrtApiBase *(*get)(void) = (const ffsOrtApiBase *(*)(void))dlsym(h, "OrtGetApiBase");
	if (!get) return 2;
	const ffsOrtApiBase *b = get();
	if (!b) return 2;
	*version = b->GetVersionString();
	return 0;
}

// ffs_dlopen_global loads path with RTLD_NOW|RTLD_GLOBAL; on failure it
// returns dlerror's message (the caller frees it), else NULL.
static char *ffs_dlopen_global(const char *path) {
	if (dlopen(path, RTLD_NOW | RTLD_GLOBAL)) return NULL;
	return ffs_errdup();
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/featurefs/featurefs/extractor/spec"
)

// ORTVersion is the ONNX Runtime release featurefs is built and tested
// with; scripts/install-deps.sh installs it (spec.ORTVersion).
const ORTVersion = spec.ORTVersion

// ortAPILevel is the ONNX Runtime C API level the Go binding
// (github.com/yalue/onnxruntime_go v1.30.0) asks for: ORT_API_VERSION in
// its onnxruntime_c_api.h, 1.25's (no release of the binding is built on
// 1.29's). A library serves every level up to its own minor version, so
// 1.25.0 and later work. v1.30.0 is needed for the plugin execution
// provider API (RegisterExecutionProviderLibrary, GetEpDevices,
// AppendExecutionProviderV2): the CPU build of the core loads the CUDA
// provider only that way (ort.go).
const ortAPILevel = 25

// ORTLibInfo describes an ONNX Runtime library file.
type ORTLibInfo struct {
	// Path is the library file.
	Path string `json:"path"`
	// Version is the library's own version string, e.g. "1.29.0".
	Version string `json:"version"`
	// APIOK reports whether it serves the C API level the Go binding needs
	// (judged from Version).
	APIOK bool `json:"api_ok"`
	// Providers lists the execution provider libraries next to it
	// (ONNX Runtime loads them from the directory of the core library),
	// by file name; present or not.
	Providers []ProviderLib `json:"providers"`
}

// ProviderLib is one execution provider library next to the core library.
type ProviderLib struct {
	// Name is the provider, e.g. "CUDA".
	Name string `json:"name"`
	// File is its file name, e.g. libonnxruntime_providers_cuda.so.
	File string `json:"file"`
	// Present reports whether the file is there.
	Present bool `json:"present"`
}

// providerFiles are the provider libraries ONNX Runtime looks for next to
// the core library, in the order doctor shows them.
var providerFiles = []struct{ name, file string }{
	{"shared (provider bridge)", "libonnxruntime_providers_shared.so"},
	{"CUDA", "libonnxruntime_providers_cuda.so"},
	{"TensorRT", "libonnxruntime_providers_tensorrt.so"},
}

// ProbeORTLib reads the version of the ONNX Runtime library at path and
// lists the provider libraries next to it. The library is loaded (not
// initialized); an error says why it could not be.
func ProbeORTLib(path string) (ORTLibInfo, error) {
	info := ORTLibInfo{Path: path, Providers: providersNextTo(path)}
	if _, err := os.Stat(path); err != nil {
		return info, fmt.Errorf("%w: %s: %v (run scripts/install-deps.sh, or set FEATUREFS_ORT_LIB or --ort-lib)", ErrORTLibrary, path, err)
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var ver, cerr *C.char
	rc := C.ffs_ort_probe(cp, &ver, &cerr)
	switch rc {
	case 1:
		msg := C.GoString(cerr)
		C.free(unsafe.Pointer(cerr))
		return info, fmt.Errorf("%w: %s: cannot load: %s", ErrORTLibrary, path, msg)
	case 2:
		return info, fmt.Errorf("%w: %s: not an ONNX Runtime library (no OrtGetApiBase)", ErrORTLibrary, path)
	}
	if ver != nil {
		info.Version = C.GoString(ver)
	}
	info.APIOK = apiLevelOK(info.Version)
	return info, nil
}

// apiLevelOK reports whether ONNX Runtime version v ("1.29.0") serves the
// binding's C API level: release 1.N serves levels 1 to N. A version it
// cannot parse is let through (the environment's creation then decides);
// asking the library itself (GetApi) would make it print to stderr.
func apiLevelOK(v string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return true
	}
	return major > 1 || minor >= ortAPILevel
}

// errORTTooOld is the message for a library below the binding's API level.
func errORTTooOld(info ORTLibInfo) error {
	return fmt.Errorf("%w: %s is ONNX Runtime %s, which lacks C API level %d: featurefs needs 1.%d or newer (%s: scripts/install-deps.sh)",
		ErrORTLibrary, info.Path, info.Version, ortAPILevel, ortAPILevel, ORTVersion)
}

// providersNextTo lists the provider libraries in the directory of core.
func providersNextTo(core string) []ProviderLib {
	dir := filepath.Dir(core)
	var out []ProviderLib
	for _, p := range providerFiles {
		_, err := os.Stat(filepath.Join(dir, p.file))
		out = append(out, ProviderLib{Name: p.name, File: p.file, Present: err == nil})
	}
	return out
}

// providerPresent reports whether the provider library file is next to core.
func providerPresent(core, file string) bool {
	_, err := os.Stat(filepath.Join(filepath.Dir(core), file))
	return err == nil
}

// dlopenGlobal loads the shared library at path with RTLD_NOW|RTLD_GLOBAL,
// so that later dlopen calls by its soname (ONNX Runtime's providers,
// cuDNN's sub-libraries) find it already loaded.
func dlopenGlobal(path string) error {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	cerr := C.ffs_dlopen_global(cp)
	if cerr == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(cerr))
	return errors.New(C.GoString(cerr))
}
