package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestExtractLongArgv: featurefs extract with a 200 KB command line
// exits 0 and writes every image's features (issue 24: 1000 paths of
// about 37 bytes died with SIGSEGV in CreateOrtEnv). ONNX Runtime's
// telemetry, on by default in its Linux build, matched the whole of
// /proc/self/cmdline against a std::regex whose matcher recurses once per
// byte (about 250 bytes of stack each): past about 33 KB of command line
// it overflowed the 8 MiB stack. What counts is the command line's length,
// not the number of paths, so this test makes it from 56 paths of about
// 3.7 KB each (deep directories of long names), which extract in seconds.
func TestExtractLongArgv(t *testing.T) {
	model := testenv.Model(t, modelName)
	root := t.TempDir()
	deep := root
	for i := range 15 {
		deep = filepath.Join(deep, fmt.Sprintf("%02d%s", i, strings.Repeat("d", 238)))
	}
	var imgs []string
	for i := range 56 {
		p := filepath.Join(deep, []string{"cat", "dog"}[i%2], fmt.Sprintf("img%03d.jpg", i))
		writeJPEG(t, p, 40, 32, i)
		imgs = append(imgs, p)
	}
	argv := 0
	for _, p := range imgs {
		argv += len(p) + 1
	}
	if argv < 200<<10 {
		t.Fatalf("the image paths make %d bytes of command line, want at least 200 KiB", argv)
	}

	out := filepath.Join(root, "out")
	args := append([]string{"extract", "--model", model, "--layer", "layer1", "--device", "cpu", "--batch-size", "1", "--relative-to", deep, "-o", out}, imgs...)
	r := runCLI(t, 5*time.Minute, nil, args...)
	if r.Code != 0 || strings.Contains(r.Stderr, "SIGSEGV") {
		head := r.Stderr[:min(len(r.Stderr), 1500)] // a crash's first lines say where
		t.Fatalf("extract with a %d-byte command line (%d paths): exit %d, want 0; stderr begins:\n%s", argv, len(imgs), r.Code, head)
	}
	for i := range imgs {
		p := filepath.Join(out, []string{"cat", "dog"}[i%2], fmt.Sprintf("img%03d.npy", i))
		if f := readNPY(t, p); fmt.Sprint(f.Shape) != "[64 56 56]" {
			t.Errorf("%s: shape %v, want [64 56 56]", p, f.Shape)
		}
	}
	if !strings.Contains(r.Stderr, fmt.Sprintf("featurefs extract: %d of %d done", len(imgs), len(imgs))) {
		t.Errorf("no summary line for %d images:\n%s", len(imgs), lastBytes(r.Stderr, 2000))
	}

	// The same features as a short command line gives, for two of them.
	ref := filepath.Join(root, "ref")
	if r := runCLI(t, 3*time.Minute, nil, "extract", "--model", model, "--layer", "layer1", "--device", "cpu", "--batch-size", "1",
		"--relative-to", deep, "-o", ref, imgs[0], imgs[1]); r.Code != 0 {
		t.Fatalf("extract of two images: %s", r)
	}
	for _, rel := range []string{"cat/img000.npy", "dog/img001.npy"} {
		a, b := readNPY(t, filepath.Join(out, rel)), readNPY(t, filepath.Join(ref, rel))
		if !bytes.Equal(a.Raw, b.Raw) {
			worst, _ := closeEnough(a.Data, b.Data)
			t.Errorf("%s: differs from a short command line's (largest difference %g)", rel, worst)
		}
	}
}

// TestExtractDirectoriesAndFilesFrom: featurefs extract takes a directory
// (every image under it, recursively, laid out relative to it) and
// --files-from a file or stdin (newline- or NUL-separated), and each
// writes the same files with the same bytes as naming every image as an
// argument; a bad image under a directory is listed at the end, the others
// still written; a directory without images is a warning, no image at all
// exit 2.
func TestExtractDirectoriesAndFilesFrom(t *testing.T) {
	model := testenv.Model(t, modelName)
	work := t.TempDir()
	data := filepath.Join(work, "data")
	rels := []string{"train/cat/a.jpg", "train/cat/b.jpg", "train/dog/a.jpg", "train/dog/deep/er/c.jpg", "val/x.jpg", "val/with space.jpg"}
	var imgs []string
	for i, rel := range rels {
		p := filepath.Join(data, filepath.FromSlash(rel))
		writeJPEG(t, p, 48+4*i, 40, 7*i+1)
		imgs = append(imgs, p)
	}
	// Not images: skipped by a directory walk.
	for _, rel := range []string{"train/notes.txt", "train/cat/a.json"} {
		if err := os.WriteFile(filepath.Join(data, filepath.FromSlash(rel)), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(data, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := []string{"extract", "--model", model, "--layer", "layer1", "--device", "cpu", "--batch-size", "1", "--progress-interval", "100ms"}
	extract := func(stdin string, args ...string) cliResult {
		t.Helper()
		return runWithStdin(t, 3*time.Minute, stdin, append(append([]string{}, base...), args...)...)
	}

	// The reference: every image named as an argument.
	ref := filepath.Join(work, "ref")
	if r := extract("", append([]string{"--relative-to", data, "-o", ref}, imgs...)...); r.Code != 0 {
		t.Fatalf("extract naming every image: %s", r)
	}
	want := npyFiles(t, ref)
	if len(want) != len(rels) {
		t.Fatalf("the reference run wrote %d files, want %d: %v", len(want), len(rels), want)
	}

	// Directories: train and val under data, laid out relative to data.
	outDirs := filepath.Join(work, "out-dirs")
	r := extract("", "-o", outDirs, filepath.Join(data, "train"), filepath.Join(data, "val"))
	if r.Code != 0 {
		t.Fatalf("extract of two directories: %s", r)
	}
	sameFiles(t, "two directories", outDirs, want)
	if !strings.Contains(r.Stderr, fmt.Sprintf("featurefs extract: %d of %d done", len(rels), len(rels))) || !strings.Contains(r.Stderr, fmt.Sprintf("extract: %d/%d ", len(rels), len(rels))) {
		t.Errorf("two directories: no progress line and summary for %d images:\n%s", len(rels), r.Stderr)
	}
	// One directory: its images relative to it.
	outOne := filepath.Join(work, "out-one")
	if r := extract("", "-o", outOne, filepath.Join(data, "train")); r.Code != 0 {
		t.Fatalf("extract of one directory: %s", r)
	}
	for _, rel := range []string{"cat/a.npy", "cat/b.npy", "dog/a.npy", "dog/deep/er/c.npy"} {
		a, b := readNPY(t, filepath.Join(outOne, rel)), readNPY(t, filepath.Join(ref, "train", rel))
		if !bytes.Equal(a.Raw, b.Raw) {
			t.Errorf("one directory: %s differs from the reference", rel)
		}
	}

	// --files-from a file, relative paths from the working directory, one
	// of them a directory.
	list := filepath.Join(work, "list.txt")
	lines := "train/cat/a.jpg\ntrain/cat/b.jpg\r\n\ntrain/dog\n" + filepath.Join(data, "val", "x.jpg") + "\nval/with space.jpg\n"
	if err := os.WriteFile(list, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	outList := filepath.Join(work, "out-list")
	r = runWithStdinIn(t, data, 3*time.Minute, "", append(append([]string{}, base...), "--files-from", list, "--relative-to", data, "-o", outList)...)
	if r.Code != 0 {
		t.Fatalf("extract --files-from FILE: %s", r)
	}
	sameFiles(t, "--files-from FILE", outList, want)

	// --files-from - with NUL-separated absolute paths on stdin.
	outStdin := filepath.Join(work, "out-stdin")
	if r := extract(strings.Join(imgs, "\x00")+"\x00", "--files-from", "-", "--null", "--relative-to", data, "-o", outStdin); r.Code != 0 {
		t.Fatalf("extract --files-from - --null: %s", r)
	}
	sameFiles(t, "--files-from - --null", outStdin, want)
	// Newline-separated on stdin, plus an argument.
	outMixed := filepath.Join(work, "out-mixed")
	if r := extract(strings.Join(imgs[1:], "\n"), "--files-from", "-", "-o", outMixed, imgs[0]); r.Code != 0 {
		t.Fatalf("extract IMAGE --files-from -: %s", r)
	}
	sameFiles(t, "IMAGE --files-from -", outMixed, want)

	// A bad image under a directory: listed once at the end, exit 1, the
	// others written.
	bad := filepath.Join(data, "val", "bad.jpg")
	if err := os.WriteFile(bad, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	outBad := filepath.Join(work, "out-bad")
	r = extract("", "-o", outBad, filepath.Join(data, "val"))
	if r.Code != 1 || !strings.Contains(r.Stderr, "failed objects (1):\n  "+bad+": ") || strings.Count(r.Stderr, "bad.jpg") != 1 ||
		!strings.Contains(r.Stderr, "featurefs extract: 2 of 3 done") {
		t.Errorf("a bad image under a directory: want exit 1, it listed once, 2 of 3 done:\n%s", r)
	}
	for _, rel := range []string{"x.npy", "with space.npy"} {
		if _, err := os.Stat(filepath.Join(outBad, rel)); err != nil {
			t.Errorf("a bad image under a directory: the good %s: %v", rel, err)
		}
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}

	// A directory without images: a warning; nothing at all: exit 2.
	r = extract("", "-o", filepath.Join(work, "out-empty"), filepath.Join(data, "empty"), filepath.Join(data, "val", "x.jpg"))
	if r.Code != 0 || !strings.Contains(r.Stderr, "warning: "+filepath.Join(data, "empty")+" holds no image") {
		t.Errorf("an empty directory beside an image: want exit 0 and a warning:\n%s", r)
	}
	r = extract("", "-o", filepath.Join(work, "out-none"), filepath.Join(data, "empty"))
	if r.Code != 2 || !strings.Contains(r.Stderr, "no image to extract") {
		t.Errorf("only an empty directory: want exit 2, no image to extract:\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(work, "out-none")); err == nil {
		t.Errorf("a refused extract created its -o directory")
	}
	r = extract("", "--files-from", filepath.Join(work, "missing.txt"), "-o", filepath.Join(work, "out-nolist"))
	if r.Code != 2 || !strings.Contains(r.Stderr, "--files-from") {
		t.Errorf("a missing --files-from file: want exit 2 naming it:\n%s", r)
	}
}

// runWithStdin is runCLI with stdin as the command's standard input.
func runWithStdin(t testing.TB, timeout time.Duration, stdin string, args ...string) cliResult {
	t.Helper()
	return runWithStdinIn(t, "", timeout, stdin, args...)
}

// runWithStdinIn is runWithStdin in working directory dir ("": this
// process's).
func runWithStdinIn(t testing.TB, dir string, timeout time.Duration, stdin string, args ...string) cliResult {
	t.Helper()
	return runCLIWith(t, timeout, cliRun{dir: dir, stdin: stdin}, args...)
}

// npyFiles lists the files under dir, by slash-separated relative path.
func npyFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// sameFiles checks that dir holds exactly the files want (relative
// paths), each byte-equal to the reference run's under work/ref.
func sameFiles(t testing.TB, what, dir string, want []string) {
	t.Helper()
	got := npyFiles(t, dir)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s wrote %q, want %q", what, got, want)
		return
	}
	ref := filepath.Join(filepath.Dir(dir), "ref")
	for _, rel := range want {
		a, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(ref, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %s differs from the one extracted by naming every image", what, rel)
		}
	}
}

// TestExtractBadInputsFailAlone: extract reads regular files only, each
// at most --max-object-size; everything else fails alone with one line
// and the rest is written (issue 36 items 9 and 13). Among the
// --files-from entries: a .jpg link to /dev/zero (at ca82ffd read
// without limit), a FIFO without a writer (at ca82ffd: hung forever), a
// file over --max-object-size and a 100 KB line (at ca82ffd `bufio.Scanner:
// token too long`, exit 1 and nothing extracted); a directory argument
// holding a FIFO and a link to /dev/zero named .jpg. Exit 1, the good
// images written, each bad one listed.
func TestExtractBadInputsFailAlone(t *testing.T) {
	model := testenv.Model(t, modelName)
	work := t.TempDir()
	data := filepath.Join(work, "data")
	good := []string{filepath.Join(data, "a.jpg"), filepath.Join(data, "b.jpg"), filepath.Join(data, "d", "c.jpg")}
	for i, p := range good {
		writeJPEG(t, p, 48, 40, 5*i+1)
	}
	big := filepath.Join(data, "big.jpg")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(data, "fifo.jpg")
	dfifo := filepath.Join(data, "d", "fifo.jpg")
	zero := filepath.Join(data, "zero.jpg")
	dzero := filepath.Join(data, "d", "zero.jpg")
	for _, p := range []string{fifo, dfifo} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{zero, dzero} {
		if err := os.Symlink("/dev/zero", p); err != nil {
			t.Fatal(err)
		}
	}
	list := strings.Join([]string{good[0], zero, fifo, big, strings.Repeat("x", 100<<10), good[1]}, "\n") + "\n"
	out := filepath.Join(work, "out")
	r := runWithStdin(t, 2*time.Minute, list, "extract", "--model", model, "--layer", "layer1", "--device", "cpu",
		"--max-object-size", "1MiB", "--relative-to", data, "--files-from", "-", "-o", out, filepath.Join(data, "d"))
	t.Logf("%s", r)
	if r.Code != 1 {
		t.Errorf("exit %d, want 1 (some inputs failed)", r.Code)
	}
	if got := strings.Join(npyFiles(t, out), " "); got != "a.npy b.npy d/c.npy" {
		t.Errorf("wrote %q, want a.npy b.npy d/c.npy", got)
	}
	for _, w := range []string{
		"featurefs extract: 3 of 9 done",
		"--files-from stdin line 5: entry over 65536 bytes",
		zero + ": ", dzero + ": ",
		fifo + ": ", dfifo + ": ", "not a regular file (a FIFO)", "not a regular file (a character device)",
		big + ": ", "over 1048576 bytes: file too large (--max-object-size)",
	} {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
}
