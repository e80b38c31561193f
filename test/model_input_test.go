package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// writeJPEGs writes n small JPEGs DIR/d/img<i>.jpg, each with its own size
// and colours.
func writeJPEGs(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w, h := 240+7*i, 230
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x*y + 37*i) % 256), 255})
			}
		}
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "d", fmt.Sprintf("img%d.jpg", i)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runFeaturefs runs the featurefs binary, killed after limit, and returns
// its stdout, its stderr and its exit code (-1 when it had to be killed).
func runFeaturefs(t *testing.T, limit time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, featurefsBin(t), args...)
	cmd.Env = append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return stdout.String(), stderr.String(), -1
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("featurefs %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), 0
}

// TestModelsTheTreeCannotFeedAreRefused: a model with two inputs, or with a
// uint8 input, is refused when it is loaded, with one line on stderr that
// says why: exit 4 from mount, serve, warm --source and extract, non-zero
// from layers (issue 16, item 3). Before, such a model passed
// `layers` and `mount`, and every read was then EIO with ONNX Runtime's
// "Missing Input" or a type error.
func TestModelsTheTreeCannotFeedAreRefused(t *testing.T) {
	src := t.TempDir()
	writeJPEGs(t, src, 2)
	for _, tc := range []struct{ model, reason string }{
		{"twoinputs", "the graph has 2 inputs (input [batch,3,224,224], extra [batch,4]); featurefs feeds exactly one"},
		{"uint8", "input input is uint8 [batch,3,224,224]; featurefs feeds a float input [batch,3,224,224]"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			model := testenv.OddModel(t, tc.model)
			spec := "odd=" + model
			work := t.TempDir()
			mnt := filepath.Join(work, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if isMounted(t, mnt) {
					exec.Command("umount", mnt).Run()
				}
			})
			dir := func(name string) string { return filepath.Join(work, name) }
			for _, c := range []struct {
				name string
				args []string
				code int // 0: any non-zero code
			}{
				{"mount", []string{"mount", "--model", spec, "--cache-dir", dir("c1"), "--device", "cpu", "--log-file", dir("mount.log"), src, mnt}, 4},
				{"mount --foreground", []string{"mount", "--foreground", "--model", spec, "--cache-dir", dir("c2"), "--device", "cpu", "--log-file", dir("fg.log"), src, mnt}, 4},
				{"serve", []string{"serve", "--listen", "127.0.0.1:0", "--no-auth", "--model", spec, "--cache-dir", dir("c3"), "--device", "cpu", "--log-level", "error", src}, 4},
				{"warm --source", []string{"warm", "--source", src, "--model", spec, "--layer", "layer0", "--cache-dir", dir("c4"), "--device", "cpu"}, 4},
				{"layers", []string{"layers", model}, 0},
				{"extract", []string{"extract", "--model", model, "--layer", "0", "--device", "cpu", "-o", dir("out"), filepath.Join(src, "d", "img0.jpg")}, 4},
			} {
				stdout, stderr, code := runFeaturefs(t, 2*time.Minute, c.args...)
				switch {
				case code == -1:
					t.Errorf("%s: still running after 2 minutes (it accepted the model)", c.name)
				case code == 0 || (c.code != 0 && code != c.code):
					t.Errorf("%s: exit %d, want %d", c.name, code, c.code)
				}
				if n := strings.Count(stderr, tc.reason); n != 1 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
					t.Errorf("%s: want one line on stderr saying %q, got:\n%s", c.name, tc.reason, stderr)
				}
				if strings.Contains(stdout, tc.reason) {
					t.Errorf("%s: the reason is on stdout too:\n%s", c.name, stdout)
				}
				if isMounted(t, mnt) {
					t.Fatalf("%s: %s is mounted", c.name, mnt)
				}
			}
		})
	}
}
