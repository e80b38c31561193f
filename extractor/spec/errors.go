package spec

import "errors"

// ErrClosed is matched by every error of a part used after its Close:
// fs/internal/lifetime's ErrClosed (an owner's refused work, a closed
// pipeline's read; "closed"), cache.ErrClosed ("cache: store closed") and
// the extractor's api.ErrClosed ("extractor: service closed") wrap it,
// each keeping its message and matched on its own as before. Defined once
// here, the leaf all three import.
var ErrClosed = errors.New("closed")
