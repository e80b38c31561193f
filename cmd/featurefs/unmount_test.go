package main

import (
	"testing"
	"time"
)

// TestUnmountWithinGivesUpOnAServerThatWaits: go-fuse's unmount blocks
// until its request loops end, which a copy of the mount in use in another
// mount namespace prevents; a stop waits for it at most its bound instead
// of until the kubelet's SIGKILL (TestKubernetesPodsInPodman shows it in a
// pod), and reports an unmount that ended in time.
func TestUnmountWithinGivesUpOnAServerThatWaits(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	start := time.Now()
	if unmountWithin(func() { <-block }, 300*time.Millisecond) {
		t.Fatal("an unmount that never returned reported as ended")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("unmountWithin returned after %v, want about its wait (300ms)", d)
	}
	if !unmountWithin(func() {}, time.Minute) {
		t.Error("an unmount that returned at once reported as not ended")
	}
}
