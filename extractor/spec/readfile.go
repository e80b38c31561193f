package spec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular: a file that must be a regular one (a model, a labels
// file, an input image) is a device, FIFO, socket or directory; the error
// says which (FileKind).
var ErrNotRegular = errors.New("not a regular file")

// ErrFileTooLarge: a file is over the size its reader takes.
var ErrFileTooLarge = errors.New("file too large")

// ReadRegular reads the regular file at path whole, with memory bounded by
// max: it is opened without blocking (a FIFO neither hangs the open nor
// is read), refused when fstat says it is not a regular file
// (ErrNotRegular) or over max bytes (ErrFileTooLarge, before any read),
// and read into one buffer of the size fstat gave; a file that grows
// meanwhile is read to that size (one snapshot), one that shrinks to what
// it holds. Its errors are *os.PathError: they name path, and a caller
// that names it itself takes their Err.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, data, err := OpenRegular(path, max)
	if err != nil {
		return nil, err
	}
	f.Close()
	return data, nil
}

// OpenRegular is ReadRegular that also returns the file, open: what a
// caller reads of it later is read from the file it read (the same inode,
// whatever replaces the path since). The caller closes it.
func OpenRegular(path string, max int64) (*os.File, []byte, error) {
	f, fi, err := OpenIfRegular(path)
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() > max {
		f.Close()
		return nil, nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%d bytes, over %d bytes: %w", fi.Size(), max, ErrFileTooLarge)}
	}
	data := make([]byte, fi.Size())
	n, err := io.ReadFull(f, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, nil, err
	}
	return f, data[:n], nil
}

// OpenIfRegular opens path for reading if it is a regular file (following
// symbolic links) and refuses anything else without blocking: a FIFO is
// opened non-blocking (no writer needed) and checked with fstat, so it
// neither hangs nor is read; a device or socket is refused the same way
// (ErrNotRegular, saying what it is, in an *os.PathError).
func OpenIfRegular(path string) (*os.File, os.FileInfo, error) {
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
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, FileKind(fi.Mode()))}
	}
	return f, fi, nil
}

// FileKind names a file type for a message.
func FileKind(m os.FileMode) string {
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
	return "an irregular file"
}
