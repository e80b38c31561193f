//go:build !linux

package codec

import "time"

// cpuTime is unknown here: the benchmarks report no cpu-ns/op.
func cpuTime() time.Duration { return 0 }
