package mountopts

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/spec"
)

// Command is a set of featurefs commands: those an option's flag belongs
// to.
type Command uint16

// The commands whose flags come from the option table.
const (
	Mount   Command = 1 << iota // featurefs mount
	Serve                       // featurefs serve
	Warm                        // featurefs warm (its own flags; it rejects the rest of mount's)
	Extract                     // featurefs extract
	Bench                       // featurefs bench
	Layers                      // featurefs layers
	Doctor                      // featurefs doctor
)

// Sets of commands that share options.
const (
	sourceCmds    = Mount | Serve | Warm         // a pipeline over a source: models, cache, extractor, logging
	mountCmds     = Mount | Warm                 // a FUSE tree, or warm's walk of one
	extractorCmds = sourceCmds | Extract | Bench // an extractor: device, precision, ONNX Runtime
)

// Option is one setting, written once: its flag, default, help, config
// file key and check (like rclone's fs.Option). Every command's flags, the
// config file, [Default] and the per-option part of [Options.Validate]
// come from [Table].
type Option struct {
	// Name is the flag, without the dashes.
	Name string
	// Key is the config file's key; "" for a flag alone.
	Key string
	// Help is the flag's usage text; a `quoted` word names its value.
	Help string
	// In is the commands that take the flag.
	In Command
	// helpIn overrides Help for some commands.
	helpIn map[Command]string
	// group is where the field lives and when its check applies.
	group group
	v     value
}

// group is the part of Options an option's field is in.
type group int

const (
	mainGroup   group = iota // Options: checked by Validate
	remoteGroup              // Options.Remote: checked by Validate when the mount is remote
	serveGroup               // Options.Serve: checked by ServeOptions.Validate
)

// HelpIn is the option's usage text in command c.
func (opt *Option) HelpIn(c Command) string {
	if h, ok := opt.helpIn[c]; ok {
		return h
	}
	return opt.Help
}

// Target is what the option's flag sets in o: a *string, *bool, *int,
// *int64 or *time.Duration (bound with the flag package's typed
// functions, which name the value's type in -h), or a [Value].
func (opt *Option) Target(o *Options) any { return opt.v.target(o) }

// Table returns the option table: every option of every command.
func Table() []*Option { return table }

// For returns the options of command c, in the table's order.
func For(c Command) []*Option {
	var out []*Option
	for _, opt := range table {
		if opt.In&c != 0 {
			out = append(out, opt)
		}
	}
	return out
}

// Lookup returns the option named name (its flag), or nil.
func Lookup(name string) *Option {
	for _, opt := range table {
		if opt.Name == name {
			return opt
		}
	}
	return nil
}

// Typed constructors of the table's values.

func str(get func(*Options) *string, def string, ok func(string) error) field[string] {
	return field[string]{get: get, def: func() string { return def }, ok: ok}
}

func strFrom(get func(*Options) *string, def func() string, ok func(string) error) field[string] {
	return field[string]{get: get, def: def, ok: ok}
}

func boolean(get func(*Options) *bool) field[bool] {
	return field[bool]{get: get, def: func() bool { return false }}
}

func num(get func(*Options) *int, def int, ok func(int) error) field[int] {
	return field[int]{get: get, def: func() int { return def }, ok: ok}
}

func size(get func(*Options) *int64, def int64, ok func(int64) error) field[int64] {
	return field[int64]{get: get, def: func() int64 { return def }, kind: sizeKind, ok: ok}
}

func duration(get func(*Options) *time.Duration, def time.Duration, ok func(time.Duration) error) field[time.Duration] {
	return field[time.Duration]{get: get, def: func() time.Duration { return def }, kind: durationKind, ok: ok}
}

// failf is a check's problem.
func failf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// httpURL checks an S3 endpoint URL.
func httpURL(flag string) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return failf("--%s %q: want http://HOST:PORT or https://HOST", flag, s)
		}
		return nil
	}
}

// exists checks that a file named by a flag exists (when one is named).
func exists(flag string) func(string) error {
	return func(p string) error {
		if p == "" {
			return nil
		}
		if _, err := os.Stat(p); err != nil {
			return failf("--%s %s: %v", flag, p, errors.Unwrap(err))
		}
		return nil
	}
}

// hostPort checks a HOST:PORT flag (when one is given).
func hostPort(flag, example string) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			return failf("--%s %q: want HOST:PORT, e.g. %s", flag, s, example)
		}
		return nil
	}
}

// wireMethod checks a compression that readers of other builds must read:
// s2, zstd-fastest, zstd or off (zeros stays in the cache: older readers
// know ffz1 blobs but not that method).
func wireMethod(flag string) func(string) error {
	return func(s string) error {
		if m, err := codec.ParseMethod(s); s != "off" && (err != nil || m == codec.Zeros) {
			return failf("--%s %q: s2, zstd-fastest, zstd or off", flag, s)
		}
		return nil
	}
}

func positive[T int | int64 | time.Duration](flag, format string) func(T) error {
	return func(v T) error {
		if v <= 0 {
			return failf("--%s "+format+": must be positive", flag, v)
		}
		return nil
	}
}

func notNegative[T int | time.Duration](flag, format, what string) func(T) error {
	return func(v T) error {
		if v < 0 {
			return failf("--%s "+format+": "+what, flag, v)
		}
		return nil
	}
}

func atLeast(flag string, min int64, what string) func(int64) error {
	return func(n int64) error {
		if n < min {
			return failf("--%s %s: must be at least %s", flag, FormatSize(n), what)
		}
		return nil
	}
}

// table is every option. Its order is the order of Validate's messages.
var table = []*Option{
	// Feature servers (mount --remote).
	{Name: "remote", In: Mount, group: remoteGroup,
		Help: "mount feature servers (featurefs serve) instead of a SOURCE: `URL[,URL...]`",
		v: custom{
			set:  func(o *Options, s string) error { return o.Remote.SetURLs(s) },
			show: func(o *Options) string { return strings.Join(o.Remote.URLs, ",") },
			ok:   func(o *Options) error { return o.Remote.checkURLs() },
		}},
	{Name: "remote-token-file", In: Mount, group: remoteGroup,
		Help: "`file` holding the servers' bearer token (without it: the token itself from $FEATUREFS_TOKEN)",
		v:    str(func(o *Options) *string { return &o.Remote.TokenFile }, "", exists("remote-token-file"))},
	{Name: "remote-ca", In: Mount, group: remoteGroup,
		Help: "PEM `file` of CA certificates to trust for https:// servers",
		v:    str(func(o *Options) *string { return &o.Remote.CAFile }, "", exists("remote-ca"))},
	{Name: "remote-timeout", In: Mount, group: remoteGroup,
		Help: "a server silent this long fails the reads waiting on it (EIO)",
		v: duration(func(o *Options) *time.Duration { return &o.Remote.Timeout }, 30*time.Second, func(d time.Duration) error {
			if d <= 0 {
				return failf("--remote-timeout %v: must be positive, e.g. 30s", d)
			}
			return nil
		})},
	{Name: "remote-max-batch", In: Mount, group: remoteGroup,
		Help: "most features per request to a server",
		v:    num(func(o *Options) *int { return &o.Remote.MaxBatch }, 64, positive[int]("remote-max-batch", "%d"))},
	{Name: "remote-batch-wait", In: Mount, group: remoteGroup,
		Help: "how long a request waits for more reads to join it",
		v: duration(func(o *Options) *time.Duration { return &o.Remote.BatchWait }, 2*time.Millisecond,
			notNegative[time.Duration]("remote-batch-wait", "%v", "must not be negative"))},
	{Name: "remote-max-inflight", In: Mount, group: remoteGroup,
		Help: "most batch requests in flight per server",
		v:    num(func(o *Options) *int { return &o.Remote.MaxInFlight }, 4, positive[int]("remote-max-inflight", "%d"))},
	{Name: "split", In: Mount, group: remoteGroup,
		Help: "split execution with --remote: auto, none, raw or a layer number (auto, raw and K need the --model files)",
		v: str(func(o *Options) *string { return &o.Remote.Split }, "", func(s string) error {
			if s == "" {
				return nil
			}
			if _, err := spec.ParseSplitPolicy(s); err != nil {
				return failf("--split: %v", err)
			}
			return nil
		})},

	// Models and the config file.
	{Name: "model", Key: "models", In: sourceCmds,
		Help: "`NAME=PATH.onnx`: a model served under features/NAME/ (repeatable)",
		v: custom{
			set:  func(o *Options, s string) error { return o.AddModel(s) },
			file: reflect.TypeFor[map[string]fileModel](),
			loadFile: func(o *Options, v reflect.Value, dir string) error {
				o.loadModels(v.Interface().(map[string]fileModel), dir)
				return nil
			},
			ok: func(o *Options) error { return o.checkModels() },
		}},
	{Name: "labels", Key: "labels", In: mountCmds,
		Help: "`NAME=FILE`: class names (one per line, or a JSON list) of model NAME, whose last layer is class scores: predictions/NAME/ names its classes (repeatable; docs/MODELS.md)",
		v: custom{
			set:  func(o *Options, s string) error { return o.AddLabels(s) },
			file: reflect.TypeFor[map[string]string](),
			loadFile: func(o *Options, v reflect.Value, dir string) error {
				for name, p := range v.Interface().(map[string]string) {
					if p != "" && !filepath.IsAbs(p) && dir != "" {
						p = filepath.Join(dir, p)
					}
					if err := o.AddLabels(name + "=" + p); err != nil {
						return fmt.Errorf("labels: %w", err)
					}
				}
				return nil
			},
			ok: func(o *Options) error { return o.checkLabels() },
		}},
	{Name: "predictions-top", Key: "predictions-top", In: mountCmds,
		Help: "classes per line of a predictions file, highest softmax score first",
		v:    num(func(o *Options) *int { return &o.PredictionsTop }, 5, positive[int]("predictions-top", "%d"))},
	{Name: "augment", Key: "augment", In: Mount,
		Help: "show this many augmented views of every layer, LAYER-aug/0 .. LAYER-aug/K-1 beside LAYER: view k of an image is torchvision's RandomResizedCrop + RandomHorizontalFlip with numbers drawn from the object's key and ETag, k and --augment-seed, its parameters in the extended attribute user.featurefs.augment (docs/AUGMENT.md); 0: none",
		v:    num(func(o *Options) *int { return &o.Augment }, 0, func(n int) error { return CheckViews("augment", n) })},
	{Name: "augment-seed", Key: "augment-seed", In: Mount,
		Help: "the seed of the augmented views' random numbers (--augment, --feature-augment)",
		v:    num(func(o *Options) *int { return &o.AugmentSeed }, 0, notNegative[int]("augment-seed", "%d", "must be 0 or more"))},
	{Name: "augment-scale", Key: "augment-scale", In: Mount,
		Help: "the augmented views' RandomResizedCrop scale range, `lo,hi`: the crop's area as a fraction of the image's",
		v:    str(func(o *Options) *string { return &o.AugmentScale }, "0.08,1", func(s string) error { _, err := ParseRange("augment-scale", s); return err })},
	{Name: "augment-ratio", Key: "augment-ratio", In: Mount,
		Help: "the augmented views' RandomResizedCrop aspect ratio range, `lo,hi`",
		v:    str(func(o *Options) *string { return &o.AugmentRatio }, "0.75,1.3333333333333333", func(s string) error { _, err := ParseRange("augment-ratio", s); return err })},
	{Name: "feature-augment", Key: "feature-augment", In: Mount,
		Help: "show this many feature-space views of every layer, LAYER-faug/0 .. LAYER-faug/K-1 beside LAYER: view k of a file is its plain feature with --feature-augment-ops applied (FroFA: brightness, contrast, posterize, numbers drawn from the object's key and ETag, k and --augment-seed), computed at read time from the cached feature without the model (docs/AUGMENT.md); for layers after a ReLU; 0: none",
		v:    num(func(o *Options) *int { return &o.FeatureAugment }, 0, func(n int) error { return CheckViews("feature-augment", n) })},
	{Name: "feature-augment-ops", Key: "feature-augment-ops", In: Mount,
		Help: "the feature-space views' ops, comma-separated: brightness, contrast, posterize, or all",
		v:    str(func(o *Options) *string { return &o.FeatureAugmentOps }, "all", func(s string) error { return checkFeatureOps(s) })},
	{Name: "config", In: sourceCmds,
		Help: "YAML config `file` (models with preprocessing and aliases, and any option)",
		v:    str(func(o *Options) *string { return &o.ConfigFile }, "", nil)},

	// The source and the feature store.
	{Name: "endpoint-url", Key: "endpoint-url", In: sourceCmds,
		Help: "S3 endpoint `URL` for MinIO, Ceph RGW, ... (default AWS)",
		v:    str(func(o *Options) *string { return &o.EndpointURL }, "", httpURL("endpoint-url"))},
	{Name: "region", Key: "region", In: sourceCmds,
		Help: "S3 region",
		v:    str(func(o *Options) *string { return &o.Region }, "", nil)},
	{Name: "profile", Key: "profile", In: sourceCmds,
		Help: "AWS profile for credentials (default: the standard credential chain)",
		v:    str(func(o *Options) *string { return &o.Profile }, "", nil)},
	{Name: "feature-store", Key: "feature-store", In: sourceCmds,
		Help: "share features through s3://BUCKET[/PREFIX] or a directory: read after the cache, written after computing (docs/FEATURE-STORE.md)",
		v:    str(func(o *Options) *string { return &o.FeatureStore }, "", nil)},
	{Name: "feature-store-endpoint-url", Key: "feature-store-endpoint-url", In: sourceCmds,
		Help: "the feature store's S3 endpoint `URL` (default: --endpoint-url)",
		v:    str(func(o *Options) *string { return &o.FeatureStoreEndpointURL }, "", httpURL("feature-store-endpoint-url"))},
	{Name: "feature-store-profile", Key: "feature-store-profile", In: sourceCmds,
		Help: "AWS profile for the feature store's credentials (default: --profile)",
		v:    str(func(o *Options) *string { return &o.FeatureStoreProfile }, "", nil)},
	{Name: "feature-store-only", Key: "feature-store-only", In: mountCmds,
		Help: "serve only the features the feature store has (one it lacks is EIO, never computed)",
		v:    boolean(func(o *Options) *bool { return &o.FeatureStoreOnly })},

	// The cache.
	{Name: "cache-dir", Key: "cache-dir", In: sourceCmds,
		Help: "feature cache `directory`",
		v: strFrom(func(o *Options) *string { return &o.CacheDir }, spec.DefaultCacheDir, func(s string) error {
			if s == "" {
				return failf("--cache-dir: must not be empty")
			}
			return nil
		})},
	{Name: "cache-compression", Key: "cache-compression", In: sourceCmds,
		Help: "how features are compressed in the cache: auto (s2 for features under 64 KiB; a larger one compressed where the codec is a small share of its extraction, as on a CPU host, else written raw and compacted once the mount is idle), s2, zeros, zstd-fastest, zstd or off",
		v: str(func(o *Options) *string { return &o.CacheCompression }, "auto", func(s string) error {
			if _, err := codec.ParseMethod(s); s != "off" && s != "auto" && err != nil {
				return failf("--cache-compression %q: auto, s2, zeros, zstd-fastest, zstd or off", s)
			}
			return nil
		})},
	{Name: "feature-store-compression", Key: "feature-store-compression", In: sourceCmds,
		Help: "how features are written to the feature store: s2, zstd-fastest, zstd or off (plain .npy objects any tool can read); both kinds are read",
		v:    str(func(o *Options) *string { return &o.FeatureStoreCompression }, "s2", wireMethod("feature-store-compression"))},
	{Name: "cache-size", Key: "cache-size", In: sourceCmds,
		Help: "feature cache bound, e.g. 10GiB, 512MiB",
		v:    size(func(o *Options) *int64 { return &o.CacheSize }, 10*GiB, atLeast("cache-size", MiB, "1MiB, e.g. 10GiB"))},

	// The extractor.
	{Name: "device", Key: "device", In: extractorCmds,
		Help: "auto (every usable GPU, else the CPU), cpu, cuda (every usable GPU, or fail) or cuda:N,M,... (those GPUs)",
		v: str(func(o *Options) *string { return &o.Device }, "auto", func(s string) error {
			if _, _, err := spec.ParseDevice(s); err != nil {
				return failf("--device %q: %v", s, err)
			}
			return nil
		})},
	{Name: "tensorrt", Key: "tensorrt", In: extractorCmds,
		Help: "run models with TensorRT on CUDA (without TensorRT's libraries: CUDA, with a warning)",
		v:    boolean(func(o *Options) *bool { return &o.TensorRT })},
	{Name: "allow-cpu-fallback", Key: "allow-cpu-fallback", In: sourceCmds | Extract,
		Help: "run on the CPU, with a warning, when the GPU that --device cuda[:N] or --tensorrt asks for, or the GPU JPEG decoder --decode gpu asks for, cannot be had, instead of failing with exit code 4",
		v:    boolean(func(o *Options) *bool { return &o.AllowCPUFallback })},
	{Name: "precision", Key: "precision", In: extractorCmds,
		Help: "GPU arithmetic: fp32, tf32 (TF32 tensor cores) or fp16 (with --tensorrt)",
		v: str(func(o *Options) *string { return (*string)(&o.Precision) }, string(spec.FP32), func(s string) error {
			if p := spec.Precision(s); p != spec.FP32 && p != spec.TF32 && p != spec.FP16 {
				return failf("--precision %q: want fp32, tf32 or fp16", s)
			}
			return nil
		})},
	{Name: "cuda-lib-dir", Key: "cuda-lib-dir", In: extractorCmds | Doctor,
		Help: "`directories` (colon-separated) searched first for the CUDA and cuDNN libraries (or FEATUREFS_CUDA_LIB_DIR)",
		v:    str(func(o *Options) *string { return &o.CUDALibDir }, "", nil)},
	{Name: "dtype", Key: "dtype", In: sourceCmds | Extract,
		Help: "element type of the .npy files: float32 or float16",
		v: str(func(o *Options) *string { return (*string)(&o.DType) }, string(spec.Float32), func(s string) error {
			if d := spec.DType(s); d != spec.Float32 && d != spec.Float16 {
				return failf("--dtype %q: want float32 or float16", s)
			}
			return nil
		})},
	{Name: "batch-size", Key: "batch-size", In: sourceCmds | Extract | Bench,
		Help: "images per model run (0: automatic)",
		v:    num(func(o *Options) *int { return &o.BatchSize }, 0, notNegative[int]("batch-size", "%d", "must be 0 (automatic) or positive"))},

	// Times.
	{Name: "metadata-ttl", Key: "metadata-ttl", In: mountCmds,
		Help: "how long listings are cached: a changed bucket shows after at most this long (with --remote, also how often the servers are asked for their model version)",
		v: duration(func(o *Options) *time.Duration { return &o.MetadataTTL }, 60*time.Second,
			notNegative[time.Duration]("metadata-ttl", "%v", "must not be negative"))},
	{Name: "metadata-cache-size", Key: "metadata-cache-size", In: Mount,
		Help: "memory for listings, the kernel's entries and the archive indexes together, e.g. 256MiB: past it the coldest are dropped and read again when needed",
		v:    size(func(o *Options) *int64 { return &o.MetadataCacheSize }, 256*MiB, atLeast("metadata-cache-size", MiB, "1MiB, e.g. 256MiB"))},
	{Name: "negative-ttl", Key: "negative-ttl", In: sourceCmds,
		Help: "how long a bad object fails without being fetched again",
		v: duration(func(o *Options) *time.Duration { return &o.NegativeTTL }, 5*time.Minute,
			notNegative[time.Duration]("negative-ttl", "%v", "must not be negative"))},
	{Name: "read-timeout", Key: "read-timeout", In: mountCmds,
		Help: "bound on the fetch and extraction behind one read (0: none)",
		v: duration(func(o *Options) *time.Duration { return &o.ReadTimeout }, 5*time.Minute,
			notNegative[time.Duration]("read-timeout", "%v", "must be 0 (no bound) or positive"))},

	// The mount and its process.
	{Name: "allow-other", Key: "allow-other", In: Mount,
		Help: "let other users read the mount",
		v:    boolean(func(o *Options) *bool { return &o.AllowOther })},
	{Name: "passthrough", Key: "passthrough", In: Mount,
		Help: "with --cache-compression off, let the kernel read cached features straight from the cache's files (FUSE passthrough: Linux 6.9+, root; silently off elsewhere)",
		v:    field[bool]{get: func(o *Options) *bool { return &o.Passthrough }, def: func() bool { return true }}},
	{Name: "allow-nonempty", Key: "allow-nonempty", In: Mount,
		Help: "mount over a directory that holds files (hiding them while mounted)",
		v:    boolean(func(o *Options) *bool { return &o.AllowNonempty })},
	{Name: "foreground", Key: "foreground", In: Mount,
		Help: "stay attached; log to stderr unless --log-file",
		v:    boolean(func(o *Options) *bool { return &o.Foreground })},
	{Name: "log-level", Key: "log-level", In: sourceCmds,
		Help: "debug, info, warn or error",
		v: str(func(o *Options) *string { return &o.LogLevel }, "info", func(s string) error {
			switch strings.ToLower(s) {
			case "debug", "info", "warn", "warning", "error":
				return nil
			}
			return failf("--log-level %q: want debug, info, warn or error", s)
		})},
	{Name: "log-file", Key: "log-file", In: sourceCmds,
		Help:   "log `file` (default ~/.cache/featurefs/featurefs.log in the background)",
		helpIn: map[Command]string{Serve: "log `file` (default stderr)"},
		v:      str(func(o *Options) *string { return &o.LogFile }, "", nil)},
	{Name: "metrics-addr", Key: "metrics-addr", In: Mount,
		Help: "HOST:PORT to serve Prometheus metrics (/metrics) and the stats JSON (/stats) on, e.g. 127.0.0.1:9090",
		v:    str(func(o *Options) *string { return &o.MetricsAddr }, "", hostPort("metrics-addr", "127.0.0.1:9090"))},
	{Name: "ort-lib", Key: "ort-lib", In: extractorCmds | Layers | Doctor,
		Help: "path of libonnxruntime.so (or FEATUREFS_ORT_LIB)",
		v: strFrom(func(o *Options) *string { return &o.ORTLib }, spec.DefaultORTLib, func(s string) error {
			if s == "" {
				return failf("--ort-lib: must not be empty: name libonnxruntime.so (or set FEATUREFS_ORT_LIB)")
			}
			if _, err := os.Stat(s); err != nil {
				return &modelProblem{fmt.Sprintf("--ort-lib %s: %v: install ONNX Runtime %s (scripts/install-deps.sh) or point --ort-lib / FEATUREFS_ORT_LIB at libonnxruntime.so", s, errors.Unwrap(err), spec.ORTVersion)}
			}
			return nil
		})},

	// Images.
	{Name: "image-extensions", Key: "image-extensions", In: sourceCmds,
		Help:   "object extensions shown as .npy, comma-separated",
		helpIn: map[Command]string{Serve: "object extensions served as features, comma-separated"},
		v: custom{
			def:  func(o *Options) { o.ImageExtensions = spec.DefaultImageExtensions() },
			set:  func(o *Options, s string) error { return o.SetImageExtensions(s) },
			show: func(o *Options) string { return strings.Join(o.ImageExtensions, ",") },
			file: reflect.TypeFor[[]string](),
			loadFile: func(o *Options, v reflect.Value, _ string) error {
				if err := o.SetImageExtensions(strings.Join(v.Interface().([]string), ",")); err != nil {
					return fmt.Errorf("image-extensions: %w", err)
				}
				return nil
			},
			ok: func(o *Options) error { return checkImageExtensions(o.ImageExtensions) },
		}},
	{Name: "archives", Key: "archives", In: sourceCmds,
		Help: "archive objects shown as directories of their members: tar,zip, tar, zip or off (NAME.tar is the directory NAME)",
		v:    str(func(o *Options) *string { return &o.Archives }, "tar,zip", checkArchives)},
	{Name: "max-pixels", Key: "max-pixels", In: sourceCmds,
		Help: "reject images with more pixels",
		v: field[int64]{get: func(o *Options) *int64 { return &o.MaxPixels }, def: func() int64 { return spec.DefaultMaxPixels },
			ok: positive[int64]("max-pixels", "%d")}},
	{Name: "max-object-size", Key: "max-object-size", In: sourceCmds | Extract,
		Help: "reject larger objects (before fetching)",
		v: size(func(o *Options) *int64 { return &o.MaxObjectSize }, spec.DefaultMaxObjectSize, func(n int64) error {
			if n <= 0 {
				return failf("--max-object-size %s: must be positive, e.g. 256MiB", FormatSize(n))
			}
			return nil
		})},
	{Name: "memory-limit", Key: "memory-limit", In: Mount,
		Help: "size the memory bounds not given by a flag or the config file from this one figure, e.g. 512MiB (metadata a quarter, decode memory and prefetch an eighth each, fetched objects, hand-off and cache write queue a sixteenth each) and set Go's soft memory limit to three quarters of it (GOMEMLIMIT wins); 0: off",
		v: size(func(o *Options) *int64 { return &o.MemoryLimit }, 0, func(n int64) error {
			if n != 0 && n < 128*MiB {
				return failf("--memory-limit %s: must be 0 (off) or at least 128MiB, e.g. 512MiB", FormatSize(n))
			}
			return nil
		})},
	{Name: "decode-memory", Key: "decode-memory", In: sourceCmds,
		Help: "bound on the memory of the images being decoded at once, estimated from their headers",
		v:    size(func(o *Options) *int64 { return &o.DecodeMemory }, spec.DefaultDecodeMemory, atLeast("decode-memory", 16*MiB, "16MiB, e.g. 1GiB"))},
	{Name: "fetch-memory", Key: "fetch-memory", In: sourceCmds,
		Help: "bound on the bytes of the objects fetched and not yet decoded, taken at their listed size before their GET (a fetch waits for room; one object larger than the bound is held alone)",
		v:    size(func(o *Options) *int64 { return &o.FetchMemory }, spec.DefaultFetchMemory, atLeast("fetch-memory", 4*MiB, "4MiB, e.g. 64MiB"))},
	{Name: "decode", Key: "decode", In: extractorCmds,
		Help: "where JPEGs are decoded: cpu (libjpeg-turbo, bit-exact with PIL), gpu (nvJPEG on the GPU for the baseline JPEGs it takes; progressive, arithmetic-coded, 12-bit and CMYK JPEGs and PNGs stay on the CPU; pixels differ from PIL's by a little) or auto (gpu where this GPU type passed the decode fidelity check, else cpu)",
		v: str(func(o *Options) *string { return &o.Decode }, "cpu", func(s string) error {
			switch s {
			case "cpu", "gpu", "auto":
				return nil
			}
			return failf("--decode %q: want cpu, gpu or auto", s)
		})},
	{Name: "fast-decode", Key: "fast-decode", In: sourceCmds | Extract,
		Help: "decode a JPEG whose shorter side is at least 8, 4 or 2 times the resize size at 1/8, 1/4 or 1/2 of its size (libjpeg DCT scaling): faster on large photos, features close to torchvision's but not bit-exact",
		v:    boolean(func(o *Options) *bool { return &o.FastDecode })},

	// The tree and prefetch.
	{Name: "show-empty-dirs", Key: "show-empty-dirs", In: Mount,
		Help: "show directories that hold no image and no subdirectory (folder markers, only other files)",
		v:    boolean(func(o *Options) *bool { return &o.ShowEmptyDirs })},
	{Name: "list-ranges", Key: "list-ranges", In: Mount,
		Help: "S3: read a prefix of more than two listing pages in key ranges at once (StartAfter) rather than page after page; for stores where that costs no more per page (AWS S3), not MinIO",
		v:    boolean(func(o *Options) *bool { return &o.ListRanges })},
	{Name: "prefetch", Key: "prefetch", In: Mount,
		Help: "what the first read of a feature file starts extracting in the background: off, dir (its directory) or tree (its layer directory)",
		v: str(func(o *Options) *string { return (*string)(&o.Prefetch) }, string(spec.PrefetchTree), func(s string) error {
			if !spec.PrefetchMode(s).Valid() {
				return failf("--prefetch %q: want off, dir or tree", s)
			}
			return nil
		})},
	{Name: "prefetch-limit", Key: "prefetch-limit", In: Mount,
		Help: "most objects one prefetch walk of a layer extracts (0: no limit)",
		v:    num(func(o *Options) *int { return &o.PrefetchLimit }, 0, notNegative[int]("prefetch-limit", "%d", "must be 0 (no limit) or positive"))},

	// featurefs warm's own.
	{Name: "shard", In: Warm,
		Help: "with --source: extract only part `K/N` (0 <= K < N) of the objects, by a stable hash of each key (an archive whole): N hosts given 0/N..N-1/N, or a Kubernetes Indexed Job's $(JOB_COMPLETION_INDEX)/N, fill one feature store with no overlap",
		v: str(func(o *Options) *string { return &o.Shard }, "", func(s string) error {
			if s == "" {
				return nil
			}
			if _, err := spec.ParseShard(s); err != nil {
				return failf("--shard %q: %v", s, err)
			}
			return nil
		})},

	// featurefs serve's own.
	{Name: "listen", In: Serve, group: serveGroup,
		Help: "`HOST:PORT` to listen on",
		v: str(func(o *Options) *string { return &o.Serve.Listen }, "127.0.0.1:7070", func(s string) error {
			if _, _, err := net.SplitHostPort(s); err != nil {
				return failf("--listen %q: want HOST:PORT, e.g. 0.0.0.0:7070", s)
			}
			return nil
		})},
	{Name: "token-file", In: Serve, group: serveGroup,
		Help: "`file` holding the bearer token clients must send (without it: the token itself from $FEATUREFS_TOKEN)",
		v:    str(func(o *Options) *string { return &o.Serve.TokenFile }, "", exists("token-file"))},
	{Name: "no-auth", In: Serve, group: serveGroup,
		Help: "accept requests without a token (trusted networks only)",
		v:    boolean(func(o *Options) *bool { return &o.Serve.NoAuth })},
	{Name: "tls-cert", In: Serve, group: serveGroup,
		Help: "PEM certificate `file`: serve HTTPS",
		v:    str(func(o *Options) *string { return &o.Serve.TLSCert }, "", exists("tls-cert"))},
	{Name: "tls-key", In: Serve, group: serveGroup,
		Help: "PEM key `file` of --tls-cert",
		v:    str(func(o *Options) *string { return &o.Serve.TLSKey }, "", exists("tls-key"))},
	{Name: "max-concurrent", In: Serve, group: serveGroup,
		Help: "features computed at once, over all requests (a computation keeps its slot until it ends, even when its client went away)",
		v:    num(func(o *Options) *int { return &o.Serve.MaxConcurrent }, 64, positive[int]("max-concurrent", "%d"))},
	{Name: "max-batch-items", In: Serve, group: serveGroup,
		Help: "items per batch request",
		v:    num(func(o *Options) *int { return &o.Serve.MaxBatchItems }, 1024, positive[int]("max-batch-items", "%d"))},
	{Name: "max-request-bytes", In: Serve, group: serveGroup,
		Help: "bound on a request body, e.g. 1MiB",
		v:    size(func(o *Options) *int64 { return &o.Serve.MaxRequestBytes }, MiB, atLeast("max-request-bytes", KiB, "1KiB"))},
	{Name: "item-timeout", In: Serve, group: serveGroup,
		Help: "bound on the fetch and extraction of one feature",
		v:    duration(func(o *Options) *time.Duration { return &o.Serve.ItemTimeout }, 5*time.Minute, positive[time.Duration]("item-timeout", "%v"))},
	{Name: "wire-compression", In: Serve, group: serveGroup,
		Help: "how features are compressed for mounts that accept it: s2, zstd-fastest, zstd or off",
		v:    str(func(o *Options) *string { return &o.Serve.WireCompression }, "s2", wireMethod("wire-compression"))},
	{Name: "heartbeat", In: Serve, group: serveGroup,
		Help: "heartbeat interval of a batch stream with nothing to send",
		v:    duration(func(o *Options) *time.Duration { return &o.Serve.Heartbeat }, 2*time.Second, positive[time.Duration]("heartbeat", "%v"))},
	{Name: "max-conns", In: Serve, group: serveGroup,
		Help: "connections held at once (0: 4096, at most the descriptor limit less max(512, a quarter of it))",
		v: num(func(o *Options) *int { return &o.Serve.MaxConns }, 0,
			notNegative[int]("max-conns", "%d", "must be positive (0: from the descriptor limit)"))},
	{Name: "max-conns-per-peer", In: Serve, group: serveGroup,
		Help: "connections held at once from one client address (an IPv6 /64 is one)",
		v:    num(func(o *Options) *int { return &o.Serve.MaxConnsPerPeer }, 128, positive[int]("max-conns-per-peer", "%d"))},
	{Name: "write-timeout", In: Serve, group: serveGroup,
		Help: "a client that takes longer than this to accept 256 KiB of an answer is disconnected and its work cancelled",
		v:    duration(func(o *Options) *time.Duration { return &o.Serve.WriteTimeout }, 30*time.Second, positive[time.Duration]("write-timeout", "%v"))},
	{Name: "max-buffered-bytes", In: Serve, group: serveGroup,
		Help: "bound on the bytes of answers computed and not yet written, over all requests",
		v:    size(func(o *Options) *int64 { return &o.Serve.MaxBufferedBytes }, 256*MiB, atLeast("max-buffered-bytes", MiB, "1MiB"))},
	{Name: "max-buffered-bytes-per-request", In: Serve, group: serveGroup,
		Help: "bound on the bytes of one request's answers computed and not yet written",
		// Checked with max-buffered-bytes in ServeOptions.Validate.
		v: size(func(o *Options) *int64 { return &o.Serve.MaxBufferedBytesPerRequest }, 64*MiB, nil)},
}

// Default returns the defaults of every option, from the table. Models is
// empty: a mount needs at least one from a flag or the config file.
func Default() Options {
	var o Options
	for _, opt := range table {
		opt.v.reset(&o)
	}
	return o
}

// checks returns the problems of each option of group g, alone.
func (o *Options) checks(g group) []error {
	var errs []error
	for _, opt := range table {
		if opt.group == g {
			if err := opt.v.check(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}
