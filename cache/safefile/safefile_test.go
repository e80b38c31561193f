package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// victim makes a file outside the directory a link will point at.
func victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkVictim(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "precious\n" {
		t.Fatalf("victim %s changed: %q, %v", p, b, err)
	}
}

func TestWriteFileRefusesSymlink(t *testing.T) {
	v := victim(t)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.Symlink(v, out); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(out, []byte("x"), 0o644)
	if !errors.Is(err, ErrSymlink) {
		t.Fatalf("WriteFile over a link: %v, want ErrSymlink", err)
	}
	checkVictim(t, v)
	if err := WriteFile(filepath.Join(filepath.Dir(out), "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAppendRefusesSymlinkAndFIFO(t *testing.T) {
	v := victim(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "log")
	if err := os.Symlink(v, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAppend(link, 0o600); !errors.Is(err, ErrSymlink) {
		t.Fatalf("OpenAppend of a link: %v, want ErrSymlink", err)
	}
	checkVictim(t, v)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAppend(fifo, 0o600); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("OpenAppend of a FIFO: %v, want ErrNotRegular", err)
	}
	f, err := OpenAppend(filepath.Join(dir, "real"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestWriteFileInStaysInRoot(t *testing.T) {
	v := victim(t)
	dir := t.TempDir()
	if err := os.Symlink(filepath.Dir(v), filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(v, filepath.Join(dir, "f")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := WriteFileIn(root, "sub/victim", []byte("x"), 0o644); err == nil {
		t.Fatal("WriteFileIn through a linked directory out of the root succeeded")
	}
	if err := WriteFileIn(root, "f", []byte("x"), 0o644); !errors.Is(err, ErrSymlink) {
		t.Fatalf("WriteFileIn over a link: %v, want ErrSymlink", err)
	}
	checkVictim(t, v)
	if err := WriteFileIn(root, "ok", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Fatalf("left %d entries (a temporary file?)", len(ents))
	}
}

// TestLongNames: a file whose name is 255 bytes (NAME_MAX) is written by
// WriteFile, Create and WriteFileIn: the temporary name is of a fixed
// length, not the target's with a suffix (ENAMETOOLONG past about 229
// bytes), and none is left behind.
func TestLongNames(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("n", 251) + ".npy"
	if err := WriteFile(filepath.Join(dir, name), []byte("a"), 0o644); err != nil {
		t.Fatalf("WriteFile of a 255-byte name: %v", err)
	}
	f, err := Create(filepath.Join(dir, "c"+name[1:]), 0o644)
	if err != nil {
		t.Fatalf("Create of a 255-byte name: %v", err)
	}
	f.Write([]byte("b"))
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := WriteFileIn(root, "r"+name[1:], []byte("c"), 0o644); err != nil {
		t.Fatalf("WriteFileIn of a 255-byte name: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Errorf("%d entries, want the 3 files and no temporary one", len(ents))
	}
	for _, e := range ents {
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v %v, want 0644", e.Name(), err, st.Mode())
		}
	}
}
