// Command nocaps runs a command with no capabilities in its effective,
// permitted, inheritable or ambient sets, the bounding set left as it is:
// what Kubernetes' runtimes give a container's non-root user whose
// securityContext adds a capability (it reaches only the bounding set, so
// a setuid program such as fusermount3 gets it, the process itself does
// not). podman gives such a user the added capabilities as ambient ones;
// the pod tests (test/podman_test.go) run featurefs under nocaps to see
// what a pod sees.
//
//	nocaps COMMAND [ARG...]
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nocaps COMMAND [ARG...]")
		os.Exit(2)
	}
	// Capabilities are per thread: drop them on this one and exec from it.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		fail("clear ambient capabilities", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		fail("capset", err)
	}
	path, err := exec.LookPath(os.Args[1])
	if err != nil {
		fail("look up "+os.Args[1], err)
	}
	fail("exec "+path, syscall.Exec(path, os.Args[1:], os.Environ()))
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "nocaps: %s: %v\n", what, err)
	os.Exit(127)
}
