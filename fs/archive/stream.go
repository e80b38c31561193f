package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
)

// Streaming: a walk of a whole archive (warm, prefetch) reads it once, in
// one streaming GET (bucket.Streamer), and hands its image members over
// in offset order:
//
//   - a tar whose index is kept (memory, IndexStore): one GET from the
//     first member wanted to the end of the last;
//   - a tar whose index is not kept: one GET of the whole archive, its
//     headers walked from the stream and its index built in the same pass
//     (the same rules as indexTar, so the same index), and kept;
//   - a zip: its index (the central directory: one ranged GET when not
//     kept), then one GET from the first member wanted to the end.
//
// Memory: the stream holds one member's bytes at a time (a member over
// the object-size bound fails alone, unread), never the archive. The
// queue between the stream and the extractor is the caller's: visit is
// called in the stream's goroutine, one member at a time, and the stream
// waits while it does (warm and prefetch wait there for room in their
// budget of extractions in flight, count and bytes), so at most one
// member read ahead of that budget is held.
//
// A stream that breaks part way (the store's error, or fewer bytes than
// the archive's size) is logged once, naming the archive key, and the
// members left are read with ranged GETs (from the index, built with
// ranged GETs if the stream was building it); a member whose ranged read
// fails fails alone.

// ErrNoStream is matched by Stream's error when the archive cannot be
// streamed (the bucket cannot, the key is no archive, or it changed while
// opened) and nothing was handed over: list it instead.
var ErrNoStream = errors.New("archive: cannot stream")

// StreamMember is one image member Stream hands over.
type StreamMember struct {
	// Object is the member as List shows it.
	Object bucket.Object
	// Data is its bytes (nil when Skipped or Err).
	Data []byte
	// Err is why its bytes could not be read: the member alone fails.
	Err error
	// Skipped is true when want declined it: its bytes were not read.
	Skipped bool
}

// StreamPrefix reports whether prefix ("a/b.tar/" or "a/b.tar/dir/") is
// inside an archive Stream can read: arch is its key, dir the prefix
// relative to it ("" or "dir/").
func (w *Bucket) StreamPrefix(prefix string) (arch, dir string, ok bool) {
	if _, ok := w.b.(bucket.Streamer); !ok || !strings.HasSuffix(prefix, "/") {
		return "", "", false
	}
	return w.split(prefix)
}

// Stream reads the image members of archive arch that are in dir
// (relative to the archive, "" or ending in '/'; tree: at any depth under
// it, else directly in it) in one streaming GET (see above), and calls
// visit for each in offset order: with its bytes when want(obj) said yes
// (nil want: every member), else Skipped. visit's error stops the stream
// and is returned. A bad archive's error matches ErrBadArchive (logged
// once); ErrNoStream: nothing was visited, list the archive instead.
func (w *Bucket) Stream(ctx context.Context, arch, dir string, tree bool, want func(bucket.Object) bool, visit func(StreamMember) error) (err error) {
	defer func() {
		if e := parsePanic(recover()); e != nil {
			err = fmt.Errorf("archive %s: %w", arch, e)
			w.log.Warn("featurefs: bad archive: its stream fails", slog.String("key", arch), slog.Any("err", e))
		}
	}()
	st, ok := w.b.(bucket.Streamer)
	if !ok {
		return fmt.Errorf("archive %s: %w", arch, ErrNoStream)
	}
	if want == nil {
		want = func(bucket.Object) bool { return true }
	}
	s := &streamer{w: w, st: st, arch: arch, dir: dir, tree: tree, want: want, visit: visit}
	x, kept := w.indexes.Get(arch)
	if kept {
		w.n.indexMemory.Add(1)
	} else {
		lo, sx, err := w.stored(ctx, arch)
		switch {
		case errors.Is(err, errNotArchive):
			return fmt.Errorf("archive %s: %w", arch, ErrNoStream)
		case err != nil:
			return err
		case sx != nil:
			w.indexes.Put(arch, sx, sx.cost())
			x = sx
		case !strings.HasSuffix(strings.ToLower(arch), ".zip"):
			return s.tar(ctx, lo)
		default:
			if x, err = w.index(ctx, arch); err != nil {
				if errors.Is(err, errNotArchive) || errors.Is(err, errChanged) {
					return fmt.Errorf("archive %s: %v: %w", arch, err, ErrNoStream)
				}
				return err
			}
		}
	}
	if x.err != nil {
		return x.err
	}
	return s.indexed(ctx, x)
}

// streamer is one Stream call.
type streamer struct {
	w         *Bucket
	st        bucket.Streamer
	arch, dir string
	tree      bool
	want      func(bucket.Object) bool
	visit     func(StreamMember) error
}

// in reports whether member path is one Stream hands over: an image in
// dir (tree: under it).
func (s *streamer) in(path string) bool {
	rest, ok := strings.CutPrefix(path, s.dir)
	if !ok || (!s.tree && strings.Contains(rest, "/")) {
		return false
	}
	_, b := split(path)
	_, _, img := spec.SplitImage(b, s.w.cfg.ImageExtensions)
	return img
}

// open opens the stream of [off, off+n) of the archive (n <= 0: to its
// end), checking its version against x's.
func (s *streamer) open(ctx context.Context, etag string, size, off, n int64) (*seqReader, error) {
	body, obj, err := s.st.GetStream(ctx, s.arch, off, n)
	if err != nil {
		return nil, err
	}
	s.w.n.streamGets.Add(1)
	if (etag != "" && obj.ETag != etag) || (obj.Size >= 0 && obj.Size != size) {
		body.Close()
		s.w.indexes.RemoveIf(s.arch, func(y *index) bool { return y.etag == etag })
		s.w.forget(s.arch)
		return nil, fmt.Errorf("archive %s: ETag %s (%d bytes), indexed as %s (%d bytes): %w", s.arch, obj.ETag, obj.Size, etag, size, ErrNoStream)
	}
	end := size
	if n > 0 {
		end = min(size, off+n)
	}
	return &seqReader{body: body, pos: off, end: end, bytes: &s.w.n.bytesRead}, nil
}

// broke logs a stream's break, once, naming the archive.
func (s *streamer) broke(at int64, err error) {
	s.w.n.breaks.Add(1)
	s.w.log.Warn("featurefs: archive stream broke; the members left are read with ranged GETs",
		slog.String("key", s.arch), slog.Int64("offset", at), slog.Any("err", err))
}

// deliver visits member m of x with its bytes (or why not), or Skipped.
func (s *streamer) deliver(x *index, m *member, wanted bool, data []byte, err error) error {
	sm := StreamMember{Object: x.object(m), Data: data, Err: err, Skipped: !wanted}
	if wanted && err == nil {
		s.w.n.streamed.Add(1)
	}
	return s.visit(sm)
}

// indexed streams the members of the kept index x.
func (s *streamer) indexed(ctx context.Context, x *index) error {
	var ms []*member
	for i := range x.members {
		if m := &x.members[i]; !m.plain && s.in(m.path) {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b *member) int { return int(min(max(a.off-b.off, -1), 1)) })
	wanted := make([]bool, len(ms))
	first, last := -1, -1
	for i, m := range ms {
		if wanted[i] = s.want(x.object(m)); wanted[i] && s.w.tooLarge(x, m, 0) == nil {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	var r *seqReader
	if first >= 0 {
		start, n := ms[first].off, int64(0) // a zip member: to the end (its local header's length is not known)
		if !ms[first].zip {
			n = ms[last].off + ms[last].size - start
		}
		var err error
		if r, err = s.open(ctx, x.etag, x.size, start, n); err != nil {
			return err
		}
		defer r.close()
	}
	ranged := s.w.getter(x)
	for i, m := range ms {
		if !wanted[i] {
			if err := s.deliver(x, m, false, nil, nil); err != nil {
				return err
			}
			continue
		}
		if err := s.w.tooLarge(x, m, 0); err != nil {
			if err := s.deliver(x, m, true, nil, err); err != nil {
				return err
			}
			continue
		}
		var data []byte
		var err error
		if r != nil && r.err == nil {
			data, err = memberBytes(ctx, r.get, m)
			if r.err != nil && ctx.Err() == nil {
				s.broke(r.at(), r.err)
				r.close()
			}
		}
		if r == nil || r.err != nil {
			data, err = memberBytes(ctx, ranged, m)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			err = fmt.Errorf("archive %s: %w", x.key, err)
		}
		if err := s.deliver(x, m, true, data, err); err != nil {
			return err
		}
	}
	return nil
}

// tar streams a tar archive whose index is not kept: its headers walked
// from the stream (the rules of indexTar), its members handed over as
// they come, and its index built in the same pass and kept.
func (s *streamer) tar(ctx context.Context, lo listedObj) error {
	w := s.w
	r, err := s.open(ctx, lo.etag, lo.size, 0, 0)
	if err != nil {
		return err
	}
	defer r.close()
	x := &index{key: s.arch, etag: lo.etag, size: lo.size, modTime: lo.modTime}
	var first string
	note := func(name, why string) {
		if x.skipped == 0 {
			first = fmt.Sprintf("%q: %s", name, why)
		}
		x.skipped++
	}
	seen := map[string]bool{}
	var out []member
	var broke bool
	next := int64(0) // members at offsets below it were handed over
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.err != nil {
			broke = true
			break
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && h != nil {
			err = nil // cleanPath refuses the name below
		}
		if err != nil {
			if len(out) == 0 && r.at() <= 512 {
				w.bad(x, fmt.Errorf("not a tar archive: %v: %w", err, ErrBadArchive))
				w.indexes.Put(s.arch, x, x.cost())
				return x.err
			}
			note(fmt.Sprintf("(header at %d)", r.at()), fmt.Sprintf("truncated or corrupt: %v", err))
			break
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
			continue
		}
		off := r.at()
		if h.Size < 0 || off > lo.size || h.Size > lo.size-off { // off+h.Size could wrap
			note(h.Name, fmt.Sprintf("%d bytes at %d: past the archive's end (%d)", h.Size, off, lo.size))
			break
		}
		path, why := cleanPath(h.Name)
		if why != "" {
			note(h.Name, why)
			continue
		}
		if len(out) >= MaxMembers {
			w.bad(x, fmt.Errorf("more than %d members: %w", MaxMembers, ErrBadArchive))
			w.indexes.Put(s.arch, x, x.cost())
			return x.err
		}
		m := member{path: path, off: off, size: h.Size, usize: h.Size, repeated: seen[path]}
		out = append(out, m)
		if !s.in(path) {
			continue
		}
		// A path seen before is handed over again, under an ETag that
		// names its offset (index.object): the index keeps the last
		// copy, and the feature of an earlier one is never taken for it.
		seen[path] = true
		wanted := s.want(x.object(&m))
		var data []byte
		var merr error
		if wanted {
			if merr = w.tooLarge(x, &m, 0); merr == nil {
				data = make([]byte, m.size)
				if _, err := io.ReadFull(tr, data); err != nil {
					if r.err != nil || ctx.Err() != nil {
						if ctx.Err() != nil {
							return ctx.Err()
						}
						broke = true
						break
					}
					data, merr = nil, fmt.Errorf("archive %s: member %s: %v: %w", s.arch, path, err, ErrBadArchive)
				}
			}
		}
		next = off + 1
		if err := s.deliver(x, &m, wanted, data, merr); err != nil {
			return err
		}
	}
	if broke {
		// Read what is left with ranged GETs, from the index read so.
		s.broke(r.at(), r.err)
		r.close()
		y, err := w.index(ctx, s.arch)
		if err != nil {
			return err
		}
		if y.err != nil {
			return y.err
		}
		var ms []*member
		for i := range y.members {
			if m := &y.members[i]; m.off >= next && !m.plain && s.in(m.path) {
				ms = append(ms, m)
			}
		}
		slices.SortFunc(ms, func(a, b *member) int { return int(min(max(a.off-b.off, -1), 1)) })
		get := w.getter(y)
		for _, m := range ms {
			wanted := s.want(y.object(m))
			var data []byte
			var err error
			if wanted {
				if err = w.tooLarge(y, m, 0); err == nil {
					data, err = memberBytes(ctx, get, m)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					err = fmt.Errorf("archive %s: %w", y.key, err)
				}
			}
			if err := s.deliver(y, m, wanted, data, err); err != nil {
				return err
			}
		}
		return nil
	}
	w.n.streamBuilds.Add(1)
	w.finish(x, out, first)
	w.indexes.Put(s.arch, x, x.cost())
	if w.store != nil {
		w.putIndex(x)
	}
	return nil
}

// seqReader reads one stream of an archive from offset pos, forwards
// only: get serves ranges at or past the last one's start (a zip member's
// read may reach into the next member's header), from the bytes kept or
// read from the body. A break (the body's error, or its end before end)
// is kept in err.
type seqReader struct {
	body  io.ReadCloser
	pos   int64  // the offset of buf[0]
	buf   []byte // bytes read and not yet passed
	end   int64  // the stream's end offset
	read  int64  // bytes the tar walk consumed past pos (Read)
	err   error  // the stream broke
	bytes interface{ Add(int64) int64 }
}

// at is the offset the tar walk reached (Read's).
func (r *seqReader) at() int64 { return r.pos + r.read }

// close closes the body.
func (r *seqReader) close() {
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
}

// fill reads from the body until buf holds n bytes or the stream ends.
func (r *seqReader) fill(n int64) {
	for int64(len(r.buf)) < n && r.err == nil && r.pos+int64(len(r.buf)) < r.end {
		if r.body == nil {
			r.err = errors.New("stream closed")
			return
		}
		want := min(n-int64(len(r.buf)), r.end-r.pos-int64(len(r.buf)))
		have := len(r.buf)
		r.buf = slices.Grow(r.buf, int(want))[:have+int(want)]
		k, err := io.ReadFull(r.body, r.buf[have:])
		r.buf = r.buf[:have+k]
		r.bytes.Add(int64(k))
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("the stream ended at %d of %d bytes: %w", r.pos+int64(len(r.buf)), r.end, io.ErrUnexpectedEOF)
			}
			r.err = err
		}
	}
}

// get returns n bytes at off (fewer at the stream's end), off at or past
// the last get's start; a getRange over the stream.
func (r *seqReader) get(_ context.Context, off, n int64) ([]byte, error) {
	if off < r.pos {
		return nil, fmt.Errorf("stream at %d: a read at %d goes back", r.pos, off)
	}
	if d := off - r.pos; d <= int64(len(r.buf)) {
		r.buf = r.buf[d:]
	} else {
		skip := d - int64(len(r.buf))
		r.buf = nil
		if r.err == nil && r.body == nil {
			r.err = errors.New("stream closed")
		}
		if r.err == nil {
			k, err := io.CopyN(io.Discard, r.body, skip)
			r.bytes.Add(k)
			if err != nil {
				r.err = fmt.Errorf("the stream ended at %d of %d bytes: %w", r.pos+k, r.end, err)
			}
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	r.pos = off
	r.fill(n)
	if r.err != nil {
		return nil, r.err
	}
	// A copy: what is handed over owns its bytes (an extraction holds
	// them), and buf's array is not kept alive by it.
	return slices.Clone(r.buf[:min(n, int64(len(r.buf)))]), nil
}

// Read is the stream for the tar walk (which reads it only through Read;
// get and Read are not mixed on one seqReader).
func (r *seqReader) Read(p []byte) (int, error) {
	if int64(len(r.buf)) <= r.read {
		r.pos += r.read
		r.buf, r.read = r.buf[:0], 0
		if r.pos >= r.end {
			return 0, io.EOF
		}
		r.fill(min(int64(max(len(p), 64<<10)), 1<<20))
		if len(r.buf) == 0 {
			if r.err != nil {
				return 0, r.err
			}
			return 0, io.EOF
		}
	}
	n := copy(p, r.buf[r.read:])
	r.read += int64(n)
	return n, nil
}
