package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/featurefs/featurefs/extractor/spec"
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

// openRegular opens path for reading if it is a regular file
// (spec.OpenIfRegular: a FIFO, device or socket is refused without
// blocking, saying what it is); the error leaves the path to the caller.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, fi, err := spec.OpenIfRegular(path)
	return f, fi, inputError(err)
}

// readRegular reads the regular file path whole, at most max bytes
// (spec.ReadRegular, which reads one snapshot of the size fstat gave); the
// error leaves the path to the caller and names the flag that sets max.
func readRegular(path string, max int64) ([]byte, error) {
	b, err := spec.ReadRegular(path, max)
	if errors.Is(err, spec.ErrFileTooLarge) {
		return nil, fmt.Errorf("%w (--max-object-size)", inputError(err))
	}
	return b, inputError(err)
}

// inputError is err without the path an *os.PathError adds: the messages
// of an input name it once, first.
func inputError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
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
		return nil, fmt.Errorf("%s: %w (%s)", path, spec.ErrNotRegular, spec.FileKind(fi.Mode()))
	}
	return os.Open(path)
}
