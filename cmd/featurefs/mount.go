package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/mountpoint"
	"github.com/featurefs/featurefs/mountopts"
)

// Exit codes of featurefs mount.
const (
	exitOK         = 0
	exitOther      = 1 // anything else; the message says what
	exitUsage      = 2 // bad flags or options
	exitMountPoint = 3 // mount point missing, not a directory, not empty, or in use
	exitModel      = 4 // a model, the ONNX Runtime library or the asked-for GPU cannot be had
	exitSource     = 5 // the source cannot be opened: unreachable, no bucket, bad credentials
	exitCache      = 6 // the cache directory cannot be opened or is in use
)

// readyFdEnv names the file descriptor a background child reports on:
// any number of "WARN <message>\n" lines for the user, then "OK\n" once
// mounted, or "ERR <code>\t<message>\n".
const readyFdEnv = "FEATUREFS_READY_FD"

const mountUsage = `Usage: featurefs mount [flags] SOURCE MOUNTPOINT
       featurefs mount --remote URL[,URL...] [flags] MOUNTPOINT

Mounts SOURCE (s3://BUCKET[/PREFIX] or a directory) read-only on MOUNTPOINT:
  MOUNTPOINT/features/<model>/<layer>/<key with .npy for its extension>
  MOUNTPOINT/features/<model>/layers
  MOUNTPOINT/.featurefs/stats
Returns once the mount answers and serves in the background (--foreground to
stay attached). Unmount with 'umount MOUNTPOINT' or SIGTERM.

Flags override the config file (--config), which overrides the defaults.
Exit codes: 2 bad options, 3 mount point (missing, not empty, in use),
4 model/ONNX Runtime/asked-for GPU, 5 source (unreachable, no bucket,
credentials), 6 cache directory, 1 other.
With --remote, listings and features come from feature servers (featurefs
serve; docs/SERVE.md) and so do the models; there is no SOURCE argument.

Flags:
`

// sizeFlag is a flag.Value of a byte size in mountopts.ParseSize's forms.
type sizeFlag struct{ p *int64 }

func (s sizeFlag) String() string {
	if s.p == nil {
		return ""
	}
	return mountopts.FormatSize(*s.p)
}

func (s sizeFlag) Set(v string) error {
	n, err := mountopts.ParseSize(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

// funcFlag is a flag.Value calling set for each use.
type funcFlag struct {
	show func() string
	set  func(string) error
}

func (f funcFlag) String() string {
	if f.show == nil {
		return ""
	}
	return f.show()
}
func (f funcFlag) Set(v string) error { return f.set(v) }

// mountFlags binds every mount flag to o.
func mountFlags(o *mountopts.Options) *flag.FlagSet {
	fl := flag.NewFlagSet("mount", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	sourceFlags(fl, o)
	fl.DurationVar(&o.MetadataTTL, "metadata-ttl", o.MetadataTTL, "how long listings are cached: a changed bucket shows after at most this long")
	fl.DurationVar(&o.ReadTimeout, "read-timeout", o.ReadTimeout, "bound on the fetch and extraction behind one read (0: none)")
	fl.BoolVar(&o.AllowOther, "allow-other", o.AllowOther, "let other users read the mount")
	fl.BoolVar(&o.AllowNonempty, "allow-nonempty", o.AllowNonempty, "mount over a directory that holds files (hiding them while mounted)")
	fl.BoolVar(&o.Foreground, "foreground", o.Foreground, "stay attached; log to stderr unless --log-file")
	fl.StringVar(&o.LogFile, "log-file", o.LogFile, "log `file` (default ~/.cache/featurefs/featurefs.log in the background)")
	fl.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "HOST:PORT to serve Prometheus metrics (/metrics) and the stats JSON (/stats) on, e.g. 127.0.0.1:9090")
	fl.Var(funcFlag{show: func() string { return strings.Join(o.ImageExtensions, ",") }, set: o.SetImageExtensions},
		"image-extensions", "object extensions shown as .npy, comma-separated")
	fl.StringVar(&o.Prefetch, "prefetch", o.Prefetch, "what the first read of a feature file starts extracting in the background: off, dir (its directory) or tree (its layer directory)")
	fl.BoolVar(&o.ShowEmptyDirs, "show-empty-dirs", o.ShowEmptyDirs, "show directories that hold no image and no subdirectory (folder markers, only other files)")
	fl.IntVar(&o.PrefetchLimit, "prefetch-limit", o.PrefetchLimit, "most objects one prefetch walk of a layer extracts (0: no limit)")
	fl.BoolVar(&o.FeatureStoreOnly, "feature-store-only", o.FeatureStoreOnly, "serve only the features the feature store has (one it lacks is EIO, never computed)")
	remoteFlags(fl, &o.Remote)
	return fl
}

// sourceFlags binds the flags mount and serve share: models, the source,
// the cache, the extractor and logging.
func sourceFlags(fl *flag.FlagSet, o *mountopts.Options) {
	fl.Var(funcFlag{set: o.AddModel}, "model", "`NAME=PATH.onnx`: a model served under features/NAME/ (repeatable)")
	fl.StringVar(&o.ConfigFile, "config", o.ConfigFile, "YAML config `file` (models with preprocessing and aliases, and any option)")
	fl.StringVar(&o.EndpointURL, "endpoint-url", o.EndpointURL, "S3 endpoint `URL` for MinIO, Ceph RGW, ... (default AWS)")
	fl.StringVar(&o.Region, "region", o.Region, "S3 region")
	fl.StringVar(&o.Profile, "profile", o.Profile, "AWS profile for credentials (default: the standard credential chain)")
	fl.StringVar(&o.CacheDir, "cache-dir", o.CacheDir, "feature cache `directory`")
	fl.StringVar(&o.FeatureStore, "feature-store", o.FeatureStore, "share features through s3://BUCKET[/PREFIX] or a directory: read after the cache, written after computing (docs/FEATURE-STORE.md)")
	fl.StringVar(&o.FeatureStoreCompression, "feature-store-compression", o.FeatureStoreCompression, "how features are written to the feature store: s2, zstd-fastest, zstd or off (plain .npy objects any tool can read); both kinds are read")
	fl.StringVar(&o.FeatureStoreEndpointURL, "feature-store-endpoint-url", o.FeatureStoreEndpointURL, "the feature store's S3 endpoint `URL` (default: --endpoint-url)")
	fl.StringVar(&o.FeatureStoreProfile, "feature-store-profile", o.FeatureStoreProfile, "AWS profile for the feature store's credentials (default: --profile)")
	fl.Var(sizeFlag{&o.CacheSize}, "cache-size", "feature cache bound, e.g. 10GiB, 512MiB")
	fl.StringVar(&o.CacheCompression, "cache-compression", o.CacheCompression, "how features are compressed in the cache: s2, zeros, zstd-fastest, zstd or off")
	fl.StringVar(&o.Device, "device", o.Device, "auto (every usable GPU, else the CPU), cpu, cuda (every usable GPU, or fail) or cuda:N,M,... (those GPUs)")
	fl.BoolVar(&o.TensorRT, "tensorrt", o.TensorRT, "run models with TensorRT on CUDA (without TensorRT's libraries: CUDA, with a warning)")
	fl.BoolVar(&o.AllowCPUFallback, "allow-cpu-fallback", o.AllowCPUFallback, "run on the CPU, with a warning, when the GPU that --device cuda[:N] or --tensorrt asks for cannot be had, instead of failing with exit code 4")
	fl.StringVar((*string)(&o.Precision), "precision", string(o.Precision), "GPU arithmetic: fp32, tf32 (TF32 tensor cores) or fp16 (with --tensorrt)")
	fl.StringVar(&o.CUDALibDir, "cuda-lib-dir", o.CUDALibDir, "`directories` (colon-separated) searched first for the CUDA and cuDNN libraries (or FEATUREFS_CUDA_LIB_DIR)")
	fl.StringVar((*string)(&o.DType), "dtype", string(o.DType), "element type of the .npy files: float32 or float16")
	fl.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "images per model run (0: automatic)")
	fl.DurationVar(&o.NegativeTTL, "negative-ttl", o.NegativeTTL, "how long a bad object fails without being fetched again")
	fl.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	fl.StringVar(&o.ORTLib, "ort-lib", o.ORTLib, "path of libonnxruntime.so (or FEATUREFS_ORT_LIB)")
	fl.Int64Var(&o.MaxPixels, "max-pixels", o.MaxPixels, "reject images with more pixels")
	fl.Var(sizeFlag{&o.MaxObjectSize}, "max-object-size", "reject larger objects (before fetching)")
	fl.Var(sizeFlag{&o.DecodeMemory}, "decode-memory", "bound on the memory of the images being decoded at once, estimated from their headers")
	fl.BoolVar(&o.FastDecode, "fast-decode", o.FastDecode, "decode a JPEG whose shorter side is at least 8, 4 or 2 times the resize size at 1/8, 1/4 or 1/2 of its size (libjpeg DCT scaling): faster on large photos, features close to torchvision's but not bit-exact")
}

// parseInterspersed parses flags anywhere among the positional arguments.
func parseInterspersed(fl *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fl.Parse(args); err != nil {
			return nil, err
		}
		args = fl.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseWithConfig is the one flag and config-file parse of mount, serve
// and warm: fresh options, then the --config file if the flags name one,
// then the flags again over it (flags override the file, which overrides
// the defaults). fresh returns the command's options with their defaults,
// opts the mountopts.Options inside them, and bind their flag set.
func parseWithConfig[T any](args []string, fresh func() T, opts func(*T) *mountopts.Options, bind func(*T) *flag.FlagSet) (T, []string, error) {
	v := fresh()
	pos, err := parseInterspersed(bind(&v), args)
	cfg := opts(&v).ConfigFile
	if err != nil || cfg == "" {
		return v, pos, err
	}
	v = fresh()
	if err := opts(&v).LoadFile(cfg); err != nil {
		return v, nil, err
	}
	pos, err = parseInterspersed(bind(&v), args)
	opts(&v).ConfigFile = cfg
	return v, pos, err
}

// parseMount builds mount's options (parseWithConfig).
func parseMount(args []string) (mountopts.Options, []string, error) {
	return parseWithConfig(args, mountopts.Default,
		func(o *mountopts.Options) *mountopts.Options { return o }, mountFlags)
}

// mountError is an error with the exit code it ends featurefs mount with.
type mountError struct {
	code int
	err  error
}

func (e *mountError) Error() string { return e.err.Error() }
func (e *mountError) Unwrap() error { return e.err }

func failf(code int, format string, args ...any) error {
	return &mountError{code: code, err: fmt.Errorf(format, args...)}
}

// exitCode returns the exit code an error ends the command with.
func exitCode(err error) int {
	var me *mountError
	if errors.As(err, &me) {
		return me.code
	}
	return exitOther
}

func runMount(args []string) int {
	o, pos, err := parseMount(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stderr, mountUsage)
		fl := mountFlags(&o)
		fl.SetOutput(os.Stderr)
		fl.PrintDefaults()
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: %v\nRun 'featurefs mount -h' for the flags.\n", err)
		return exitUsage
	}
	if o.Remote.Enabled() && len(pos) == 1 {
		pos = append([]string{remoteSource(o.Remote)}, pos...)
	} else if o.Remote.Enabled() {
		fmt.Fprintf(os.Stderr, "featurefs mount: with --remote, want only MOUNTPOINT (the servers' source is mounted), got %d arguments\n\n%s", len(pos), mountUsage)
		return exitUsage
	} else if len(pos) != 2 {
		fmt.Fprintf(os.Stderr, "featurefs mount: want SOURCE and MOUNTPOINT, got %d arguments\n\n%s", len(pos), mountUsage)
		return exitUsage
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nfeaturefs mount: "))
		return validateCode(err)
	}
	source, mnt := pos[0], pos[1]
	if !strings.Contains(source, "://") && !o.Remote.Enabled() {
		if abs, err := filepath.Abs(source); err == nil {
			source = abs
		}
	}
	if abs, err := filepath.Abs(mnt); err == nil {
		mnt = abs
	}
	if !o.Foreground {
		return daemonize(args, o, mnt)
	}
	rep := newReporter()
	err = serve(o, source, mnt, rep)
	if err != nil {
		code := exitCode(err)
		rep.done(fmt.Sprintf("ERR %d\t%s", code, oneLine(err.Error())))
		fmt.Fprintf(os.Stderr, "featurefs mount: %v\n", err)
		return code
	}
	return exitOK
}

// validateCode is the exit code of a failed Options.Validate: 4 when every
// problem is a missing or unusable model file or ONNX Runtime library, 2
// (bad options) otherwise.
func validateCode(err error) int {
	if mountopts.ModelProblemsOnly(err) {
		return exitModel
	}
	return exitUsage
}

// oneLine joins a message's lines with "; ".
func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// reporter is how a mount process tells the user what they must know
// without reading the log: warnings, then that it is mounted or why not. A
// background child (daemonize) writes them to its parent through the ready
// pipe, which prints them on the terminal; a plain foreground run prints
// warnings on stderr itself.
type reporter struct {
	mu sync.Mutex
	f  *os.File // the ready pipe; nil in a plain foreground run or once done
}

// newReporter returns the reporter of this process: on the ready pipe when
// it is a background child.
func newReporter() *reporter {
	fd, err := strconv.Atoi(os.Getenv(readyFdEnv))
	if err != nil || fd < 3 {
		return &reporter{}
	}
	os.Unsetenv(readyFdEnv)
	return &reporter{f: os.NewFile(uintptr(fd), "ready")}
}

// warn tells the user msg (one line). Callers log it themselves.
func (r *reporter) warn(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		fmt.Fprintf(r.f, "WARN %s\n", oneLine(msg))
		return
	}
	fmt.Fprintf(os.Stderr, "featurefs mount: warning: %s\n", oneLine(msg))
}

// done reports "OK" or "ERR <code>\t<message>" to a daemonizing parent and
// closes the pipe; later reports go nowhere.
func (r *reporter) done(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return
	}
	fmt.Fprintln(r.f, msg)
	r.f.Close()
	r.f = nil
}

// daemonize runs `featurefs mount --foreground ARGS` in a new session with
// its output in the log file, and waits until it reports that the mount
// answers, or fails with its message and exit code.
func daemonize(args []string, o mountopts.Options, mnt string) int {
	logPath := o.LogFile
	if logPath == "" {
		logPath = mountopts.DefaultLogFile()
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: --log-file %s: %v\n", logPath, err)
		return exitUsage // as in the foreground (newLogger)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: --log-file %s: %v\n", logPath, err)
		return exitUsage
	}
	defer logf.Close()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: %v\n", err)
		return exitOther
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: %v\n", err)
		return exitOther
	}
	cmd := exec.Command(exe, append([]string{"mount", "--foreground"}, args...)...)
	cmd.Env = append(os.Environ(), readyFdEnv+"=3")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: starting the server: %v\n", err)
		return exitOther
	}
	w.Close()
	rd := bufio.NewReader(r)
	line, _ := rd.ReadString('\n')
	for {
		msg, ok := strings.CutPrefix(strings.TrimSpace(line), "WARN ")
		if !ok {
			break
		}
		fmt.Fprintf(os.Stderr, "featurefs mount: warning: %s\n", msg)
		line, _ = rd.ReadString('\n')
	}
	r.Close()
	line = strings.TrimSpace(line)
	switch {
	case line == "OK":
		fmt.Fprintf(os.Stderr, "featurefs: mounted on %s (pid %d, log %s)\n", mnt, cmd.Process.Pid, logPath)
		cmd.Process.Release()
		return exitOK
	case strings.HasPrefix(line, "ERR "):
		codeStr, msg, _ := strings.Cut(strings.TrimPrefix(line, "ERR "), "\t")
		cmd.Wait()
		fmt.Fprintf(os.Stderr, "featurefs mount: %s\n", msg)
		if code, err := strconv.Atoi(codeStr); err == nil {
			return code
		}
		return exitOther
	}
	err = cmd.Wait()
	fmt.Fprintf(os.Stderr, "featurefs mount: the server exited before mounting (%v); see %s\n", err, logPath)
	return exitOther
}

// newLogger returns the mount's logger: stderr, or --log-file.
func newLogger(o mountopts.Options) (*slog.Logger, io.Closer, error) {
	var level slog.Level
	switch strings.ToLower(o.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	var w io.Writer = os.Stderr
	var c io.Closer = io.NopCloser(nil)
	if o.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.LogFile), 0o700); err != nil {
			return nil, nil, failf(exitUsage, "--log-file %s: %w", o.LogFile, err)
		}
		f, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, failf(exitUsage, "--log-file %s: %w", o.LogFile, err)
		}
		w, c = f, f
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), c, nil
}

// serve mounts and serves until unmounted (umount or a signal). rep hears
// the warnings for the user and "OK" once the mount answers.
func serve(o mountopts.Options, source, mnt string, rep *reporter) (err error) {
	log, logc, err := newLogger(o)
	if err != nil {
		return err
	}
	defer logc.Close()
	if err := mountpoint.Check(mnt, o.AllowNonempty, log); err != nil {
		return failf(exitMountPoint, "%w", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := openStack(ctx, o, stackOptions{source: source, log: log, warn: rep.warn,
		remote: o.Remote.Enabled(), readTimeout: o.ReadTimeout, prefetch: true, storeWait: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }() // after the tree (deferred below) has closed

	tree, err := featurefs.New(st.pipe, featurefs.Config{ShowEmptyDirs: o.ShowEmptyDirs})
	if err != nil {
		return failf(exitModel, "%w", err)
	}
	defer tree.Close()
	if o.MetricsAddr != "" {
		stop, err := startMetrics(o.MetricsAddr, tree, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	srv, err := tree.Mount(mnt, featurefs.MountOptions{
		FsName:      source,
		AllowOther:  o.AllowOther,
		DirectMount: os.Geteuid() == 0,
	})
	if err != nil {
		return failf(exitMountPoint, "%w", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "features")); err != nil {
		srv.Unmount()
		return failf(exitMountPoint, "mounted %s but it does not answer: %w", mnt, err)
	}
	log.Info("featurefs: mounted", slog.String("source", source), slog.String("mountpoint", mnt),
		slog.String("device", st.ex.Device()), slog.Int("models", len(st.ex.Models())), slog.String("cache", o.CacheDir))
	if pm, _ := features.ParsePrefetchMode(o.Prefetch); strings.HasPrefix(st.ex.Device(), "cuda") && pm == features.PrefetchOff {
		// Measured on an H100: a 16-worker DataLoader's epoch 1 ran
		// batches of 4 images on average without prefetch, 4x slower.
		log.Info("featurefs: on a GPU, --prefetch tree (or dir) lets the first epoch run full batches; without it a batch holds only the reads in progress")
	}
	rep.done("OK")

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	select {
	case <-done:
		log.Info("featurefs: unmounted", slog.String("mountpoint", mnt))
	case s := <-sigs:
		log.Info("featurefs: unmounting", slog.String("signal", s.String()), slog.String("mountpoint", mnt))
		mountpoint.Unmount(srv.Unmount, mnt, log)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			log.Warn("featurefs: server did not stop 10s after unmount", slog.String("mountpoint", mnt))
		}
	}
	return nil
}
