package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The resume of warm --predictions keeps only lines with a key and top
// classes: an error line, a line with a key and neither top nor error
// (issue 36 item 11: at ca82ffd taken as done, so that image was never
// predicted), a line over the cap starting like an object (damaged) and
// a last line cut short are dropped from the file and predicted again.
func TestResumePredictionsKeepsOnlyPredictions(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	good := `{"key": "a.jpg", "top": [[3, "cat", 0.9]]}`
	good2 := `{"key": "d.jpg", "top": [[1, null, 0.5]]}`
	long := `{"key": "big.jpg", "top": [[1, "` + strings.Repeat("x", 3<<20) + `", 0.5]]}`
	content := strings.Join([]string{
		good,
		`{"key": "b.jpg", "error": "bad image"}`,
		`{"key": "c.jpg"}`,
		`{"key": "e.jpg", "top": []}`,
		long,
		good2,
		`{"key": "f.jpg", "top": [[2,`,
	}, "\n")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	done, err := resumePredictions(context.Background(), p, resumeMaxLine(5))
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 {
		t.Errorf("done %v, want a.jpg and d.jpg only", done)
	}
	for _, k := range []string{"a.jpg", "d.jpg"} {
		if _, ok := done[k]; !ok {
			t.Errorf("%s not done", k)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := good + "\n" + good2 + "\n"; string(b) != want {
		t.Errorf("rewritten file %q, want %q", b, want)
	}
	if _, err := os.Stat(p + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.tmp left behind: %v", p, err)
	}
}

// A file that is not a predictions file (a line over the cap that does
// not start like a JSON object, a line that is not JSON) is refused and
// left as it is; one that is not a regular file is refused before it is
// read: /dev/zero (at ca82ffd read whole: RSS to OOM), a symbolic link
// to it, a FIFO without a writer (at ca82ffd: blocked forever), a
// directory.
func TestResumePredictionsRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	zeros := filepath.Join(dir, "zeros")
	if err := os.WriteFile(zeros, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "text")
	if err := os.WriteFile(text, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{zeros, "line 1 is over"},
		{text, "line 1 is not a prediction"},
		{"/dev/zero", "not a regular file (a character device)"},
		{link, "not a regular file (a character device)"},
		{fifo, "not a regular file (a FIFO)"},
		{dir, "not a regular file (a directory)"},
	} {
		res := make(chan error, 1)
		go func() { _, err := resumePredictions(context.Background(), tc.path, resumeMaxLine(5)); res <- err }()
		select {
		case err := <-res:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error containing %q", tc.path, err, tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still reading after 20 s", tc.path)
		}
	}
	if st, err := os.Stat(zeros); err != nil || st.Size() != 3<<20 {
		t.Errorf("the refused file changed: %v %v", st.Size(), err)
	}
}

// The resume reads a huge line in bounded memory (a 1 GiB sparse file,
// one line that starts like an object and never ends: damaged, dropped),
// and a cancelled context stops it at once.
func TestResumePredictionsBoundedMemory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"key": "`)
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done, err := resumePredictions(context.Background(), p, resumeMaxLine(5))
	runtime.ReadMemStats(&after)
	if err != nil || len(done) != 0 {
		t.Fatalf("done %v, err %v; want nothing done, no error", done, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("allocated %d MiB reading a 1 GiB line, want at most 16 MiB (the cap is %d bytes)", alloc>>20, resumeMaxLine(5))
	}
	if st, err := os.Stat(p); err != nil || st.Size() != 0 {
		t.Errorf("the damaged line was not dropped: size %d, %v", st.Size(), err)
	}

	f, _ = os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteString(`{"key": "`)
	f.Truncate(1 << 30)
	f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := resumePredictions(ctx, p, resumeMaxLine(5)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled resume took %v", d)
	}
}

// extract --files-from: an entry over maxListLine fails alone, named by
// its line number, and the entries after it are read (issue 36 item 13:
// at ca82ffd `bufio.Scanner: token too long` stopped the whole list);
// with --null too.
func TestFilesFromLongEntryFailsAlone(t *testing.T) {
	long := strings.Repeat("y", 100<<10)
	for _, null := range []bool{false, true} {
		sep := "\n"
		if null {
			sep = "\x00"
		}
		list := "a.jpg" + sep + long + sep + "b.jpg" + sep + long + "c.jpg" + sep + "d.jpg"
		var got []string
		bad, n, err := readList(context.Background(), strings.NewReader(list), "list", null, func(p string) error { got = append(got, p); return nil })
		if err != nil {
			t.Fatalf("null %v: %v", null, err)
		}
		if strings.Join(got, " ") != "a.jpg b.jpg d.jpg" {
			t.Errorf("null %v: entries %q, want a.jpg b.jpg d.jpg", null, got)
		}
		if n != 2 || len(bad) != 2 || bad[0].key != "--files-from list line 2" || bad[1].key != "--files-from list line 4" ||
			!strings.Contains(bad[0].reason, "over 65536 bytes") {
			t.Errorf("null %v: bad %d %+v, want lines 2 and 4 over 65536 bytes", null, n, bad)
		}
	}
}

// extract reads an image only if it is a regular file of at most
// --max-object-size (issue 36 item 9: at ca82ffd /dev/zero, or a link to
// it, grew without limit, and a FIFO hung): a device, a FIFO (without
// blocking), a directory or a larger file fail alone.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "a.jpg")
	if err := os.WriteFile(img, []byte("12345678"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "f.jpg")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "z.jpg")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	if b, err := readRegular(img, 8); err != nil || string(b) != "12345678" {
		t.Errorf("regular file: %q, %v", b, err)
	}
	for _, tc := range []struct {
		path string
		max  int64
		want string
	}{
		{img, 7, "8 bytes, over 7 bytes: file too large (--max-object-size)"},
		{"/dev/zero", 1 << 20, "not a regular file (a character device)"},
		{link, 1 << 20, "not a regular file (a character device)"},
		{fifo, 1 << 20, "not a regular file (a FIFO)"},
		{dir, 1 << 20, "not a regular file (a directory)"},
	} {
		res := make(chan error, 1)
		go func() { _, err := readRegular(tc.path, tc.max); res <- err }()
		select {
		case err := <-res:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still reading after 20 s", tc.path)
		}
	}
	// The list itself may be a FIFO (find ... > fifo); not a device.
	if _, err := openList("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("--files-from /dev/zero: %v", err)
	}
}

// FuzzResumeLines: the resume's line reader and line check never panic
// on any bytes, never return a line over the cap, and keep only lines
// with a key and top classes.
func FuzzResumeLines(f *testing.F) {
	for _, s := range []string{
		`{"key": "a", "top": [[1, "x", 0.5]]}` + "\n",
		`{"key": "b", "error": "e"}` + "\n" + `{"key": "c"}` + "\n",
		`{"key": "d", "top": [[]]}` + "\n{\"key\"",
		"\x00\x00\x00", "{" + strings.Repeat("z", 300) + "\n{}\n", "\n\n", `{"key": "e", "top": [["x"]]}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 64
		lr := newLineReader(context.Background(), bytes.NewReader(b), '\n', max)
		for {
			line, kind, err := lr.next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(line) > max || (kind == lineTooLong && len(line) > headLen) {
				t.Fatalf("line of %d bytes (kind %d) past the cap %d", len(line), kind, max)
			}
			key, keep, err := resumeLine(line, kind, lr.line(), max)
			if keep && (err != nil || key == "" || kind != lineWhole) {
				t.Fatalf("kept %q (kind %d, key %q, err %v)", line, kind, key, err)
			}
		}
	})
}

// FuzzFilesFrom: reading a --files-from list never panics on any bytes,
// with newlines or NULs; every entry handed on is at most maxListLine
// bytes and not empty, and every entry over it is counted.
func FuzzFilesFrom(f *testing.F) {
	for _, s := range []string{"a.jpg\nb.jpg\r\n\n", "a\x00b\x00\x00", strings.Repeat("x", maxListLine+1) + "\nc.jpg", "\xff\xfe\n\x00", ""} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, null bool) {
		var n int
		bad, badN, err := readList(context.Background(), bytes.NewReader(b), "fuzz", null, func(p string) error {
			if p == "" || len(p) > maxListLine {
				t.Fatalf("entry of %d bytes handed on", len(p))
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(bad)) != badN || n+int(badN) > len(b)+1 {
			t.Fatalf("%d entries, %d bad (%d listed) from %d bytes", n, badN, len(bad), len(b))
		}
	})
}

// TestInterruptStopsAStuckCommand: after SIGTERM, a command that does
// not stop by itself (here: blocked, not looking at its context; at
// ca82ffd extract blocked on a FIFO entry was still running 10 minutes
// after SIGTERM) exits within interruptGrace with exit 1 and one line;
// its context was cancelled at once.
func TestInterruptStopsAStuckCommand(t *testing.T) {
	if os.Getenv("FEATUREFS_TEST_STUCK") == "1" {
		ctx, stop := interruptContext("stuck")
		defer stop()
		os.Stdout.WriteString("ready\n")
		<-ctx.Done()
		os.Stdout.WriteString("cancelled\n")
		select {} // stuck: never returns by itself
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestInterruptStopsAStuckCommand$")
	cmd.Env = append(os.Environ(), "FEATUREFS_TEST_STUCK=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	if l, err := br.ReadString('\n'); err != nil || l != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("helper: %q, %v", l, err)
	}
	sent := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { io.Copy(io.Discard, br); exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		took := time.Since(sent)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitOther || strings.Count(stderr.String(), "\n") != 1 ||
			!strings.Contains(stderr.String(), "featurefs stuck: interrupted") {
			t.Errorf("exit %v, stderr %q; want exit %d and one line", err, stderr.String(), exitOther)
		}
		if took > 5*time.Second { // interruptGrace, with room for a loaded machine
			t.Errorf("exited %v after SIGTERM, want about %v", took, interruptGrace)
		}
		t.Logf("exited %v after SIGTERM", took.Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("still running 30 s after SIGTERM")
	}
}
