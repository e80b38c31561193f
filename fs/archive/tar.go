package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
)

// BlockSize is how much the first ranged GET of a tar header walk reads,
// and the next after a seek: the headers of members smaller than it come
// in one request, and a member larger is skipped with a seek (at most
// BlockSize read for it). Each GET that follows the last one's end reads
// twice as much, up to MaxBlockSize: a tar of small members is read in
// few requests.
const BlockSize = 1 << 20

// MaxBlockSize bounds one GET of a header walk (and the memory of one
// index read).
const MaxBlockSize = 16 << 20

// rangeReader reads an archive version through ranged GETs of BlockSize,
// keeping the last block (an io.ReadSeeker for archive/tar, which then
// seeks over member data instead of reading it).
type rangeReader struct {
	ctx  context.Context
	get  getRange
	size int64
	pos  int64
	buf  []byte
	at   int64 // buf's offset
	next int64 // the next GET's size
	gets int
	err  error // the last GET's error: the store's, not the archive's
}

// getRange reads n bytes of the archive version from off.
type getRange func(ctx context.Context, off, n int64) ([]byte, error)

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.pos < r.at || r.pos >= r.at+int64(len(r.buf)) {
		switch {
		case r.buf != nil && r.pos >= r.at+int64(len(r.buf)) && r.pos < r.at+int64(len(r.buf))+r.next:
			r.next = min(2*r.next, MaxBlockSize) // reading on past small members: larger GETs
		default:
			r.next = BlockSize
		}
		b, err := r.get(r.ctx, r.pos, min(r.next, r.size-r.pos))
		r.gets++
		if err != nil {
			r.err = err
			return 0, err
		}
		if len(b) == 0 {
			return 0, io.ErrUnexpectedEOF
		}
		r.buf, r.at = b, r.pos
	}
	n := copy(p, r.buf[r.pos-r.at:])
	r.pos += int64(n)
	return n, nil
}

func (r *rangeReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += r.pos
	case io.SeekEnd:
		off += r.size
	}
	if off < 0 {
		return 0, errors.New("archive: seek before the start")
	}
	r.pos = off
	return off, nil
}

// indexTar walks the headers of a tar archive of size bytes. A header
// that cannot be read ends the walk: the members before it are kept (a
// truncated archive keeps what it holds whole). It returns the members
// (unsorted), the members left out with the first reason, and the number
// of GETs.
func indexTar(ctx context.Context, get getRange, size int64, note func(name, why string)) ([]member, int, error) {
	r := &rangeReader{ctx: ctx, get: get, size: size}
	tr := tar.NewReader(r)
	var out []member
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && h != nil {
			err = nil // cleanPath refuses the name below
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, r.gets, ctx.Err()
			}
			if r.err != nil {
				return nil, r.gets, r.err
			}
			if len(out) == 0 && r.pos <= 512 {
				return nil, r.gets, fmt.Errorf("not a tar archive: %v: %w", err, ErrBadArchive)
			}
			note(fmt.Sprintf("(header at %d)", r.pos), fmt.Sprintf("truncated or corrupt: %v", err))
			break
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
			continue // directories, links, devices: not members
		}
		off := r.pos
		if h.Size < 0 || off > size || h.Size > size-off { // off+h.Size could wrap
			note(h.Name, fmt.Sprintf("%d bytes at %d: past the archive's end (%d)", h.Size, off, size))
			break
		}
		path, why := cleanPath(h.Name)
		if why != "" {
			note(h.Name, why)
			continue
		}
		if len(out) >= MaxMembers {
			return nil, r.gets, fmt.Errorf("more than %d members: %w", MaxMembers, ErrBadArchive)
		}
		out = append(out, member{path: path, off: off, size: h.Size, usize: h.Size})
	}
	return out, r.gets, nil
}
