// Command mmapprobe measures the CPU that writing 1 GiB into a file costs
// when the bytes are copied into a shared memory map of the sparse file
// (how Badger writes its value log) and when they are written with
// write(2), in 330 KB pieces (what S2 keeps of a ResNet-50 layer12
// feature). Each run is its own process, so that one mode does not inherit
// the pages the other freed:
//
//	for r in 1 2 3; do go run ./scripts/mmapprobe mmap /var/tmp; go run ./scripts/mmapprobe write /var/tmp; done
//
// A third argument "seq" advises the map MADV_SEQUENTIAL. It prints the
// process's CPU milliseconds per MB written (docs/GPU.md, "Where epoch 1's
// CPU goes").
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const (
	total = 1 << 30
	piece = 330 << 10
)

func main() {
	if len(os.Args) < 3 || (os.Args[1] != "mmap" && os.Args[1] != "write") {
		fmt.Fprintln(os.Stderr, "usage: mmapprobe mmap|write DIR [seq]")
		os.Exit(2)
	}
	mode, dir := os.Args[1], os.Args[2]
	buf := make([]byte, piece)
	for i := range buf {
		buf[i] = byte(i)
	}
	n := total / piece
	name := filepath.Join(dir, fmt.Sprintf("mmapprobe-%d", os.Getpid()))
	f, err := os.Create(name)
	if err != nil {
		fail(err)
	}
	defer os.Remove(name)
	defer f.Close()
	var c0 time.Duration
	switch mode {
	case "mmap":
		if err := f.Truncate(total); err != nil {
			fail(err)
		}
		data, err := syscall.Mmap(int(f.Fd()), 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			fail(err)
		}
		if len(os.Args) > 3 && os.Args[3] == "seq" {
			if err := syscall.Madvise(data, syscall.MADV_SEQUENTIAL); err != nil {
				fail(err)
			}
		}
		c0 = cpu()
		for i := range n {
			copy(data[i*piece:], buf)
		}
	case "write":
		c0 = cpu()
		for range n {
			if _, err := f.Write(buf); err != nil {
				fail(err)
			}
		}
	}
	c := cpu() - c0
	fmt.Printf("%s %.2f ms of CPU per MB\n", mode, c.Seconds()*1e3/(float64(n*piece)/1e6))
}

func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mmapprobe:", err)
	os.Exit(1)
}
