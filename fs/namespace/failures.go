package namespace

import (
	"container/list"
	"sort"
	"sync"
	"time"
)

// FailedFile is one feature file whose last read failed.
type FailedFile struct {
	// File is the file's path under its layer directory
	// (features/MODEL/LAYER/), slash-separated: the object's directory
	// prefix and the file's name.
	File string `json:"file"`
	// Key is the object key it stands for.
	Key string `json:"key"`
	// Error is why, as the mount recorded it (without the key).
	Error string `json:"error"`
	// Time is when it failed (RFC 3339, UTC).
	Time string `json:"time"`
}

// Failures is the record of the feature files whose last read failed: the
// content of the tree's .featurefs/failures, so that a tool that walks the
// tree (featurefs warm) learns which object a failing name stands for and
// why, without re-implementing the naming rule.
type Failures struct {
	// Files are the failed files, sorted by File; at most maxFailedFiles,
	// the most recent.
	Files []FailedFile `json:"files"`
	// Dropped counts failures no longer listed (evicted by newer ones).
	Dropped int64 `json:"dropped"`
}

// maxFailedFiles bounds .featurefs/failures.
const maxFailedFiles = 1000

// failedFiles is a bounded record of feature files whose last read
// failed: a later successful read of the file removes it; when full, the
// oldest failure goes.
type failedFiles struct {
	mu      sync.Mutex
	max     int
	order   *list.List               // of *FailedFile, oldest first; GUARDED_BY(mu)
	byFile  map[string]*list.Element // GUARDED_BY(mu)
	dropped int64                    // GUARDED_BY(mu)
}

func newFailedFiles(max int) *failedFiles {
	return &failedFiles{max: max, order: list.New(), byFile: map[string]*list.Element{}}
}

// add records that file (standing for key) failed with reason at t.
func (ff *failedFiles) add(file, key, reason string, t time.Time) {
	rec := &FailedFile{File: file, Key: key, Error: reason, Time: t.UTC().Format(time.RFC3339)}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if e, ok := ff.byFile[file]; ok {
		ff.order.Remove(e)
	}
	ff.byFile[file] = ff.order.PushBack(rec)
	for ff.order.Len() > ff.max {
		e := ff.order.Front()
		ff.order.Remove(e)
		delete(ff.byFile, e.Value.(*FailedFile).File)
		ff.dropped++
	}
}

// clear forgets file's failure, if any.
func (ff *failedFiles) clear(file string) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if e, ok := ff.byFile[file]; ok {
		ff.order.Remove(e)
		delete(ff.byFile, file)
	}
}

// snapshot returns the record, sorted by file.
func (ff *failedFiles) snapshot() Failures {
	ff.mu.Lock()
	out := Failures{Files: make([]FailedFile, 0, ff.order.Len()), Dropped: ff.dropped}
	for e := ff.order.Front(); e != nil; e = e.Next() {
		out.Files = append(out.Files, *e.Value.(*FailedFile))
	}
	ff.mu.Unlock()
	sort.Slice(out.Files, func(i, j int) bool { return out.Files[i].File < out.Files[j].File })
	return out
}

// Failures returns the feature files whose last read failed.
func (ns *Namespace) Failures() Failures { return ns.failed.snapshot() }
