package views

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/naming"
)

// Source computes and caches features: features.Pipeline.
type Source interface {
	// Read is a reader's feature of obj at v: the whole .npy file.
	Read(ctx context.Context, v *features.View, obj bucket.Object) ([]byte, error)
	// ReadCachedAt copies the cached feature from off, never computing.
	ReadCachedAt(v *features.View, obj bucket.Object, dst []byte, off int64) (int, bool)
}

// ArrayEnv is what an array view needs from the mount.
type ArrayEnv struct {
	Source Source
	// Failed records a row whose image is bad (a NaN row): the mount's
	// failures record and log, once per object version.
	Failed func(v *features.View, ds *Dataset, row Row, err error)
	// Owner runs the extraction ahead in the background
	// (fs/internal/lifetime.Owner): Go returns false when the mount is
	// closing (fn then does not run), and Context ends when it closes.
	Owner interface {
		Go(fn func()) bool
		Context() context.Context
	}
	// Fetch bounds the rows one read computes at once; Ahead, the rows an
	// in-order reader has extracted ahead of it.
	Fetch, Ahead int
}

// Array is the data file of an array view: one .npy of shape
// (len(Rows), *layer shape), row i the feature of Rows[i], a row of NaN
// for an image that is bad. Its bytes at an offset are those of the
// per-file views of its rows, computed only for the rows the read covers,
// from and into the same cache entries.
type Array struct {
	env     *ArrayEnv
	v       *features.View
	ds      *Dataset
	hdr     []byte
	fileHdr int64 // the per-file .npy's header length
	row     int64 // bytes per row

	// ahead: rows [lo, hi) are being or have been extracted ahead of an
	// in-order reader; next is where the last read ended.
	mu       sync.Mutex
	next     int64 // GUARDED_BY(mu)
	aheadTo  int   // GUARDED_BY(mu)
	inFlight atomic.Int64
}

// NewArray returns the data file of ds at v.
func NewArray(env *ArrayEnv, v *features.View, ds *Dataset) *Array {
	shape := append([]int64{int64(len(ds.Rows))}, v.Layer.Shape...)
	dt := api.Float32
	if fh := int64(len(api.NPYHeader(v.Layer.Shape, api.Float32))); v.Size-fh != v.Layer.Elements()*4 {
		dt = api.Float16
	}
	fh := int64(len(api.NPYHeader(v.Layer.Shape, dt)))
	return &Array{env: env, v: v, ds: ds, hdr: api.NPYHeader(shape, dt), fileHdr: fh, row: v.Size - fh}
}

// Size is the file's size: known from the listing alone.
func (a *Array) Size() int64 { return int64(len(a.hdr)) + int64(len(a.ds.Rows))*a.row }

// ModTime is the newest row's object's.
func (a *Array) ModTime() time.Time { return a.ds.ModTime }

// Version identifies the rows (Dataset.Version).
func (a *Array) Version() uint64 { return a.ds.Version }

// nanRow returns a row of NaN in the file's element type.
func (a *Array) nanRow() []byte {
	b := make([]byte, a.row)
	if a.row == a.v.Layer.Elements()*4 {
		for i := 0; i+4 <= len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(math.NaN())))
		}
		return b
	}
	for i := 0; i+2 <= len(b); i += 2 {
		binary.LittleEndian.PutUint16(b[i:], 0x7e00) // float16 NaN
	}
	return b
}

// ReadAt fills p from off: the header, then each row the range covers,
// cached rows copied straight from the cache, the others computed (at
// most env.Fetch rows at once: the cache's reads overlap, and the
// extractor batches the computations). A bad image's
// row is NaN; any other failure fails the read. A read that starts where
// the last one ended also starts extracting the rows after it.
func (a *Array) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	size := a.Size()
	if off >= size || off < 0 {
		return 0, nil
	}
	p = p[:min(int64(len(p)), size-off)]
	n := 0
	if off < int64(len(a.hdr)) {
		n = copy(p, a.hdr[off:])
	}
	if n == len(p) {
		return n, nil
	}
	body := off + int64(n) - int64(len(a.hdr)) // offset in the rows
	first, last := body/a.row, (body+int64(len(p)-n)-1)/a.row
	type part struct {
		row      int64
		dst      []byte
		rowStart int64 // offset in the row of dst[0]
	}
	parts := make([]part, 0, last-first+1)
	for r := first; r <= last; r++ {
		start := max(body, r*a.row) - r*a.row
		end := min(body+int64(len(p)-n), (r+1)*a.row) - r*a.row
		dstOff := int64(n) + r*a.row + start - body
		parts = append(parts, part{row: r, dst: p[dstOff : dstOff+end-start], rowStart: start})
	}
	a.readAhead(off, int64(len(p)), int(last)+1)
	errs := make([]error, len(parts))
	sem := make(chan struct{}, max(a.env.Fetch, 1))
	var wg sync.WaitGroup
	for i, pt := range parts {
		row := a.ds.Rows[pt.row]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			// The cache first (a cold one reads its disk: the rows' reads
			// overlap), then the computation.
			if c, ok := a.env.Source.ReadCachedAt(a.v, row.Obj, pt.dst, a.fileHdr+pt.rowStart); ok && c == len(pt.dst) {
				return
			}
			errs[i] = a.compute(ctx, pt.row, row, pt.dst, pt.rowStart)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return len(p), nil
}

// compute reads row's feature (computing it) and copies its bytes from
// rowStart into dst: NaN for a bad image.
func (a *Array) compute(ctx context.Context, i int64, row Row, dst []byte, rowStart int64) error {
	data, err := a.env.Source.Read(ctx, a.v, row.Obj)
	switch {
	case err != nil && features.BadObject(err):
		if a.env.Failed != nil {
			a.env.Failed(a.v, a.ds, row, err)
		}
		copy(dst, a.nanRow()[rowStart:])
		return nil
	case err != nil:
		return fmt.Errorf("row %d (%s): %w", i, row.Obj.Key, err)
	case int64(len(data)) != a.fileHdr+a.row:
		return fmt.Errorf("row %d (%s): feature of %d bytes, want %d", i, row.Obj.Key, len(data), a.fileHdr+a.row)
	}
	copy(dst, data[a.fileHdr+rowStart:])
	return nil
}

// aheadSlack is how far from where the last read ended a read still
// counts as in order: the kernel's own read-ahead of a file and of a
// mapping sends reads a little out of order.
const aheadSlack = 2 << 20

// readAhead starts extracting the rows after row end when the read at
// off of n bytes starts where the last one ended (an in-order reader:
// np.load, a copy, a page-in of a mapping), keeping at most env.Ahead rows
// in flight ahead of it. Their features go to the cache (Source.Read), for
// the reads that follow.
func (a *Array) readAhead(off, n int64, end int) {
	if a.env.Ahead <= 0 || a.env.Owner == nil {
		return
	}
	a.mu.Lock()
	inOrder := off == 0 || (off >= a.next-aheadSlack && off <= a.next+aheadSlack)
	a.next = off + n
	from := max(end, a.aheadTo)
	to := min(end+a.env.Ahead, len(a.ds.Rows))
	if !inOrder || from >= to {
		a.mu.Unlock()
		return
	}
	a.aheadTo = to
	a.mu.Unlock()
	for r := from; r < to; r++ {
		if a.inFlight.Load() >= int64(a.env.Ahead) {
			a.mu.Lock()
			a.aheadTo = min(a.aheadTo, r)
			a.mu.Unlock()
			return
		}
		row := a.ds.Rows[r]
		a.inFlight.Add(1)
		ctx := a.env.Owner.Context()
		if !a.env.Owner.Go(func() {
			defer a.inFlight.Add(-1)
			// The row's first byte, not its last: a read that reaches a
			// just computed feature's end takes it out of the hand-off.
			var one [1]byte
			if _, ok := a.env.Source.ReadCachedAt(a.v, row.Obj, one[:], a.fileHdr); ok {
				return // cached already
			}
			_, _ = a.env.Source.Read(ctx, a.v, row.Obj)
		}) {
			a.inFlight.Add(-1)
			return
		}
	}
}

// Labels is the labels file of an array view: int64, one per row, the
// row's class index (DatasetFolder's targets).
type Labels struct {
	ds  *Dataset
	hdr []byte
}

// NewLabels returns the labels file of ds.
func NewLabels(ds *Dataset) *Labels {
	return &Labels{ds: ds, hdr: api.NPYHeaderOf("<i8", []int64{int64(len(ds.Rows))})}
}

// Size is the file's size.
func (l *Labels) Size() int64 { return int64(len(l.hdr)) + 8*int64(len(l.ds.Rows)) }

// ModTime is the newest row's object's.
func (l *Labels) ModTime() time.Time { return l.ds.ModTime }

// Version identifies the rows.
func (l *Labels) Version() uint64 { return l.ds.Version }

// ReadAt renders the header and the labels [off, off+len(p)) covers.
func (l *Labels) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	size := l.Size()
	if off >= size || off < 0 {
		return 0, nil
	}
	p = p[:min(int64(len(p)), size-off)]
	n := 0
	if off < int64(len(l.hdr)) {
		n = copy(p, l.hdr[off:])
	}
	var b [8]byte
	for n < len(p) {
		o := off + int64(n) - int64(len(l.hdr))
		binary.LittleEndian.PutUint64(b[:], uint64(int64(l.ds.Rows[o/8].Label)))
		n += copy(p[n:], b[o%8:])
	}
	return len(p), nil
}

// Rows is the row list of an array view: JSON lines, line i row i's
// object key, feature file (under the dataset's directory) and label:
//
//	{"row":0,"label":0,"key":"train/cat/img001.jpg","file":"cat/img001.npy"}
//
// with "key_b64" and "file_b64" beside a key or name that is not valid
// UTF-8 (naming.RawName).
type Rows struct {
	ds   *Dataset
	ends []int64 // ends[i]: the offset after line i
}

// NewRows returns the row list of ds.
func NewRows(ds *Dataset) *Rows {
	r := &Rows{ds: ds, ends: make([]int64, len(ds.Rows))}
	var pos int64
	for i := range ds.Rows {
		pos += int64(len(r.line(i)))
		r.ends[i] = pos
	}
	return r
}

func (r *Rows) line(i int) []byte {
	row := r.ds.Rows[i]
	b, _ := json.Marshal(struct {
		Row     int    `json:"row"`
		Label   int32  `json:"label"`
		Key     string `json:"key"`
		KeyB64  string `json:"key_b64,omitempty"`
		File    string `json:"file"`
		FileB64 string `json:"file_b64,omitempty"`
	}{i, row.Label, row.Obj.Key, naming.RawName(row.Obj.Key), row.Path, naming.RawName(row.Path)})
	return append(b, '\n')
}

// Size is the file's size.
func (r *Rows) Size() int64 {
	if len(r.ends) == 0 {
		return 0
	}
	return r.ends[len(r.ends)-1]
}

// ModTime is the newest row's object's.
func (r *Rows) ModTime() time.Time { return r.ds.ModTime }

// Version identifies the rows.
func (r *Rows) Version() uint64 { return r.ds.Version }

// ReadAt renders the lines [off, off+len(p)) covers.
func (r *Rows) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= r.Size() || off < 0 {
		return 0, nil
	}
	i := sort.Search(len(r.ends), func(i int) bool { return r.ends[i] > off })
	n := 0
	for ; i < len(r.ends) && n < len(p); i++ {
		start := int64(0)
		if i > 0 {
			start = r.ends[i-1]
		}
		line := r.line(i)
		skip := max(off+int64(n)-start, 0)
		n += copy(p[n:], line[skip:])
	}
	return n, nil
}
