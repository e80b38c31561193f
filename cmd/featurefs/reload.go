package main

// Models replaced without a restart (docs/MODELS.md, "Reload"): a mount
// and a server watch their model files and reload one that changed, or all on SIGHUP.

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
)

// modelWatchInterval is how often a mount looks at its model files. A
// change is loaded once the file has kept its size, mtime and inode for one
// interval (a file being rewritten in place is not read half written).
const modelWatchInterval = 2 * time.Second

// fileState is what the watcher compares of a model file.
type fileState struct {
	size  int64
	mtime time.Time
	ino   uint64
	err   bool
}

func statFile(path string) fileState {
	fi, err := os.Stat(path)
	if err != nil {
		return fileState{err: true}
	}
	st := fileState{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// watchModels reloads svc's models until ctx ends: each whose file changed
// and then stayed the same for modelWatchInterval, and every one at once on
// a value from hup. Loading and checking run here, off the read path;
// replaced is called with each new version. A file that cannot replace its
// model is refused with one WARN line per change of the file, and the old
// version keeps serving.
func watchModels(ctx context.Context, svc *extractor.Service, log *slog.Logger, hup <-chan struct{}, replaced func(*api.Model)) {
	seen := map[string]fileState{}    // the state last loaded (or refused)
	pending := map[string]fileState{} // a changed state waiting to settle
	for _, v := range svc.Versions() {
		seen[v.Name] = statFile(v.Path)
	}
	reload := func(name string) {
		t := time.Now()
		m, changed, err := svc.Reload(name)
		switch {
		case errors.Is(err, extractor.ErrReloadRefused):
			log.Warn("featurefs: model file refused; the old version keeps serving", slog.String("model", name), slog.Any("err", err))
		case err != nil:
			log.Warn("featurefs: model reload failed; the old version keeps serving", slog.String("model", name), slog.Any("err", err))
		case changed:
			replaced(m)
			log.Info("featurefs: model reloaded", slog.String("model", name), slog.String("digest", m.Digest), slog.Duration("took", time.Since(t)))
		}
	}
	tick := time.NewTicker(modelWatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			for _, v := range svc.Versions() {
				seen[v.Name] = statFile(v.Path)
				delete(pending, v.Name)
				reload(v.Name)
			}
		case <-tick.C:
			for _, v := range svc.Versions() {
				st := statFile(v.Path)
				switch p, ok := pending[v.Name]; {
				case st == seen[v.Name]:
					delete(pending, v.Name)
				case ok && p == st && !st.err:
					delete(pending, v.Name)
					seen[v.Name] = st
					reload(v.Name)
				default:
					pending[v.Name] = st
				}
			}
		}
	}
}
