package archive

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
)

// recoverParse, deferred by every function that parses an archive's
// bytes (index reads, member reads, streams, stored indexes), turns a
// panic into that archive's error: an archive is outside bytes, and a
// parser bug it finds must cost EIO for that archive (logged once, with
// its key, by whoever logs the error), never the process. The error
// names the panic and where it happened.
func recoverParse(err *error) {
	if e := parsePanic(recover()); e != nil {
		*err = e
	}
}

// parsePanic is the error for a recovered panic value r (nil for none).
func parsePanic(r any) error {
	if r == nil {
		return nil
	}
	return fmt.Errorf("parser panic: %v (at %s): %w", r, panicSite(), ErrBadArchive)
}

// panicSite is file:line of the code that panicked: the first frame
// past runtime.gopanic that is not the runtime's.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	panicked := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicked = true
		case panicked && !strings.HasPrefix(f.Function, "runtime."):
			return fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}
