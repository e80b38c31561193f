package mountopts

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/extractor/spec"
)

// Options is every setting of a featurefs mount. The flag of each field is
// named in its comment; the config file uses the same names as keys.
type Options struct {
	// Models are the models served under features/<name>/. --model
	// NAME=PATH.onnx (repeatable) adds one or replaces the path of one named
	// in the config file, keeping its preprocessing and aliases.
	Models []spec.ModelSpec

	// Labels maps a model's name to its labels file: the class names of a
	// model whose last layer is class scores, one per line or a JSON list
	// (--labels NAME=FILE, repeatable; the config file's labels: map, paths
	// relative to the file). The predictions view names classes with them;
	// their count must be the last layer's size (checked at start).
	Labels map[string]string
	// PredictionsTop is how many classes each line of a predictions file
	// lists, highest softmax score first (--predictions-top).
	PredictionsTop int

	// ConfigFile is the YAML file the other settings were read from, if any
	// (--config).
	ConfigFile string

	// EndpointURL is the S3 endpoint for S3-compatible stores such as MinIO or
	// Ceph RGW, e.g. http://127.0.0.1:9000 (--endpoint-url). Empty: AWS.
	EndpointURL string
	// Region is the S3 region (--region). Empty: from the AWS profile or
	// environment, else us-east-1.
	Region string
	// Profile is the AWS shared-config profile to take credentials from
	// (--profile). Empty: the standard AWS credential chain.
	Profile string

	// FeatureStore is where features are shared by every host that names
	// it: s3://BUCKET[/PREFIX] or a directory (--feature-store). A read
	// asks it after the local cache and before computing; computed
	// features are written to it in the background. Empty: none.
	FeatureStore string
	// FeatureStoreEndpointURL and FeatureStoreProfile are the feature
	// store's endpoint and credential profile (--feature-store-endpoint-url,
	// --feature-store-profile). Empty: the source's (EndpointURL, Profile).
	FeatureStoreEndpointURL string
	FeatureStoreProfile     string
	// FeatureStoreOnly serves only what the feature store has: a missing
	// feature is EIO, never computed (--feature-store-only; needs
	// FeatureStore).
	FeatureStoreOnly bool

	// CacheDir is the directory of the feature cache (--cache-dir). Only one
	// process may use it at a time.
	CacheDir string
	// CacheSize bounds the cache in bytes; least recently used features are
	// evicted beyond it (--cache-size, e.g. 10GiB).
	CacheSize int64
	// CacheCompression is how features are compressed in the cache
	// (--cache-compression): auto (the default: S2 for the small features
	// kept in Badger; a large feature compressed with zeros-elision where
	// the codec's measured CPU is at most 5% of the measured extraction
	// time of a feature, as on a CPU host, else written raw and compacted
	// once the mount has been idle 10 s; docs/CACHE.md), s2, zeros,
	// zstd-fastest, zstd, or off.
	CacheCompression string
	// FeatureStoreCompression is how features are written to the feature
	// store (--feature-store-compression): s2 (the default), zstd-fastest,
	// zstd, or off (plain .npy objects that any tool can read). Either
	// kind is read.
	FeatureStoreCompression string

	// Device selects where models run: auto (every usable GPU, else the CPU),
	// cpu, cuda, cuda:N or cuda:N,M,... (--device; spec.ParseDevice).
	Device string
	// TensorRT runs models through ONNX Runtime's TensorRT provider on CUDA
	// devices; without TensorRT's libraries on a usable GPU, CUDA runs
	// them, with one warning (--tensorrt).
	TensorRT bool
	// Precision is the GPU's arithmetic: fp32 (TF32 off, the default),
	// tf32 (cuDNN and cuBLAS on TF32 tensor cores, Ampere and later) or
	// fp16 (TensorRT FP16 engines; only with --tensorrt). The CPU always
	// computes in float32 (--precision).
	Precision spec.Precision
	// CUDALibDir lists directories (colon-separated) searched first for
	// the CUDA and cuDNN libraries the GPU needs, before
	// $FEATUREFS_CUDA_LIB_DIR, the loader's paths, /usr/local/cuda* and the
	// nvidia/*/lib folders of Python environments (--cuda-lib-dir).
	CUDALibDir string
	// AllowCPUFallback lets an explicitly asked-for GPU (--device cuda,
	// cuda:N or --tensorrt) or GPU JPEG decoder (--decode gpu) that cannot
	// be had fall back to the CPU, with a warning on stderr at start,
	// instead of failing with exit code 4 (--allow-cpu-fallback). --device
	// auto and --decode auto always fall back.
	AllowCPUFallback bool
	// Decode is where JPEGs are decoded: cpu (libjpeg-turbo, bit-exact
	// with PIL), gpu (nvJPEG on the GPU for the JPEGs it takes; without a
	// GPU or nvJPEG, exit 4 unless AllowCPUFallback) or auto (gpu where
	// this GPU type passed the decode fidelity check, else cpu) (--decode).
	Decode string
	// DType is the element type of the served .npy files: float32 or float16
	// (--dtype).
	DType spec.DType
	// BatchSize is the most images run through a model at once; 0 picks one
	// from the device (--batch-size).
	BatchSize int

	// MetadataTTL is how long directory listings are cached by featurefs,
	// and directories' entries and names found missing by the kernel. A
	// changed bucket shows after at most this long (--metadata-ttl). The
	// kernel keeps feature files' entries and attributes, which only change
	// with their object's ETag, longer: a listing read again drops those it
	// shows changed (fs/kernelcache.go).
	MetadataTTL time.Duration
	// MetadataCacheSize is the metadata budget in bytes: the cached
	// listings and the entries the mount holds for the kernel together;
	// past it the coldest listings are dropped and the kernel told to
	// forget cold entries, read again when needed (--metadata-cache-size).
	MetadataCacheSize int64
	// NegativeTTL is how long an object that failed extraction because of
	// its content (not an image, corrupt, too large) keeps failing without
	// being fetched again (--negative-ttl).
	NegativeTTL time.Duration
	// ReadTimeout bounds the fetch and extraction behind one read; the read
	// fails with EIO past it. 0 means no bound (--read-timeout).
	ReadTimeout time.Duration

	// ShowEmptyDirs shows directories that hold no image object and no
	// subdirectory (an S3 folder marker, a prefix of other files only);
	// by default they are hidden, since DatasetFolder fails on a class
	// directory without a file (--show-empty-dirs).
	ShowEmptyDirs bool
	// ListRanges reads a large prefix of an S3 source in key ranges at
	// once (ListObjectsV2 StartAfter; fs/namespace/fanout.go) rather than
	// one continuation token after another: for stores where a StartAfter
	// listing costs what a continued one does (AWS S3), not a local MinIO,
	// where an older featurefs listing in key ranges took 2.29x the time of
	// boto3's page-by-page listing of a 50,000-object prefix, and featurefs
	// page by page takes 0.38x (docs/bench/scale.md) (--list-ranges).
	ListRanges bool

	// AllowOther lets users other than the one who mounted read the mount
	// (--allow-other; needs user_allow_other in /etc/fuse.conf for non-root).
	AllowOther bool
	// Passthrough hands the kernel the cache's file of a feature stored as
	// its plain bytes, so that its reads bypass the mount (FUSE
	// passthrough, Linux 6.9+, root; --passthrough, on by default). It
	// takes effect only with CacheCompression "off" (a compressed cache
	// has no such file, and passthrough would only add an OPEN round trip
	// per open(2)); off silently where the kernel or privileges do not
	// allow it.
	Passthrough bool
	// AllowNonempty mounts over a directory that holds files, hiding them
	// while mounted (--allow-nonempty). Without it such a mount point is
	// refused, as fuse's default is.
	AllowNonempty bool
	// Foreground keeps `featurefs mount` attached to the terminal, logging
	// to stderr unless LogFile is set (--foreground).
	Foreground bool

	// LogLevel is debug, info, warn or error (--log-level).
	LogLevel string
	// LogFile receives the log of a background mount (--log-file). Empty:
	// ~/.cache/featurefs/featurefs.log in the background, stderr in the
	// foreground.
	LogFile string
	// MetricsAddr is the host:port the mount serves Prometheus metrics on, at
	// /metrics, with the stats file's JSON at /stats (--metrics-addr, e.g.
	// 127.0.0.1:9090). Empty: none.
	MetricsAddr string

	// ORTLib is the path of libonnxruntime (--ort-lib); its GPU providers
	// are looked for in its directory. Default: $FEATUREFS_ORT_LIB, else
	// ~/.cache/featurefs/lib/onnxruntime-1.29.0/libonnxruntime.so.1.
	ORTLib string

	// ImageExtensions are the object extensions shown as .npy files, without
	// the dot, lower case; matching is case-insensitive
	// (--image-extensions jpg,jpeg,png).
	ImageExtensions []string
	// Archives are the archive formats shown as directories, comma-separated
	// ("tar,zip", the default), or "off" (--archives).
	Archives string
	// MaxPixels rejects images with more pixels than this before decoding
	// them (--max-pixels; default spec.DefaultMaxPixels, PIL's limit).
	MaxPixels int64
	// MaxObjectSize rejects objects larger than this before fetching them
	// (--max-object-size, e.g. 256MiB).
	MaxObjectSize int64
	// MemoryLimit, when not 0, sizes the memory bounds left at their
	// defaults from one figure and sets Go's soft memory limit
	// (--memory-limit; ApplyMemoryLimit; docs/RELIABILITY.md, "Memory
	// bounds").
	MemoryLimit int64
	// DecodeMemory bounds the bytes that the images being decoded at once
	// hold, estimated from each image's header; a decode waits for room,
	// and an image costing more than the whole budget is decoded alone
	// (--decode-memory, default 1GiB).
	DecodeMemory int64
	// Augment is how many augmented views of every layer the mount shows
	// (--augment; 0: none), AugmentSeed their seed, AugmentScale and
	// AugmentRatio their RandomResizedCrop ranges ("lo,hi").
	Augment                    int
	AugmentSeed                int
	AugmentScale, AugmentRatio string
	// FeatureAugment is how many feature-space views of every layer the
	// mount shows (--feature-augment; 0: none), with the ops
	// FeatureAugmentOps (--feature-augment-ops) and AugmentSeed.
	FeatureAugment    int
	FeatureAugmentOps string
	// FetchMemory bounds the bytes of the objects fetched and not yet
	// decoded, each taken at its listed size before its GET; a fetch
	// waits for room, and an object larger than the whole budget is held
	// alone (--fetch-memory, default 64MiB).
	FetchMemory int64
	// FastDecode decodes large JPEGs at 1/2, 1/4 or 1/8 of their size
	// (libjpeg's DCT-domain scaling) when their shorter side is at least
	// that many times the model's resize size, so the resize still only
	// shrinks (--fast-decode). Faster on large photos; features are then
	// close to torchvision's but no longer bit-exact (docs/bench/preprocess.md
	// has the fidelity and the speed-up). Off: every pixel as
	// PIL decodes it. It is part of the cache key: fast and exact features
	// never mix in one cache. It applies to every model (ModelSpecs).
	FastDecode bool

	// Prefetch is what a reader's first touch of a layer directory
	// extracts in the background: off, dir (the images of each directory
	// touched) or tree (every image under the layer directory; the
	// default) (--prefetch). Readers' own reads always go first. It holds
	// the text given until Validate has accepted it.
	Prefetch spec.PrefetchMode
	// PrefetchLimit is the most objects one prefetch walk of a layer
	// directory extracts; 0: no limit (--prefetch-limit). Objects already
	// cached do not count.
	PrefetchLimit int
	// ModelPrefetchLimits overrides PrefetchLimit per model (the config
	// file's models: NAME: prefetch-limit: N).
	ModelPrefetchLimits map[string]int

	// Shard is the part of the source featurefs warm --source fills,
	// "K/N" (--shard; warm alone, a flag only: each host or Job pod gives
	// its own): the K-th of N disjoint parts by a stable hash of each
	// object's key (spec.Shard); "" for the whole source. It holds the
	// text given until Validate has accepted it (spec.ParseShard).
	Shard string

	// Remote mounts feature servers instead of a SOURCE (--remote and the
	// --remote-* flags; see remote.go and docs/SERVE.md). Models then come
	// from the servers.
	Remote RemoteOptions

	// Serve is featurefs serve's own settings (serve.go); a mount leaves
	// them at their defaults.
	Serve ServeOptions

	// given holds the options (their flag's name) given by a flag or a
	// config-file key, whatever their value (MarkGiven, LoadFile):
	// ApplyMemoryLimit leaves those alone, even at their default.
	given map[string]bool
}

// MarkGiven records that option name (its flag, without the dashes) was
// given, by a flag or the config file, whatever its value: a value given
// stays what it is where a default would be sized from another option
// (ApplyMemoryLimit). The commands call it for each flag set on the
// command line (flag.FlagSet.Visit); LoadFile for each key in the file.
func (o *Options) MarkGiven(name string) {
	if o.given == nil {
		o.given = map[string]bool{}
	}
	o.given[name] = true
}

// Given reports whether option name (its flag) was given by a flag or the
// config file (MarkGiven).
func (o *Options) Given(name string) bool { return o.given[name] }

// DefaultLogFile is where a background mount logs when LogFile is empty.
func DefaultLogFile() string { return spec.DefaultLogFile() }

// ErrNoModel is matched by Validate's error when no model is configured.
var ErrNoModel = errors.New("no model: pass --model NAME=PATH.onnx or a config file")

// ErrModelFile is matched (errors.Is) by each of Validate's problems that is
// a model file or the ONNX Runtime library not being there or usable, as
// opposed to a malformed option: featurefs exits 4 for those, 2 for the
// rest. Use [ModelProblemsOnly] on Validate's joined error.
var ErrModelFile = errors.New("model or ONNX Runtime library unusable")

// modelProblem is one of Validate's problems that matches ErrModelFile.
type modelProblem struct{ msg string }

func (p *modelProblem) Error() string        { return p.msg }
func (p *modelProblem) Is(target error) bool { return target == ErrModelFile }

// ModelProblemsOnly reports whether err (from Validate, possibly joined
// with other errors) is not nil and every problem in it matches
// ErrModelFile: a missing or unusable model file or ONNX Runtime library,
// with every other option well formed.
func ModelProblemsOnly(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		for _, e := range errs {
			if !ModelProblemsOnly(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	return errors.Is(err, ErrModelFile)
}

// validName is a model or alias directory name.
var validName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)

// isLayerName reports whether name is a layer directory name (layer18).
func isLayerName(name string) bool { _, ok := spec.LayerIndex(name); return ok }

// AddModel parses a --model value NAME=PATH.onnx. A model already named
// NAME (from the config file) gets the new path and keeps its preprocessing
// and aliases; otherwise the model is appended.
func (o *Options) AddModel(value string) error {
	name, path, ok := strings.Cut(value, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("--model %q: want NAME=PATH.onnx, e.g. resnet50=/models/resnet50.onnx", value)
	}
	for i := range o.Models {
		if o.Models[i].Name == name {
			o.Models[i].Path = path
			return nil
		}
	}
	o.Models = append(o.Models, spec.ModelSpec{Name: name, Path: path})
	return nil
}

// AddLabels parses one --labels NAME=FILE: the labels file of model NAME
// (a later one for the same model replaces it).
func (o *Options) AddLabels(value string) error {
	name, path, ok := strings.Cut(value, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("--labels %q: want NAME=FILE, e.g. resnet50=/models/imagenet-classes.txt", value)
	}
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	o.Labels[name] = path
	return nil
}

// checkLabels checks that every labels file reads as class names
// (spec.ReadLabels); that their count matches the model is checked once
// the models are loaded.
func (o *Options) checkLabels() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(o.Labels)) {
		if _, err := spec.ReadLabels(o.Labels[name]); err != nil {
			errs = append(errs, fmt.Errorf("--labels %s=%s: %w", name, o.Labels[name], errors.Unwrap(err)))
		}
	}
	return errors.Join(errs...)
}

// SetImageExtensions parses a comma-separated --image-extensions value
// ("jpg,.JPEG, png") into lower-case extensions without dots.
func (o *Options) SetImageExtensions(value string) error {
	var exts []string
	for e := range strings.SplitSeq(value, ",") {
		e = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(e), "."))
		if e == "" {
			continue
		}
		exts = append(exts, e)
	}
	if len(exts) == 0 {
		return fmt.Errorf("--image-extensions %q: want a comma-separated list such as jpg,jpeg,png", value)
	}
	o.ImageExtensions = exts
	return nil
}

// ModelSpecs returns the models as the extractor loads them: Models with
// the options that apply to every model's preprocessing (FastDecode)
// applied. A model without its own preprocessing gets the default's.
func (o *Options) ModelSpecs() []spec.ModelSpec {
	specs := make([]spec.ModelSpec, len(o.Models))
	for i, m := range o.Models {
		p := spec.DefaultPreprocess()
		if m.Preprocess != nil {
			p = *m.Preprocess
		}
		p.FastDecode = o.FastDecode
		m.Preprocess = &p
		specs[i] = m
	}
	return specs
}

// ModelArg renders a model as its --model flag value.
func ModelArg(m spec.ModelSpec) string { return m.Name + "=" + m.Path }

// Validate checks every option and returns all problems found, one per
// line, each naming the flag and what to do about it: each option's own
// check (the table), then the rules that tie options together.
func (o *Options) Validate() error {
	var errs []error
	if len(o.Models) == 0 && !o.Remote.Enabled() {
		errs = append(errs, ErrNoModel)
	}
	if o.Remote.Enabled() {
		errs = append(errs, o.checks(remoteGroup)...)
	}
	errs = append(errs, o.checks(mainGroup)...)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case o.FeatureStoreOnly && o.FeatureStore == "":
		bad("--feature-store-only: needs --feature-store s3://BUCKET[/PREFIX] or a directory")
	case o.FeatureStore != "" && o.Remote.Enabled():
		bad("--feature-store with --remote: the feature server reads and fills the feature store (featurefs serve --feature-store)")
	case strings.Contains(o.FeatureStore, "://") && !strings.HasPrefix(o.FeatureStore, "s3://") && !strings.HasPrefix(o.FeatureStore, "file://"):
		bad("--feature-store %q: want s3://BUCKET[/PREFIX] or a directory", o.FeatureStore)
	}
	devKind, _, _ := spec.ParseDevice(o.Device)
	switch {
	case devKind == "cpu" && o.TensorRT:
		bad("--tensorrt runs on a GPU: drop it or use --device auto, cuda or cuda:N instead of cpu")
	case devKind == "cpu" && o.AllowCPUFallback:
		bad("--allow-cpu-fallback: --device cpu asks for no GPU to fall back from; drop one of them")
	}
	if devKind == "cpu" && (o.Precision == spec.TF32 || o.Precision == spec.FP16) {
		bad("--precision %s: the CPU computes in fp32; drop --precision or use --device auto, cuda or cuda:N", o.Precision)
	} else if err := o.checkFP16(); err != nil {
		errs = append(errs, err)
	}
	if o.Augment > 0 {
		scale, err1 := ParseRange("augment-scale", o.AugmentScale)
		ratio, err2 := ParseRange("augment-ratio", o.AugmentRatio)
		if err1 == nil && err2 == nil {
			if err := augment.CheckRanges(scale, ratio); err != nil {
				bad("--augment-scale %s --augment-ratio %s: %v", o.AugmentScale, o.AugmentRatio, err)
			}
		}
	}
	if devKind == "cpu" && o.Decode == "gpu" {
		bad("--decode gpu decodes JPEGs on a GPU: drop it (or use --decode auto) or use --device auto, cuda or cuda:N instead of cpu")
	}
	if o.Decode != "" && o.Decode != "cpu" && o.Remote.Enabled() && (o.Remote.Split == "" || o.Remote.Split == "none") {
		bad("--decode %s: with --remote the servers decode the images: give it to featurefs serve instead", o.Decode)
	}
	if o.FastDecode && o.Remote.Enabled() && (o.Remote.Split == "" || o.Remote.Split == "none") {
		bad("--fast-decode: with --remote the servers decode the images: give it to featurefs serve instead (a mount with --split auto, raw or K decodes too and takes it, matching the servers')")
	}
	return errors.Join(errs...)
}

// CheckViews checks a count of views given to --flag (--augment,
// --feature-augment): 0 (none) to augment.MaxViews.
func CheckViews(flag string, n int) error {
	if n < 0 || n > augment.MaxViews {
		return fmt.Errorf("--%s %d: must be from 0 (none) to %d", flag, n, augment.MaxViews)
	}
	return nil
}

// ParseRange parses a "lo,hi" range of --flag.
func ParseRange(flag, s string) ([2]float64, error) {
	lo, hi, ok := strings.Cut(s, ",")
	if !ok {
		return [2]float64{}, fmt.Errorf("--%s %q: want lo,hi, e.g. 0.08,1", flag, s)
	}
	var r [2]float64
	for i, v := range []string{lo, hi} {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return r, fmt.Errorf("--%s %q: %q is not a number", flag, s, v)
		}
		r[i] = f
	}
	return r, nil
}

// checkFeatureOps checks --feature-augment-ops.
func checkFeatureOps(s string) error {
	if _, err := augment.ParseFeatureOps(s); err != nil {
		return fmt.Errorf("--feature-augment-ops %q: %w", s, err)
	}
	return nil
}

// FeatureOps returns --feature-augment-ops parsed (Validate has checked
// it).
func (o *Options) FeatureOps() []string {
	ops, _ := augment.ParseFeatureOps(o.FeatureAugmentOps)
	return ops
}

// AugmentRanges returns --augment-scale and --augment-ratio parsed
// (Validate has checked them).
func (o *Options) AugmentRanges() (scale, ratio [2]float64) {
	scale, _ = ParseRange("augment-scale", o.AugmentScale)
	ratio, _ = ParseRange("augment-ratio", o.AugmentRatio)
	return scale, ratio
}

// checkFP16 is the rule that fp16 needs TensorRT.
func (o *Options) checkFP16() error {
	if o.Precision == spec.FP16 && !o.TensorRT {
		return errors.New("--precision fp16 needs --tensorrt (the CUDA provider runs fp32 or tf32)")
	}
	return nil
}

// ValidateExtractor checks the extractor's options alone (--device,
// --precision, --tensorrt) as featurefs extract and bench take them: each
// option's own check, and that fp16 needs TensorRT; the first problem
// found. Files are not looked at (the extractor reports a missing ONNX
// Runtime itself).
func (o *Options) ValidateExtractor() error {
	for _, name := range []string{"device", "precision"} {
		if err := Lookup(name).v.check(o); err != nil {
			return err
		}
	}
	return o.checkFP16()
}

// checkModels checks the models and their per-model prefetch limits.
func (o *Options) checkModels() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	badFile := func(format string, args ...any) { errs = append(errs, &modelProblem{fmt.Sprintf(format, args...)}) }
	seen := map[string]bool{}
	for _, m := range o.Models {
		arg := ModelArg(m)
		switch {
		case !validName.MatchString(m.Name) || m.Name == spec.LayersFile:
			bad("--model %s: model name %q must be letters, digits, '_', '-', '.' or '+' and not start with '.' or '-'", arg, m.Name)
		case seen[m.Name]:
			bad("--model %s: model %q is given twice", arg, m.Name)
		}
		seen[m.Name] = true
		if m.Path == "" {
			bad("model %q: no path: give its .onnx file (--model %s=PATH.onnx or path: in the config file)", m.Name, m.Name)
		} else if st, err := os.Stat(m.Path); errors.Is(err, os.ErrNotExist) {
			badFile("--model %s: file does not exist", arg)
		} else if err != nil {
			badFile("--model %s: %v", arg, err)
		} else if !st.Mode().IsRegular() {
			badFile("--model %s: not a regular file", arg)
		}
		if p := m.Preprocess; p != nil {
			if err := checkPreprocess(*p); err != nil {
				bad("model %q: preprocess: %v", m.Name, err)
			}
		}
		for alias, target := range m.Aliases {
			switch {
			case !validName.MatchString(alias) || alias == spec.LayersFile || spec.LayerLike(alias):
				bad("model %q: alias %q: must be a plain name other than %q and layerN", m.Name, alias, spec.LayersFile)
			case !isLayerName(target):
				bad("model %q: alias %s: %q is not a layer name such as layer18 (see `featurefs layers %s`)", m.Name, alias, target, m.Path)
			}
		}
	}
	for name, n := range o.ModelPrefetchLimits {
		if n < 0 {
			bad("model %q: prefetch-limit %d: must be 0 (no limit) or positive", name, n)
		}
	}
	return errors.Join(errs...)
}

// checkImageExtensions checks --image-extensions.
func checkImageExtensions(exts []string) error {
	var errs []error
	if len(exts) == 0 {
		errs = append(errs, errors.New("--image-extensions: must name at least one extension, e.g. jpg,jpeg,png"))
	}
	for _, e := range exts {
		if e == "" || e == "npy" || strings.ContainsAny(e, "./") || e != strings.ToLower(e) {
			errs = append(errs, fmt.Errorf("--image-extensions: %q: want lower-case extensions without dots, other than npy", e))
		}
	}
	return errors.Join(errs...)
}

// checkPreprocess checks the settings a config file can override.
func checkPreprocess(p spec.Preprocess) error {
	switch {
	case p.Crop <= 0:
		return fmt.Errorf("crop %d: must be positive (the model's input size, e.g. 224)", p.Crop)
	case p.Resize < p.Crop:
		return fmt.Errorf("resize %d: must be at least crop (%d)", p.Resize, p.Crop)
	}
	for i, s := range p.Std {
		if s <= 0 {
			return fmt.Errorf("std[%d] = %g: must be positive", i, s)
		}
	}
	return nil
}

// ArchiveFormats returns the formats --archives names ("tar", "zip"), none
// for "off".
func (o *Options) ArchiveFormats() []string {
	if o.Archives == "off" || o.Archives == "" {
		return nil
	}
	var out []string
	for f := range strings.SplitSeq(o.Archives, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// checkArchives checks --archives: off, or formats among tar and zip.
func checkArchives(s string) error {
	if s == "off" {
		return nil
	}
	if strings.TrimSpace(s) == "" {
		return failf("--archives %q: want tar,zip, tar, zip or off", s)
	}
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "tar" && f != "zip" {
			return failf("--archives %q: unknown format %q: want tar,zip, tar, zip or off", s, f)
		}
	}
	return nil
}

// MemorySizes are the bounds a mount derives from --memory-limit that have
// no flag of their own (0: the component's default).
type MemorySizes struct {
	// GoLimit is Go's soft memory limit (debug.SetMemoryLimit).
	GoLimit int64
	// Prefetch bounds the bytes prefetch's extractions hold; Handoff the
	// hand-off buffer; CacheWrite the queue of cache writes.
	Prefetch, Handoff, CacheWrite int64
}

// Shares of --memory-limit (ApplyMemoryLimit): the metadata budget a
// quarter, the decode budget and prefetch an eighth each, the fetched
// objects, the hand-off buffer and the cache write queue a sixteenth
// each, and Go's soft limit three quarters. Together with the fixed
// bounds (recent reads, Badger's memtables and caches),
// docs/RELIABILITY.md ("Memory bounds") sums them.
const (
	MemoryShareMetadata   = 4  // limit / 4
	MemoryShareDecode     = 8  // limit / 8
	MemoryShareFetch      = 16 // limit / 16
	MemorySharePrefetch   = 8  // limit / 8
	MemoryShareHandoff    = 16 // limit / 16
	MemoryShareCacheWrite = 16 // limit / 16
)

// ApplyMemoryLimit sizes from MemoryLimit the bounds left to it
// (--metadata-cache-size, --decode-memory, --fetch-memory) and returns the
// sizes of those without a flag; with MemoryLimit 0 it changes nothing and
// returns zeros. A bound given by a flag or a config-file key stays what
// it was given, even the default's value (Given): whether it was given
// decides, not its value.
func (o *Options) ApplyMemoryLimit() MemorySizes {
	l := o.MemoryLimit
	if l <= 0 {
		return MemorySizes{}
	}
	d := Default()
	// left says whether bound name, v now, is the limit's to size: not
	// given, and at its default (Options built without the table's flags
	// or file, as tests do, may set a bound without MarkGiven).
	left := func(name string, v, def int64) bool { return !o.Given(name) && v == def }
	if left("metadata-cache-size", o.MetadataCacheSize, d.MetadataCacheSize) {
		o.MetadataCacheSize = l / MemoryShareMetadata
	}
	if left("decode-memory", o.DecodeMemory, d.DecodeMemory) {
		o.DecodeMemory = max(l/MemoryShareDecode, 16*MiB)
	}
	if left("fetch-memory", o.FetchMemory, d.FetchMemory) {
		o.FetchMemory = max(l/MemoryShareFetch, 4*MiB)
	}
	return MemorySizes{GoLimit: l / 4 * 3, Prefetch: l / MemorySharePrefetch, Handoff: l / MemoryShareHandoff, CacheWrite: l / MemoryShareCacheWrite}
}

// What the models take of --memory-limit (MemoryNeed), measured with
// ResNet-50 (97 MiB file) on the CPU: its parsed graph holds no weights
// (they are read back from the file when a session opens), and the file's
// bytes, read whole while the model loads, are garbage before any session
// opens; opening a session takes, for a moment, about 2.5 times its
// weights (the pruned bytes, ONNX Runtime's parse and its reordered
// weights: layer18, 90 MiB of weights, took the process from 288 to 562
// MiB before settling at 90 MiB more); and a process with no model holds
// MemoryBaseNeed (Go's runtime, the libraries, Badger's memtables and
// caches).
const (
	MemorySessionOpenFactor = 5 // halves: 2.5 x the largest model's file
	MemoryBaseNeed          = 128 * MiB
)

// MemoryNeed returns the least --memory-limit the models can run in:
// opening a session of the largest one and the process's base
// (MemorySessionOpenFactor, MemoryBaseNeed), with a line naming those
// parts. A model file that cannot be read counts 0 (the model's own load
// reports it).
func (o *Options) MemoryNeed() (int64, string) {
	var largest int64
	for _, m := range o.Models {
		fi, err := os.Stat(m.Path)
		if err != nil {
			continue
		}
		largest = max(largest, fi.Size())
	}
	open := largest * MemorySessionOpenFactor / 2
	need := open + MemoryBaseNeed
	return need, fmt.Sprintf("%s: opening a session of the largest model %s, the process's base %s",
		FormatSize(need), FormatSize(open), FormatSize(MemoryBaseNeed))
}
