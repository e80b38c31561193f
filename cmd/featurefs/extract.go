package main

import (
	"fmt"
	"os"
)

func runExtract(args []string) int {
	fmt.Fprintln(os.Stderr, "featurefs extract: not implemented yet")
	return 1
}
