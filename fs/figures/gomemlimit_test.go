package figures

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestGoMemoryLimitShowsEveryLimitSet: go_memory_limit_bytes is the
// runtime's soft limit whatever its size (three quarters of --memory-limit
// 9223372036854775807 once read as none: 0), and 0 only when there is
// none (math.MaxInt64, the runtime's default).
func TestGoMemoryLimitShowsEveryLimitSet(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	for _, lim := range []int64{384 << 20, math.MaxInt64 / 4 * 3, math.MaxInt64 - 1, math.MaxInt64} {
		debug.SetMemoryLimit(lim)
		var m MemoryStats
		ReadProcessMemory(&m)
		want := lim
		if lim == math.MaxInt64 {
			want = 0
		}
		if m.GoMemoryLimitBytes != want {
			t.Errorf("soft limit %d: go_memory_limit_bytes %d, want %d", lim, m.GoMemoryLimitBytes, want)
		}
	}
}
