package api

import (
	"errors"
	"fmt"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
)

// Each error is defined once: the unknown layer is the split planner's,
// and "closed" is spec's, which the extractor's own closed error wraps
// with its message kept.
func TestErrorsDefinedOnce(t *testing.T) {
	if ErrUnknownLayer != split.ErrUnknownLayer || ErrUnknownLayer.Error() != "unknown layer" {
		t.Errorf("ErrUnknownLayer = %v, want split.ErrUnknownLayer", ErrUnknownLayer)
	}
	wrapped := fmt.Errorf("choose: %w", split.ErrUnknownLayer)
	if !errors.Is(wrapped, ErrUnknownLayer) {
		t.Errorf("the planner's unknown layer does not match ErrUnknownLayer")
	}
	if !errors.Is(ErrClosed, spec.ErrClosed) || ErrClosed.Error() != "extractor: service closed" {
		t.Errorf("ErrClosed = %q, want \"extractor: service closed\" matching spec.ErrClosed", ErrClosed)
	}
	if errors.Is(spec.ErrClosed, ErrClosed) {
		t.Errorf("spec.ErrClosed (a closed owner's, a closed cache's) matches the extractor's ErrClosed")
	}
}
