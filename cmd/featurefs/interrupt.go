package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// interruptGrace is how long a command has, after SIGINT or SIGTERM, to
// stop by itself (its loops see the context cancelled, it closes what it
// opened and says where it stopped) before the process exits anyway.
const interruptGrace = 900 * time.Millisecond

// interruptContext returns a context that the first SIGINT or SIGTERM
// cancels, for a command (warm, extract) that stops cleanly on it. So
// that an interrupt stops the command within a second whatever it is
// doing (a read, a model load, a cache closing), the process exits with
// exitOther and one line (featurefs CMD: interrupted ...) interruptGrace
// after the signal if it is still running, or at once on a second
// signal. stop releases the signals; call it when the command returns.
func interruptContext(cmd string) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		cancel()
		t := time.NewTimer(interruptGrace)
		defer t.Stop()
		select {
		case <-sigs:
		case <-t.C:
		case <-done:
			return
		}
		fmt.Fprintf(os.Stderr, "featurefs %s: interrupted; stopped before it finished closing (run it again to resume)\n", cmd)
		os.Exit(exitOther)
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}
