package views

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// Lister reads one directory of a layer's feature tree: its entries, named
// as the tree shows them (namespace.Namespace.OpenDir read to its end).
type Lister func(ctx context.Context, prefix string) ([]naming.Entry, error)

// ErrTooManyRows is matched by Scan's error when a directory holds more
// image objects than the limit it was given.
var ErrTooManyRows = errors.New("too many rows for an array view")

// listFanout bounds the class directories Scan lists at once.
const listFanout = 8

// Row is one image of a Dataset: its object, its feature file's path
// under the dataset's directory ("cat/img001.npy") and its label.
type Row struct {
	Obj   bucket.Object
	Path  string
	Label int32
}

// Dataset is a directory of a layer's feature tree as torchvision's
// DatasetFolder(dir, loader=np.load, extensions=(".npy",)) sees it: its
// classes are its subdirectories, sorted; a class's rows are the feature
// files under it at any depth, ordered as DatasetFolder orders them
// (sorted(os.walk(class)), then each directory's files sorted), each
// labelled with its class's index. Files directly in the directory are no
// class's and are not rows, as in DatasetFolder. A Dataset is a snapshot:
// it never changes; a changed listing is a new Dataset (another Version).
type Dataset struct {
	Prefix  string   // the directory's bucket prefix ("" or "train/")
	Classes []string // sorted
	Rows    []Row
	// Version is a digest of every row's path, object key, ETag and
	// label: two snapshots with the same Version have the same rows.
	Version uint64
	// ModTime is the newest object's modification time (zero for none).
	ModTime time.Time
}

// Scan lists prefix's directory and every directory under its
// subdirectories (at most listFanout classes at once) and returns the
// Dataset they make, or ErrTooManyRows past maxRows rows (0: no limit).
func Scan(ctx context.Context, list Lister, prefix string, maxRows int) (*Dataset, error) {
	top, err := list(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var classes []naming.Entry
	for _, e := range top {
		if e.Dir {
			classes = append(classes, e)
		}
	}
	sort.Slice(classes, func(i, j int) bool { return classes[i].Name < classes[j].Name })
	per := make([][]Row, len(classes))
	errs := make([]error, len(classes))
	var (
		mu    sync.Mutex
		total int
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, listFanout)
	var wg sync.WaitGroup
	for i, c := range classes {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			rows, err := walkClass(ctx, list, c, int32(i))
			if err == nil && maxRows > 0 {
				mu.Lock()
				total += len(rows)
				if total > maxRows {
					err = fmt.Errorf("%s: more than %d images: %w", prefix, maxRows, ErrTooManyRows)
				}
				mu.Unlock()
			}
			if err != nil {
				errs[i] = err
				cancel()
				return
			}
			per[i] = rows
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := &Dataset{Prefix: prefix, Classes: make([]string, len(classes))}
	for i, c := range classes {
		d.Classes[i] = c.Name
		d.Rows = append(d.Rows, per[i]...)
	}
	d.seal()
	return d, nil
}

// dirFiles is one directory of a class's walk: its path under the
// dataset's directory and its feature files.
type dirFiles struct {
	path  string // "cat" or "cat/sub"
	files []naming.Entry
}

// walkClass lists class c's directory and those under it and returns
// its rows in DatasetFolder's order: directories by their path as Python
// sorts strings (by code point, which for UTF-8 is byte order), each
// directory's files by name.
func walkClass(ctx context.Context, list Lister, c naming.Entry, label int32) ([]Row, error) {
	var dirs []dirFiles
	queue := []dirFiles{{path: c.Name}}
	subs := []string{c.Sub}
	for len(queue) > 0 {
		d, sub := queue[0], subs[0]
		queue, subs = queue[1:], subs[1:]
		es, err := list(ctx, sub)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			switch {
			case e.Dir:
				queue = append(queue, dirFiles{path: d.path + "/" + e.Name})
				subs = append(subs, e.Sub)
			case !e.Obj.Plain && strings.HasSuffix(strings.ToLower(e.Name), ".npy"):
				d.files = append(d.files, e)
			}
		}
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b dirFiles) int { return strings.Compare(a.path, b.path) })
	var rows []Row
	for _, d := range dirs {
		slices.SortFunc(d.files, func(a, b naming.Entry) int { return strings.Compare(a.Name, b.Name) })
		for _, e := range d.files {
			rows = append(rows, Row{Obj: e.Obj, Path: d.path + "/" + e.Name, Label: label})
		}
	}
	return rows, nil
}

// seal computes Version and ModTime.
func (d *Dataset) seal() {
	h := sha256.New()
	var n [8]byte
	for _, c := range d.Classes {
		fmt.Fprintf(h, "c\x00%s\x00", c)
	}
	for _, r := range d.Rows {
		binary.LittleEndian.PutUint32(n[:4], uint32(r.Label))
		h.Write(n[:4])
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", r.Path, r.Obj.Key, r.Obj.ETag)
		if r.Obj.ModTime.After(d.ModTime) {
			d.ModTime = r.Obj.ModTime
		}
	}
	d.Version = binary.LittleEndian.Uint64(h.Sum(nil))
}

// RowBytes is a Dataset row's share of the process's memory while the
// snapshot is held, roughly: what the snapshots' bound counts.
func (d *Dataset) bytes() int64 {
	n := int64(256)
	for _, r := range d.Rows {
		n += int64(96 + len(r.Path) + len(r.Obj.Key) + len(r.Obj.ETag))
	}
	return n
}
