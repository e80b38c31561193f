package spec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular: a file that must be a regular one (a model, a labels
// file) is a device, FIFO, socket or directory.
var ErrNotRegular = errors.New("not a regular file (a device, FIFO, socket or directory)")

// ErrFileTooLarge: a file is over the size its reader takes.
var ErrFileTooLarge = errors.New("file too large")

// ReadRegular reads the regular file at path whole, with memory bounded by
// max: it is opened without blocking (a FIFO neither hangs the open nor
// is read), refused when fstat says it is not a regular file
// (ErrNotRegular) or over max bytes (ErrFileTooLarge, before any read),
// and read into one buffer of the size fstat gave; a file that grows
// meanwhile is read to that size (one snapshot), one that shrinks to what
// it holds. The errors name path.
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
		return nil, nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	if fi.Size() > max {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %d bytes, over %d bytes: %w", path, fi.Size(), max, ErrFileTooLarge)
	}
	data := make([]byte, fi.Size())
	n, err := io.ReadFull(f, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, nil, err
	}
	return f, data[:n], nil
}
