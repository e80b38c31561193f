package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// lineReader reads delimited lines (entries of a file list, lines of a
// predictions file) of at most max bytes each: a longer line is read to
// its end and thrown away, so memory stays max whatever the input (a
// file of zeros, /dev/zero through a symbolic link, a list without a
// newline), and ctx is checked every max bytes, so an interrupt stops a
// long read.
type lineReader struct {
	ctx   context.Context
	br    *bufio.Reader
	delim byte
	n     int // lines returned, for line numbers
}

// lineKind says what next returned.
type lineKind int

const (
	lineWhole   lineKind = iota // a line ended by the delimiter
	lineLast                    // a last line without its delimiter (a write cut short)
	lineTooLong                 // longer than the cap: thrown away; head holds its first bytes
)

// newLineReader reads lines ended by delim from r, max bytes each at most.
func newLineReader(ctx context.Context, r io.Reader, delim byte, max int) *lineReader {
	return &lineReader{ctx: ctx, br: bufio.NewReaderSize(r, max), delim: delim}
}

// next returns the next line without its delimiter and its kind (for
// lineTooLong, the line's first bytes, up to headLen, copied), and
// io.EOF after the last. The line is valid until the next call.
func (lr *lineReader) next() (line []byte, kind lineKind, err error) {
	if err := lr.ctx.Err(); err != nil {
		return nil, 0, err
	}
	line, err = lr.br.ReadSlice(lr.delim)
	switch {
	case err == nil:
		lr.n++
		return line[:len(line)-1], lineWhole, nil
	case errors.Is(err, bufio.ErrBufferFull):
		lr.n++
		head := append([]byte(nil), line[:min(len(line), headLen)]...)
		for {
			if err := lr.ctx.Err(); err != nil {
				return nil, 0, err
			}
			_, err := lr.br.ReadSlice(lr.delim)
			switch {
			case err == nil || errors.Is(err, io.EOF):
				return head, lineTooLong, nil
			case !errors.Is(err, bufio.ErrBufferFull):
				return nil, 0, err
			}
		}
	case errors.Is(err, io.EOF) && len(line) > 0:
		lr.n++
		return line, lineLast, nil
	}
	return nil, 0, err
}

// headLen is how much of a line over the cap next keeps, to tell what it
// looks like.
const headLen = 64

// line is the number of the line next returned last, from 1.
func (lr *lineReader) line() int { return lr.n }

// errNotRegular is the error of an input that is not a regular file
// (a device, FIFO, socket or directory), refused before it is read.
var errNotRegular = errors.New("not a regular file")

// openRegular opens path for reading if it is a regular file (following
// symbolic links), and refuses anything else (errNotRegular, saying what
// it is; the caller names the path) without blocking: a FIFO
// is opened non-blocking (no writer needed) and checked with fstat, so it
// neither hangs nor is read; a device or socket is refused the same way.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w (%s)", errNotRegular, fileKind(fi.Mode()))
	}
	return f, fi, nil
}

// fileKind names a file type for a message.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file"
}

// readRegular reads the regular file path whole, refusing anything else
// (openRegular) and a file over max bytes: at most max+1 bytes are read
// whatever the file says its size is (it may grow while read).
func readRegular(path string, max int64) ([]byte, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, fmt.Errorf("%d bytes, over --max-object-size %d", fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("over --max-object-size %d bytes (it grew while read)", max)
	}
	return b, nil
}

// openList opens a list of inputs (--files-from): a regular file, or a
// FIFO or pipe (find ... > fifo, <(find ...)), whose open waits for its
// writer as usual; a directory or a device (whose bytes never end) is
// refused.
func openList(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() && fi.Mode()&os.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("%s: %w (%s)", path, errNotRegular, fileKind(fi.Mode()))
	}
	return os.Open(path)
}
