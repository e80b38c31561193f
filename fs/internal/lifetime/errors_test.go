package lifetime

import (
	"errors"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// Refused work's error matches the one every "used after Close" error
// matches, keeps its message, and is matched on its own.
func TestErrClosedWrapsSpecs(t *testing.T) {
	if !errors.Is(ErrClosed, spec.ErrClosed) || ErrClosed.Error() != "closed" {
		t.Errorf("ErrClosed = %v, want \"closed\" matching spec.ErrClosed", ErrClosed)
	}
	if errors.Is(spec.ErrClosed, ErrClosed) {
		t.Error("spec.ErrClosed (a closed cache's, a closed extractor's) matches an owner's ErrClosed")
	}
}
