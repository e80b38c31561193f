package main

import (
	"fmt"
	"os"
)

func runCache(args []string) int {
	fmt.Fprintln(os.Stderr, "featurefs cache: not implemented yet")
	return 1
}
