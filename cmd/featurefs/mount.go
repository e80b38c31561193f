package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/featurefs/featurefs/extractor/api"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/extractor/spec"
	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/heappace"
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
stay attached). Unmount with 'umount MOUNTPOINT' or SIGTERM. A changed
model file is reloaded without a restart, as is every model on SIGHUP; with
--remote, the servers' new models are followed, and SIGHUP fetches them
(a --split mount follows its own --model files too, and never splits a
layer the two sides compute differently; docs/MODELS.md).

Flags override the config file (--config), which overrides the defaults.
Exit codes: 2 bad options, 3 mount point (missing, not empty, in use),
4 model/ONNX Runtime/asked-for GPU, 5 source (unreachable, no bucket,
credentials), 6 cache directory, 1 other.
With --remote, listings and features come from feature servers (featurefs
serve; docs/SERVE.md) and so do the models; there is no SOURCE argument.

Flags:
`

// unmountWait bounds how long a stop waits for the unmount (mountpoint.Unmount)
// before the process exits anyway: well inside Kubernetes' default grace
// period of 30 s, with the cache's close after it.
const unmountWait = 5 * time.Second

// unmountWithin runs unmount and reports whether it returned within wait.
// go-fuse's unmount returns only once its request loops end, which a copy
// of the mount in use in another mount namespace (a pod's other container,
// HostToContainer) prevents; the caller then exits, and closing /dev/fuse
// ends the connection there (its readers get ENOTCONN). The goroutine is
// left behind only in that case, for the process's last moments.
func unmountWithin(unmount func(), wait time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		unmount()
	}()
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// mountFlags binds every mount flag to o (the option table's Mount set).
func mountFlags(o *mountopts.Options) *flag.FlagSet {
	fl := flag.NewFlagSet("mount", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	bindOptions(fl, o, mountopts.Mount)
	return fl
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
// opts the mountopts.Options inside them, and bind their flag set. Every
// option given, by a flag or a key of the file, is marked given
// (mountopts.Options.MarkGiven), whatever its value.
func parseWithConfig[T any](args []string, fresh func() T, opts func(*T) *mountopts.Options, bind func(*T) *flag.FlagSet) (T, []string, error) {
	v := fresh()
	pos, err := parseGiven(bind(&v), opts(&v), args)
	cfg := opts(&v).ConfigFile
	if err != nil || cfg == "" {
		return v, pos, err
	}
	v = fresh()
	if err := opts(&v).LoadFile(cfg); err != nil {
		return v, nil, err
	}
	pos, err = parseGiven(bind(&v), opts(&v), args)
	opts(&v).ConfigFile = cfg
	return v, pos, err
}

// parseGiven parses args with fl (parseInterspersed) and marks in o each
// option whose flag the command line sets (flag.FlagSet.Visit: set, not
// merely equal to its default).
func parseGiven(fl *flag.FlagSet, o *mountopts.Options, args []string) ([]string, error) {
	pos, err := parseInterspersed(fl, args)
	fl.Visit(func(f *flag.Flag) {
		if mountopts.Lookup(f.Name) != nil {
			o.MarkGiven(f.Name)
		}
	})
	return pos, err
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
	if p := os.Getenv("FEATUREFS_CPUPROFILE"); p != "" {
		// A debugging aid (docs/GPU.md): where a mount's CPU goes. "%p"
		// in the path is the mount's pid.
		stop, err := startCPUProfile(strings.ReplaceAll(p, "%p", strconv.Itoa(os.Getpid())))
		if err != nil {
			fmt.Fprintf(os.Stderr, "featurefs mount: FEATUREFS_CPUPROFILE: %v\n", err)
			return exitUsage
		}
		defer stop()
	}
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
	logf, err := safefile.OpenAppend(logPath, 0o600)
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
		f, err := safefile.OpenAppend(o.LogFile, 0o600)
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
	if o.MemoryLimit > 0 && !o.Remote.Enabled() {
		// --memory-limit is the whole process's: one the models cannot
		// run in is refused before anything is mounted.
		if need, why := o.MemoryNeed(); o.MemoryLimit < need {
			return failf(exitUsage, "--memory-limit %s is less than the models need, at least %s (raise it, or give the models a process of their own: featurefs serve)",
				mountopts.FormatSize(o.MemoryLimit), why)
		}
	}
	mem := o.ApplyMemoryLimit()
	if mem.GoLimit > 0 {
		if env := os.Getenv("GOMEMLIMIT"); env != "" {
			log.Info("featurefs: GOMEMLIMIT set: Go's memory limit is the environment's, not three quarters of --memory-limit", slog.String("GOMEMLIMIT", env))
		} else {
			debug.SetMemoryLimit(mem.GoLimit)
		}
	}
	// The collector's headroom follows the live heap (fs/heappace), unless
	// GOGC says otherwise.
	if pacer := heappace.Start(os.Getenv); pacer != nil {
		defer pacer.Stop()
	} else {
		log.Info("featurefs: GOGC set: the collector's pace is the environment's, not fs/heappace's", slog.String("GOGC", os.Getenv("GOGC")))
	}
	if err := mountpoint.Check(mnt, o.AllowNonempty, log); err != nil {
		return failf(exitMountPoint, "%w", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := openStack(ctx, o, stackOptions{source: source, log: log, warn: rep.warn,
		remote: o.Remote.Enabled(), readTimeout: o.ReadTimeout, prefetch: true, storeWait: 10 * time.Second, memory: mem})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }() // after the tree (deferred below) has closed

	cfg := featurefs.Config{ShowEmptyDirs: o.ShowEmptyDirs, MetadataBytes: o.MetadataCacheSize}
	if strings.HasPrefix(source, "s3://") {
		// S3 pages come one at a time per token: list key ranges and
		// directories at once (a local directory lists in one read).
		cfg.ListFanout = bucket.DefaultListFanout
		cfg.ListRanges = o.ListRanges
	}
	tree, err := featurefs.New(st.pipe, cfg)
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
		// Only a raw cache has files of exactly the feature's bytes.
		Passthrough: o.Passthrough && o.CacheCompression == "off",
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
	if strings.HasPrefix(st.ex.Device(), "cuda") && o.Prefetch == spec.PrefetchOff {
		// Measured on an H100: a 16-worker DataLoader's epoch 1 ran
		// batches of 4 images on average without prefetch, 4x slower.
		log.Info("featurefs: on a GPU, --prefetch tree (or dir) lets the first epoch run full batches; without it a batch holds only the reads in progress")
	}
	rep.done("OK")

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// SIGHUP reloads the model files (a mount with local models, and a
	// split mount's own) and, with --remote, fetches the servers' models;
	// the watcher also reloads a file that changed.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	hup := make(chan struct{}, 1)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if st.svc != nil {
		go watchModels(watchCtx, st.svc, log, hup, func(m *api.Model) { tree.ModelReplaced(m) })
	}
	if sx := st.split.x; st.split.local != nil {
		// The tree follows the servers' versions; the mount's own file
		// only decides which layers it may compute part of (split.go).
		go watchModels(watchCtx, st.split.local, log, hup, func(m *api.Model) { sx.Replan(m.Name) })
	}
	if st.client != nil {
		// The servers' reloads: the client learns them from their answers
		// (or on SIGHUP) and the tree follows.
		sx := st.split.x
		st.client.OnModelReplaced(func(m *api.Model) {
			tree.ModelReplaced(m)
			if sx != nil {
				sx.Replan(m.Name)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	var s os.Signal
wait:
	for {
		select {
		case <-done:
			break wait
		case <-hups:
			if st.client != nil {
				go func() {
					ctx, cancel := context.WithTimeout(watchCtx, time.Minute)
					defer cancel()
					if err := st.client.Refresh(ctx); err != nil {
						log.Warn("featurefs: SIGHUP: the feature servers' models could not be fetched", slog.Any("err", err))
					}
				}()
				if st.split.local == nil {
					continue
				}
			}
			select {
			case hup <- struct{}{}:
			default: // a reload is already asked for
			}
		case s = <-sigs:
			break wait
		}
	}
	if st.cache != nil {
		// umount has returned: a featurefs cache command run now waits
		// for this process to close the cache instead of failing.
		st.cache.MarkClosing()
	}
	if s == nil {
		log.Info("featurefs: unmounted", slog.String("mountpoint", mnt))
	} else {
		log.Info("featurefs: unmounting", slog.String("signal", s.String()), slog.String("mountpoint", mnt))
		if !unmountWithin(func() { mountpoint.Unmount(srv.Unmount, mnt, log) }, unmountWait) {
			// This namespace's mount is gone, but a copy propagated into
			// another (a pod's other container) is still read: exiting
			// closes /dev/fuse, which ends the connection there.
			log.Warn("featurefs: the mount is still in use in another mount namespace; exiting ends it there (its readers get ENOTCONN)",
				slog.String("mountpoint", mnt), slog.Duration("waited", unmountWait))
			return nil
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			log.Warn("featurefs: server did not stop 10s after unmount", slog.String("mountpoint", mnt))
		}
	}
	return nil
}
