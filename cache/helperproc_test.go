package cache

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
)

// helperEnv selects what TestHelperProcess does when the test binary runs
// itself as a child process.
const helperEnv = "FEATUREFS_CACHE_HELPER"

// TestHelperProcess is not a test: it is the child process of the lock and
// kill -9 tests, and does nothing unless helperEnv is set.
//
//	FEATUREFS_CACHE_HELPER=lock DIR     open DIR, print "ready", wait for stdin to close
//	FEATUREFS_CACHE_HELPER=closing DIR  the same, then MarkClosing, print "closing", wait
//	                                    1.5 s (an unmounted mount closing the rest), Close
//	FEATUREFS_CACHE_HELPER=writer DIR N  open DIR, Put keys N, N+1, ... from 4 goroutines,
//	                                    printing "put K" after each Put returns, until killed
//	FEATUREFS_CACHE_HELPER=compactor DIR STEP  open DIR under auto (compacting after 20 ms
//	                                    idle), print "ready"; with STEP (intent, renamed,
//	                                    committed) print "at ID" at that step of the first
//	                                    compaction and stop there, until killed
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	args := strings.Fields(os.Getenv(helperEnv + "_ARGS"))
	opts := Options{Dir: args[0], MaxBytes: 4 << 30, Logger: quietLogger()}
	if mode == "compactor" {
		opts.Compression, opts.RawFiles, opts.CompactAfter = codec.S2, true, 20*time.Millisecond
	}
	s, err := Open(opts)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	switch mode {
	case "lock":
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
	case "closing":
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		s.MarkClosing()
		fmt.Println("closing")
		time.Sleep(1500 * time.Millisecond)
		if err := s.Close(); err != nil {
			fmt.Println("close:", err)
			os.Exit(4)
		}
		os.Exit(0)
	case "compactor":
		if len(args) > 1 && args[1] != "random" {
			hook := func(name string, i id) {
				if name == args[1] {
					fmt.Printf("at %s\n", i)
					select {}
				}
			}
			s.auto.testStep.Store(&hook)
		}
		fmt.Println("ready")
		select {}
	case "writer":
		first, _ := strconv.Atoi(args[1])
		var next atomic.Int64
		next.Store(int64(first))
		var out sync.Mutex
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1) - 1)
					if err := s.Put(testKey(k), testValue(k, crashSize(k))); err != nil {
						fmt.Println("put error:", err)
						os.Exit(4)
					}
					out.Lock()
					fmt.Printf("put %d\n", k)
					out.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	s.Close()
	os.Exit(0)
}

// crashSize cycles the kill -9 test's value sizes through 4 KiB, 64 KiB,
// 256 KiB and 800 KB (a ResNet-50 layer12 feature).
func crashSize(k int) int {
	return [...]int{4 << 10, 64 << 10, 256 << 10, 800_000}[k%4]
}

// startHelper starts the test binary as a helper child and returns it with
// a reader of its stdout.
func startHelper(t *testing.T, mode string, args ...string) (*exec.Cmd, *bufio.Scanner, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperEnv+"_ARGS="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout), stdin
}
