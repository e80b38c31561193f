package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"lines", "cat\ndog\n", []string{"cat", "dog"}, ""},
		{"crlf and trailing blanks", "cat\r\ndog house\r\n\r\n\n", []string{"cat", "dog house"}, ""},
		{"no final newline", "a\nb", []string{"a", "b"}, ""},
		{"bom", "\xef\xbb\xbfa\nb\n", []string{"a", "b"}, ""},
		{"json", ` ["tench", "goldfish, Carassius auratus"]`, []string{"tench", "goldfish, Carassius auratus"}, ""},
		{"empty", "\n\n", nil, "no class names"},
		{"blank inside", "a\n\nb\n", nil, "line 2 is blank"},
		{"bad json", `["a", 3]`, nil, "not a JSON list"},
		{"empty json", `[]`, nil, "empty"},
		{"empty json name", `["a", " "]`, nil, "class 1 has an empty name"},
	} {
		got, err := ParseLabels([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestReadLabelsNamesTheFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.txt")
	if _, err := ReadLabels(missing); err == nil || !strings.Contains(err.Error(), "nope.txt") {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "l.txt")
	if err := os.WriteFile(p, []byte("a\n\nb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLabels(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad file: %v", err)
	}
}

// A labels file is capped: a name over MaxLabelBytes (a line or a JSON
// string) is refused naming its line, a file over MaxLabelsFileBytes and
// anything but a regular file (a device, a FIFO: without blocking) are
// refused before they are read whole. At ca82ffd 10 names of 5 MB were
// accepted, and each predictions line was padded to 25 MB.
func TestLabelsCapped(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("x", MaxLabelBytes+1)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.txt", "a\n"+strings.Repeat("y", MaxLabelBytes)+"\n")
	if names, err := ReadLabels(ok); err != nil || len(names) != 2 {
		t.Errorf("a name of exactly %d bytes: %q, %v", MaxLabelBytes, names, err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"long line", write("long.txt", "a\nb\n"+long+"\n"), "line 3 is 257 bytes, over 256"},
		{"long json", write("long.json", `["a", "`+long+`"]`), "class 1's name is 257 bytes"},
		{"huge file", write("huge.txt", strings.Repeat("abc\n", MaxLabelsFileBytes/4+1)), "over 16777216 bytes"},
		{"device", "/dev/zero", "not a regular file"},
		{"directory", dir, "not a regular file"},
	} {
		_, err := ReadLabels(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v, want an error naming %s and containing %q", tc.name, err, tc.path, tc.want)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadLabels(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: %v, want not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadLabels of a FIFO without a writer still blocked after 10s")
	}
}

// FuzzLabels: ParseLabels never panics on any bytes, and what it accepts
// holds the caps: at least one name, none blank, none over MaxLabelBytes.
func FuzzLabels(f *testing.F) {
	for _, s := range []string{"cat\ndog\n", "a\r\nb", `["tench", "goldfish"]`, "\xef\xbb\xbfa\n", "[]", "a\n\nb", `["a", 3]`,
		strings.Repeat("x", MaxLabelBytes+1), "\x00\xff\n\xfe", `["\u0000"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := ParseLabels(b)
		if err != nil {
			return
		}
		if len(names) == 0 {
			t.Fatalf("accepted no names from %q", b)
		}
		for i, n := range names {
			if len(n) > MaxLabelBytes || strings.TrimSpace(n) == "" {
				t.Fatalf("accepted class %d name of %d bytes %q", i, len(n), n)
			}
		}
	})
}
