package extractor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// onnxruntime_go loads one library per process: once it runs, the same
// library is fine under any path (a symbolic link here), and another one
// is refused in one line naming both instead of silently running on the
// first.
func TestSecondORTLibraryRefused(t *testing.T) {
	lib := testenv.ORTLib(t)
	if err := initORT(lib); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "libonnxruntime.so.1")
	if err := os.Symlink(lib, link); err != nil {
		t.Fatal(err)
	}
	if err := initORT(link); err != nil {
		t.Errorf("the same library through a link: %v", err)
	}
	other := filepath.Join(dir, "other.so")
	if err := os.WriteFile(other, []byte("not this process's library"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := initORT(other)
	if !errors.Is(err, ErrORTLibrary) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), ortProc.lib) {
		t.Errorf("a second library: %v, want ErrORTLibrary naming %s and %s", err, other, ortProc.lib)
	}
}

// ONNX Runtime's telemetry is turned off before its environment is made,
// whatever ORT_DISABLE_TELEMETRY said: with it on, a command line over
// about 33 KB crashed the environment's creation (ort.go,
// disableORTTelemetry; test/extract_inputs_test.go runs the binary).
func TestORTTelemetryTurnedOff(t *testing.T) {
	for _, v := range []string{"0", "", "1"} {
		t.Setenv(ortTelemetryEnv, v)
		if err := disableORTTelemetry(); err != nil {
			t.Fatal(err)
		}
		if got := os.Getenv(ortTelemetryEnv); got != "1" {
			t.Errorf("%s=%q before: %q after, want 1", ortTelemetryEnv, v, got)
		}
	}
}
