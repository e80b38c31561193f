package main

import (
	"fmt"
	"os"
)

func runMount(args []string) int {
	fmt.Fprintln(os.Stderr, "featurefs mount: not implemented yet")
	return 1
}
