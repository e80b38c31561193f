// Package safefile creates the files featurefs writes without following a
// symbolic link planted at their path (issue 36, item 3): a replaced file
// (predictions, extract outputs, profiles, a local feature store's objects)
// is written to a temporary file made with O_EXCL in its directory and
// renamed into place, which replaces a link instead of writing through it;
// an appended file (a log, the cache's lock file) is opened with O_NOFOLLOW
// and must be a regular file. An existing path that is a symbolic link is
// refused with ErrSymlink, which names the path.
package safefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrSymlink is the error for a path that is a symbolic link.
var ErrSymlink = errors.New("is a symbolic link; featurefs does not write through symbolic links: remove it or name another file")

// ErrNotRegular is the error for a path that is not a regular file (a
// FIFO, a device, a directory).
var ErrNotRegular = errors.New("is not a regular file")

// pathErr is err for path as one line: "PATH is a symbolic link; ...".
type pathErr struct {
	path string
	err  error
}

func (e *pathErr) Error() string { return e.path + " " + e.err.Error() }
func (e *pathErr) Unwrap() error { return e.err }

// RefuseSymlink returns an error matching ErrSymlink when path is a
// symbolic link, and nil when it is anything else or does not exist.
func RefuseSymlink(path string) error {
	fi, err := os.Lstat(path)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return &pathErr{path, ErrSymlink}
	}
	return nil
}

// refuseIn is RefuseSymlink for name in root.
func refuseIn(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return &pathErr{name, ErrSymlink}
	}
	return nil
}

// OpenAppend opens path for appending, creating it with perm when it does
// not exist. It does not follow a symbolic link at path (ErrSymlink) and
// refuses anything but a regular file (ErrNotRegular), without blocking on
// a FIFO.
func OpenAppend(path string, perm fs.FileMode) (*os.File, error) {
	return openNoFollow(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
}

// OpenLock opens path read-write, creating it with perm when it does not
// exist, under the same rules as OpenAppend: for a lock file that is kept
// between holders.
func OpenLock(path string, perm fs.FileMode) (*os.File, error) {
	return openNoFollow(path, os.O_RDWR|os.O_CREATE, perm)
}

func openNoFollow(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &pathErr{path, ErrSymlink}
		}
		if errors.Is(err, syscall.ENXIO) { // a FIFO without a reader
			return nil, &pathErr{path, ErrNotRegular}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &pathErr{path, ErrNotRegular}
	}
	return f, nil
}

// File is a file being written to a temporary name in its target's
// directory; Commit renames it into place, Abort removes it.
type File struct {
	*os.File
	path string
	perm fs.FileMode
	done bool
}

// Create starts writing path through a temporary file in its directory
// (os.CreateTemp: O_EXCL, so never a link). A symbolic link at path is
// refused now; one planted later is replaced by Commit's rename, not
// written through.
func Create(path string, perm fs.FileMode) (*File, error) {
	if err := RefuseSymlink(path); err != nil {
		return nil, err
	}
	// The temporary name's length is fixed (".tmp-" and CreateTemp's
	// random digits), so it fits NAME_MAX whenever path's name does.
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return nil, err
	}
	return &File{File: f, path: path, perm: perm}, nil
}

// Commit closes the file and renames it to its path.
func (f *File) Commit() error {
	if f.done {
		return nil
	}
	f.done = true
	err := f.File.Chmod(f.perm)
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.File.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.File.Name())
	}
	return err
}

// Abort closes and removes the temporary file; after Commit it does
// nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.File.Name())
}

// WriteFile writes data to path through a temporary file in its directory
// and a rename (see Create); a symbolic link at path is refused.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// tmpName returns a temporary name in dir: ".tmp-" and 16 random hex
// digits, a fixed length, so that it fits NAME_MAX whenever the name it
// stands for does (a name of the target's with a suffix did not past
// about 229 bytes: ENAMETOOLONG).
func tmpName(dir string) string {
	var r [8]byte
	rand.Read(r[:])
	return filepath.Join(dir, ".tmp-"+hex.EncodeToString(r[:]))
}

// WriteFileIn is WriteFile for name inside root: nothing outside root is
// written whatever links its directories hold (os.Root), and a symbolic
// link at name itself is refused. The temporary file is created 0600
// (O_EXCL|O_NOFOLLOW) and given perm before its rename.
func WriteFileIn(root *os.Root, name string, data []byte, perm fs.FileMode) error {
	if err := refuseIn(root, name); err != nil {
		return err
	}
	dir := filepath.Dir(name)
	var tmp string
	var f *os.File
	for i := 0; ; i++ {
		tmp = tmpName(dir)
		var err error
		f, err = root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
