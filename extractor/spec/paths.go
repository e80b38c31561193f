package spec

import (
	"os"
	"path/filepath"
)

// ORTVersion is the ONNX Runtime release featurefs is built and tested
// with; scripts/install-deps.sh installs it.
const ORTVersion = "1.29.0"

// ORTLibRel is where scripts/install-deps.sh puts the ONNX Runtime core
// library, relative to its $FEATUREFS_DEPS (~/.cache/featurefs).
const ORTLibRel = "lib/onnxruntime-" + ORTVersion + "/libonnxruntime.so.1"

// Dir is featurefs's own directory, ~/.cache/featurefs (under the
// temporary directory when there is no home): the defaults of the ONNX
// Runtime library, the feature cache, the background log, the compute
// profiles and TensorRT's engines all lie in it.
func Dir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "featurefs")
}

// DefaultORTLib returns $FEATUREFS_ORT_LIB, else
// ~/.cache/featurefs/lib/onnxruntime-1.29.0/libonnxruntime.so.1, where
// scripts/install-deps.sh installs ONNX Runtime with its GPU providers
// beside it (ONNX Runtime loads providers from the directory of the core
// library, so each version has a directory of its own).
func DefaultORTLib() string {
	if p := os.Getenv("FEATUREFS_ORT_LIB"); p != "" {
		return p
	}
	return filepath.Join(Dir(), filepath.FromSlash(ORTLibRel))
}

// DefaultCacheDir is the feature cache's default directory (--cache-dir):
// ~/.cache/featurefs/cache.
func DefaultCacheDir() string { return filepath.Join(Dir(), "cache") }

// DefaultServeCacheDir is the default --cache-dir of featurefs serve:
// ~/.cache/featurefs/serve-cache, not the mount's, so that a server and a
// --remote mount of it on one host (each locks its cache) both start with
// their defaults.
func DefaultServeCacheDir() string { return filepath.Join(Dir(), "serve-cache") }

// DefaultLogFile is where a background mount logs when no --log-file is
// given: ~/.cache/featurefs/featurefs.log.
func DefaultLogFile() string { return filepath.Join(Dir(), "featurefs.log") }

// DefaultProfileDir is where compute profiles are cached when no directory
// is configured: ~/.cache/featurefs/profiles.
func DefaultProfileDir() string { return filepath.Join(Dir(), "profiles") }

// TensorRTCacheDir is where TensorRT's engines and timing caches are kept:
// ~/.cache/featurefs/tensorrt.
func TensorRTCacheDir() string { return filepath.Join(Dir(), "tensorrt") }
