package test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestWritesFailWithEROFS tries every kind of modification on files and
// directories of the mount (a feature file, a layer directory, a prefix
// directory, the layers file, the stats file and the root): each fails
// with EROFS and leaves the file as it was.
func TestWritesFailWithEROFS(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "1", "--val", "0")
	srv, env := minioBucket(t, "readonly", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://readonly", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})
	dir := filepath.Join(m.Layer(testLayer), "train", d.Classes[0])
	file := filepath.Join(dir, "img0000.npy")
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	files := []string{file, m.Path("features", modelName, "layers"), m.Path(".featurefs", "stats")}
	dirs := []string{dir, m.Layer(testLayer), m.Path("features", modelName), m.Path("features"), m.Dir}
	type op struct {
		name string
		do   func() error
	}
	var ops []op
	for _, f := range files {
		ops = append(ops,
			op{"open O_WRONLY " + f, func() error { return openClose(f, os.O_WRONLY) }},
			op{"open O_RDWR " + f, func() error { return openClose(f, os.O_RDWR) }},
			op{"open O_TRUNC " + f, func() error { return openClose(f, os.O_WRONLY|os.O_TRUNC) }},
			op{"open O_APPEND " + f, func() error { return openClose(f, os.O_WRONLY|os.O_APPEND) }},
			op{"truncate " + f, func() error { return os.Truncate(f, 0) }},
			op{"chmod " + f, func() error { return os.Chmod(f, 0o666) }},
			op{"chown " + f, func() error { return os.Chown(f, 1, 1) }},
			op{"utimes " + f, func() error { return os.Chtimes(f, time.Unix(0, 0), time.Unix(0, 0)) }},
			op{"unlink " + f, func() error { return syscall.Unlink(f) }},
			op{"rename " + f, func() error { return os.Rename(f, f+".moved") }},
			op{"rename onto " + f, func() error {
				src := files[0]
				if f == src {
					src = files[1]
				}
				return os.Rename(src, f)
			}},
			op{"link " + f, func() error { return os.Link(f, f+".link") }},
			op{"setxattr " + f, func() error { return syscall.Setxattr(f, "user.x", []byte("1"), 0) }},
		)
	}
	for _, dd := range dirs {
		ops = append(ops,
			op{"create in " + dd, func() error { return openClose(filepath.Join(dd, "new.npy"), os.O_CREATE|os.O_WRONLY) }},
			op{"create excl in " + dd, func() error {
				return openClose(filepath.Join(dd, "x"), os.O_CREATE|os.O_EXCL|os.O_RDWR)
			}},
			op{"mkdir in " + dd, func() error { return os.Mkdir(filepath.Join(dd, "newdir"), 0o755) }},
			op{"symlink in " + dd, func() error { return os.Symlink("/etc/passwd", filepath.Join(dd, "sym")) }},
			op{"mknod in " + dd, func() error { return syscall.Mknod(filepath.Join(dd, "fifo"), syscall.S_IFIFO|0o644, 0) }},
			op{"chmod " + dd, func() error { return os.Chmod(dd, 0o777) }},
			op{"utimes " + dd, func() error { return os.Chtimes(dd, time.Unix(0, 0), time.Unix(0, 0)) }},
		)
		if dd != m.Dir {
			ops = append(ops,
				op{"rmdir " + dd, func() error { return syscall.Rmdir(dd) }},
				op{"rename " + dd, func() error { return os.Rename(dd, dd+"2") }},
			)
		}
	}
	// Moving a file out of the mount is a delete of the mount's file; the
	// kernel answers EXDEV for cross-device renames before asking featurefs,
	// so it is not listed here.
	for _, o := range ops {
		err := o.do()
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", o.name, err)
		}
	}

	after, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("%s changed after the write attempts (err %v)", file, err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("stat after write attempts: %v, %v", fi, err)
	}
	for _, p := range []string{filepath.Join(dir, "new.npy"), filepath.Join(dir, "newdir"), file + ".moved"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refused write: %v", p, err)
		}
	}
}

// openClose opens p with flag and closes it.
func openClose(p string, flag int) error {
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
