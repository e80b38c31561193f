package main

import (
	"os"
	"runtime"
)

// moreProcs runs Go's scheduler with twice its default GOMAXPROCS (the
// CPUs the process may use), unless GOMAXPROCS is set in the
// environment. Most of a mount's threads spend their time in cgo calls
// (libjpeg-turbo's decode, ONNX Runtime) and system calls (FUSE requests,
// the cache's files, the store's sockets); a P stays with such a thread
// until the runtime's monitor takes it back, after 20 us to 10 ms, and the
// Go code that has work waits or is handed the P at the cost of a thread
// wake-up. Twice the Ps keeps one free for it meanwhile: in two A/Bs of
// the same build on 2 cores, epoch 1 through the mount ran 1.05-1.07x the
// images/s at 0.95-1.00x the mount's CPU per image, and the extractor
// alone on ResNet-50 was unchanged (docs/records/ab-gomaxprocs.md).
func moreProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
}
