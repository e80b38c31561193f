// Package leakcheck is a test helper: it finds goroutines running this
// module's code that a test started and did not end (a goleak-style check
// without the dependency), and samples the heap's peak while a test's
// work runs (PeakHeap).
package leakcheck

import (
	"bytes"
	"runtime"
	"strings"
	"time"
)

// module is the import path prefix of this module's code in stack traces.
const module = "github.com/featurefs/featurefs/"

// TB is the part of testing.TB Check needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Snapshot is the set of goroutines alive when it was taken.
type Snapshot map[string]bool

// Take records the goroutines alive now.
func Take() Snapshot {
	s := Snapshot{}
	for id := range goroutines() {
		s[id] = true
	}
	return s
}

// Leaked returns the stacks of goroutines not in s that run this module's
// code (test files' goroutines and the caller's own excluded), waiting up
// to wait for them to end.
func (s Snapshot) Leaked(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for id, stack := range goroutines() {
			if !s[id] && ours(stack) {
				left = append(left, stack)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Check returns a function that fails t if goroutines started since Check
// still run this module's code (after up to 5s). Use: defer
// leakcheck.Check(t)() before creating what the test closes.
func Check(t TB) func() {
	t.Helper()
	s := Take()
	return func() {
		t.Helper()
		if left := s.Leaked(5 * time.Second); len(left) > 0 {
			t.Errorf("%d goroutine(s) left behind:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	}
}

// ours reports whether a goroutine's stack has a frame of this module's
// code outside test files (its function line names the module, the file
// line after it is no _test.go); a "created by" frame counts.
func ours(stack string) bool {
	lines := strings.Split(stack, "\n")
	for i := 1; i+1 < len(lines); i++ {
		fn, file := lines[i], strings.TrimSpace(lines[i+1])
		if strings.HasPrefix(fn, "\t") || !strings.Contains(fn, module) || strings.Contains(fn, "/leakcheck.") {
			continue
		}
		if loc, _, _ := strings.Cut(file, " "); !strings.HasSuffix(strings.TrimSuffix(loc, ":"), "_test.go") && !strings.Contains(loc, "_test.go:") {
			return true
		}
	}
	return false
}

// goroutines returns every goroutine's stack but the caller's, by id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the caller's own
		}
		head, _, _ := bytes.Cut(g, []byte(" ["))
		out[string(head)] = string(g)
	}
	return out
}
