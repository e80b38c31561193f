package codec

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used (user and system, every
// thread): on a loaded machine a benchmark's wall time includes the time
// it waited for a CPU, its CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
