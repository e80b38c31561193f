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
	"github.com/featurefs/featurefs/fs/bucket"
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
	remoteFlags(fl, &o.Remote)
	return fl
}

// sourceFlags binds the flags mount and serve share: models, the source,
// the cache, the extractor and logging.
func sourceFlags(fl *flag.FlagSet, o *mountopts.Options) {
	fl.Var(funcFlag{set: o.AddModel}, "model", "`NAME=PATH.onnx` of a model to serve (repeatable)")
	fl.StringVar(&o.ConfigFile, "config", o.ConfigFile, "YAML config `file` (models with preprocessing and aliases, and any option)")
	fl.StringVar(&o.EndpointURL, "endpoint-url", o.EndpointURL, "S3 endpoint `URL` for MinIO, Ceph RGW, ... (default AWS)")
	fl.StringVar(&o.Region, "region", o.Region, "S3 region")
	fl.StringVar(&o.Profile, "profile", o.Profile, "AWS profile for credentials (default: the standard credential chain)")
	fl.StringVar(&o.CacheDir, "cache-dir", o.CacheDir, "feature cache `directory`")
	fl.Var(sizeFlag{&o.CacheSize}, "cache-size", "feature cache bound, e.g. 10GiB, 512MiB")
	fl.StringVar(&o.Device, "device", o.Device, "auto, cpu, cuda or cuda:N")
	fl.BoolVar(&o.TensorRT, "tensorrt", o.TensorRT, "run models with TensorRT (FP16) on CUDA")
	fl.BoolVar(&o.AllowCPUFallback, "allow-cpu-fallback", o.AllowCPUFallback, "run on the CPU, with a warning, when the GPU that --device cuda[:N] or --tensorrt asks for cannot be had, instead of failing with exit code 4")
	fl.StringVar((*string)(&o.DType), "dtype", string(o.DType), "element type of the .npy files: float32 or float16")
	fl.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "images per model run (0: automatic)")
	fl.DurationVar(&o.NegativeTTL, "negative-ttl", o.NegativeTTL, "how long a bad object fails without being fetched again")
	fl.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	fl.StringVar(&o.ORTLib, "ort-lib", o.ORTLib, "path of libonnxruntime.so (or FEATUREFS_ORT_LIB)")
	fl.Int64Var(&o.MaxPixels, "max-pixels", o.MaxPixels, "reject images with more pixels")
	fl.Var(sizeFlag{&o.MaxObjectSize}, "max-object-size", "reject larger objects, e.g. 256MiB")
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

// parseMount builds the options: defaults, then the config file, then the
// flags (parsed twice: once to find --config, once over the file).
func parseMount(args []string) (mountopts.Options, []string, error) {
	o := mountopts.Default()
	pos, err := parseInterspersed(mountFlags(&o), args)
	if err != nil || o.ConfigFile == "" {
		return o, pos, err
	}
	cfg := o.ConfigFile
	o = mountopts.Default()
	if err := o.LoadFile(cfg); err != nil {
		return o, nil, err
	}
	pos, err = parseInterspersed(mountFlags(&o), args)
	o.ConfigFile = cfg
	return o, pos, err
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
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs mount: --log-file %s: %v\n", logPath, err)
		return exitUsage // as in the foreground (newLogger)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
		if err := os.MkdirAll(filepath.Dir(o.LogFile), 0o755); err != nil {
			return nil, nil, failf(exitUsage, "--log-file %s: %w", o.LogFile, err)
		}
		f, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
	if err := checkMountPoint(mnt, o.AllowNonempty, log); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b bucket.Bucket
	var ex featurefs.Extractor // nil: a local extraction service
	if o.Remote.Enabled() {
		rc, err := dialRemote(ctx, o.Remote, log)
		if err != nil {
			return err
		}
		defer rc.Close()
		var closeSplit func()
		if b, ex, closeSplit, err = remoteSplit(ctx, o, rc, log, rep.warn); err != nil {
			return err
		}
		defer closeSplit()
	} else {
		if b, err = openSource(ctx, source, o); err != nil {
			return err
		}
		warnIfEmpty(ctx, b, source, log, rep.warn)
	}

	store, err := openCache(o, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil {
			log.Error("featurefs: closing the cache", slog.Any("err", cerr))
			err = errors.Join(err, cerr)
		}
	}()

	if ex == nil {
		svc, err := newExtractor(o, o.DType, log, rep.warn)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := svc.Close(); cerr != nil {
				log.Error("featurefs: closing the extractor", slog.Any("err", cerr))
			}
		}()
		ex = svc
	}

	tree, err := featurefs.New(featurefs.Config{
		Bucket:          b,
		Extractor:       ex,
		Cache:           store,
		Logger:          log,
		MetadataTTL:     o.MetadataTTL,
		NegativeTTL:     o.NegativeTTL,
		ReadTimeout:     o.ReadTimeout,
		ImageExtensions: o.ImageExtensions,
		MaxObjectSize:   o.MaxObjectSize,
		ShowEmptyDirs:   o.ShowEmptyDirs,
		Prefetch: featurefs.PrefetchConfig{
			Mode: featurefs.PrefetchMode(o.Prefetch), Limit: o.PrefetchLimit, ModelLimits: o.ModelPrefetchLimits,
		},
	})
	if err != nil {
		return failf(exitModel, "%w", err)
	}
	defer tree.Close() // stops prefetch before the extractor and the cache close
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
		slog.String("device", ex.Device()), slog.Int("models", len(ex.Models())), slog.String("cache", o.CacheDir))
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
		unmount(srv.Unmount, mnt, log)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			log.Warn("featurefs: server did not stop 10s after unmount", slog.String("mountpoint", mnt))
		}
	}
	return nil
}

// unmount unmounts, retrying while the mount is busy, then detaches it
// lazily (it goes once its last user leaves).
func unmount(un func() error, mnt string, log *slog.Logger) {
	var err error
	for range 5 {
		if err = un(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Warn("featurefs: mount busy; detaching it lazily", slog.String("mountpoint", mnt), slog.Any("err", err))
	if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
		if out, ferr := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput(); ferr != nil {
			log.Error("featurefs: unmount failed", slog.String("mountpoint", mnt), slog.Any("err", err), slog.String("fusermount3", strings.TrimSpace(string(out))))
		}
	}
}

// checkMountPoint checks that mnt is a directory nobody has mounted on,
// clearing a stale FUSE mount (its server gone: ENOTCONN) first, and that
// it is empty unless allowNonempty (a mount would hide its files, which
// fuse refuses by default too).
func checkMountPoint(mnt string, allowNonempty bool, log *slog.Logger) error {
	if fstype, _, ok := mountedOn(mnt); ok && strings.HasPrefix(fstype, "fuse") {
		// stat may be answered from the kernel's attribute cache; reading
		// the directory reaches the server, or fails if it is gone.
		if _, err := os.ReadDir(mnt); errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
			log.Warn("featurefs: clearing a stale mount (its server is gone)", slog.String("mountpoint", mnt), slog.String("type", fstype))
			if uerr := syscall.Unmount(mnt, syscall.MNT_DETACH); uerr != nil {
				if out, ferr := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput(); ferr != nil {
					return failf(exitMountPoint, "mount point %s: a stale mount is there and cannot be removed (%v; fusermount3: %s): run 'umount -l %s'",
						mnt, uerr, strings.TrimSpace(string(out)), mnt)
				}
			}
		}
	}
	st, err := os.Stat(mnt)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return failf(exitMountPoint, "mount point %s does not exist: create it with mkdir -p %s", mnt, mnt)
	case err != nil:
		return failf(exitMountPoint, "mount point %s: %w", mnt, err)
	case !st.IsDir():
		return failf(exitMountPoint, "mount point %s is not a directory", mnt)
	}
	if fstype, src, ok := mountedOn(mnt); ok {
		return failf(exitMountPoint, "mount point %s is in use: %s (%s) is mounted there; unmount it first with 'umount %s'", mnt, src, fstype, mnt)
	}
	if allowNonempty {
		return nil
	}
	d, err := os.Open(mnt)
	if err != nil {
		return failf(exitMountPoint, "mount point %s: %w", mnt, err)
	}
	names, err := d.Readdirnames(1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return failf(exitMountPoint, "mount point %s: %w", mnt, err)
	}
	if len(names) > 0 {
		return failf(exitMountPoint, "mount point %s is not empty (it holds %s, ...): mounting would hide its files; use an empty directory, or pass --allow-nonempty to mount over them", mnt, fmt.Sprintf("%q", names[0]))
	}
	return nil
}

// mountedOn looks mnt up in /proc/self/mountinfo and returns the type and
// source of what is mounted there.
func mountedOn(mnt string) (fstype, source string, ok bool) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		// id parent major:minor root mountpoint options ... - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mnt {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				fstype, source = fields[i+1], unescapeMountinfo(fields[i+2])
			}
		}
		ok = true
	}
	return fstype, source, ok
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
