package cache

import (
	"errors"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
)

// The store's closed error keeps its message and is matched on its own,
// and it is spec.ErrClosed too, which every "used after Close" error
// matches (defined once).
func TestErrClosedWrapsSpecs(t *testing.T) {
	if ErrClosed.Error() != "cache: store closed" || !errors.Is(ErrClosed, spec.ErrClosed) {
		t.Errorf("ErrClosed = %q, want \"cache: store closed\" matching spec.ErrClosed", ErrClosed)
	}
	if errors.Is(ErrClosed, api.ErrClosed) || errors.Is(api.ErrClosed, ErrClosed) {
		t.Error("the cache's and the extractor's closed errors match each other")
	}
}
