package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/mountopts"
)

const cacheUsage = `Usage:
  featurefs cache stats [--cache-dir DIR] [--json]   show what the cache holds
  featurefs cache clear [--cache-dir DIR]            delete every cached feature

A mounted featurefs holds its cache directory: clear waits up to 30 s for
one that was unmounted and is closing it (saying so in one line), and
fails while one serves; stats of a cache in use gives what its files show
(the mount's live figures, entries included, are in MOUNT/.featurefs/stats).
`

// cacheCloseWait is how long featurefs cache waits for a featurefs that
// was unmounted to close the cache directory (umount returns before the
// mount's process has closed its cache and exited).
const cacheCloseWait = 30 * time.Second

// cacheFlags returns the flag set of featurefs cache SUB, bound to dir
// and asJSON; --json is stats' alone, and the help's (SUB "-h").
func cacheFlags(sub string, dir *string, asJSON *bool) *flag.FlagSet {
	fl := flag.NewFlagSet("featurefs cache "+sub, flag.ContinueOnError)
	fl.Usage = func() { fmt.Fprint(fl.Output(), cacheUsage, "\nFlags:\n"); fl.PrintDefaults() }
	fl.StringVar(dir, "cache-dir", mountopts.Default().CacheDir, "cache `directory`")
	if sub != "clear" {
		fl.BoolVar(asJSON, "json", false, "print the statistics as JSON")
	}
	return fl
}

// runCache implements "featurefs cache stats|clear".
func runCache(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, cacheUsage)
		return 2
	}
	sub, rest := args[0], args[1:]
	var (
		dir    string
		asJSON bool
	)
	fl := cacheFlags(sub, &dir, &asJSON)
	switch sub {
	case "stats", "clear":
	case "help", "-h", "--help":
		// The flags too, as every command's -h (README): those of
		// stats, which has clear's and --json.
		fmt.Print(cacheUsage, "\nFlags (--json: stats only):\n")
		fl.SetOutput(os.Stdout)
		fl.PrintDefaults()
		return 0
	default:
		fmt.Fprintf(os.Stderr, "featurefs cache: unknown subcommand %q\n\n%s", sub, cacheUsage)
		return 2
	}
	if err := fl.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fl.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "featurefs cache %s: unexpected arguments %q\n", sub, fl.Args())
		return 2
	}
	if err := checkCacheDir(dir); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs cache %s: %v\n", sub, err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := cache.Open(cache.Options{Dir: dir, Logger: logger, Inspect: true, WaitClosing: cacheCloseWait,
		OnWait: func(pid int) {
			fmt.Fprintf(os.Stderr, "featurefs cache %s: waiting up to %v for pid %d, which is closing the cache directory %s\n", sub, cacheCloseWait, pid, dir)
		}})
	if sub == "stats" && errors.Is(err, cache.ErrLocked) {
		// In use by a running mount or server: what its files show,
		// read without its lock.
		return cacheLiveStats(os.Stdout, dir, asJSON)
	}
	if sub == "clear" && errors.Is(err, cache.ErrDiskFull) {
		// Too full to open even read-only: delete the files unopened.
		if err := cache.ClearDir(dir); err != nil {
			fmt.Fprintf(os.Stderr, "featurefs cache clear: %v\n", err)
			return 1
		}
		fmt.Printf("cleared %s (unopened: its filesystem is full)\n", dir)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs cache %s: %v\n", sub, err)
		return 1
	}
	var code int
	if sub == "stats" {
		code = cacheStats(os.Stdout, s, asJSON)
	} else {
		code = cacheClear(os.Stdout, s)
	}
	if err := s.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs cache %s: %v\n", sub, err)
		return 1
	}
	return code
}

// cacheStatsJSON is what "featurefs cache stats --json" prints.
type cacheStatsJSON struct {
	Dir string `json:"dir"`
	cache.Stats
}

func cacheStats(w io.Writer, s *cache.Store, asJSON bool) int {
	st := s.Stats()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cacheStatsJSON{Dir: s.Dir(), Stats: st}); err != nil {
			fmt.Fprintf(os.Stderr, "featurefs cache stats: %v\n", err)
			return 1
		}
		return 0
	}
	pct := 0.0
	if st.MaxBytes > 0 {
		pct = 100 * float64(st.Bytes) / float64(st.MaxBytes)
	}
	fmt.Fprintf(w, "cache directory  %s\n", s.Dir())
	fmt.Fprintf(w, "entries          %d\n", st.Entries)
	fmt.Fprintf(w, "                 %d features (%s), %d archive index entries (%s)\n", st.Entries-st.ArchiveIndexEntries,
		mountopts.FormatSize(st.Bytes-st.ArchiveIndexBytes), st.ArchiveIndexEntries, mountopts.FormatSize(st.ArchiveIndexBytes))
	fmt.Fprintf(w, "stored           %s of %s budget (%.1f%%)\n", mountopts.FormatSize(st.Bytes), mountopts.FormatSize(st.MaxBytes), pct)
	if st.Entries > 0 {
		fmt.Fprintf(w, "average entry    %s\n", mountopts.FormatSize(st.Bytes/st.Entries))
	}
	fmt.Fprintf(w, "on disk          %s (%s more than stored)\n", mountopts.FormatSize(st.DiskBytes), mountopts.FormatSize(st.DiskOverheadBytes))
	fmt.Fprintf(w, "free on its fs   %s (the cache keeps %s of it free for its index)\n", mountopts.FormatSize(st.DiskFreeBytes), mountopts.FormatSize(st.DiskReserveBytes))
	if st.ReadOnly {
		fmt.Fprintf(w, "                 the filesystem is full: opened read-only; free space or run featurefs cache clear\n")
	}
	fmt.Fprintf(w, "disk overhead    evicted values not reclaimed yet, and up to %s of dead values in the value log's\n", mountopts.FormatSize(st.ValueLogFileBytes))
	fmt.Fprintf(w, "                 active file; a mount reclaims after %s of evictions, or %s after one (docs/RELIABILITY.md)\n",
		mountopts.FormatSize(st.ReclaimAfterBytes), time.Duration(st.ReclaimIntervalSeconds*float64(time.Second)))
	return 0
}

// cacheLiveJSON is what "featurefs cache stats --json" prints for a cache
// directory in use by another process.
type cacheLiveJSON struct {
	Dir           string `json:"dir"`
	InUseByPID    int    `json:"in_use_by_pid"`
	DiskBytes     int64  `json:"disk_bytes"`
	DiskFreeBytes int64  `json:"disk_free_bytes"`
}

// cacheLiveStats prints the figures of a cache directory another process
// holds that its files give without opening it: its size on disk, its
// filesystem's free space and the holder's pid.
func cacheLiveStats(w io.Writer, dir string, asJSON bool) int {
	pid, _ := cache.Holder(dir)
	disk, err := cache.DiskUsage(dir)
	var fs syscall.Statfs_t
	if err == nil {
		err = syscall.Statfs(dir, &fs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs cache stats: %s: %v\n", dir, err)
		return 1
	}
	st := cacheLiveJSON{Dir: dir, InUseByPID: pid, DiskBytes: disk, DiskFreeBytes: int64(fs.Bavail) * int64(fs.Bsize)}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			fmt.Fprintf(os.Stderr, "featurefs cache stats: %v\n", err)
			return 1
		}
		return 0
	}
	by := "another process"
	if pid > 0 {
		by = fmt.Sprintf("pid %d", pid)
	}
	fmt.Fprintf(w, "cache directory  %s\n", dir)
	fmt.Fprintf(w, "in use           by %s: read from its files without the lock; a mount's live figures, entries\n", by)
	fmt.Fprintf(w, "                 included, are in MOUNT/.featurefs/stats\n")
	fmt.Fprintf(w, "on disk          %s\n", mountopts.FormatSize(st.DiskBytes))
	fmt.Fprintf(w, "free on its fs   %s\n", mountopts.FormatSize(st.DiskFreeBytes))
	return 0
}

func cacheClear(w io.Writer, s *cache.Store) int {
	before := s.Stats()
	if err := s.Clear(); err != nil {
		fmt.Fprintf(os.Stderr, "featurefs cache clear: %v\n", err)
		return 1
	}
	fmt.Fprintf(w, "cleared %d entries (%s) from %s\n", before.Entries, mountopts.FormatSize(before.Bytes), s.Dir())
	return 0
}

// checkCacheDir refuses a directory that is neither empty nor a cache, so a
// mistyped --cache-dir does not get Badger files written into it.
func checkCacheDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("no cache at %s: %w", dir, err)
	}
	if len(ents) == 0 {
		return nil
	}
	for _, name := range []string{"MANIFEST", "featurefs.lock"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s is not a featurefs cache directory (no MANIFEST)", dir)
}
