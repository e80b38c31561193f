package main

import (
	"fmt"
	"os"
)

func runLayers(args []string) int {
	fmt.Fprintln(os.Stderr, "featurefs layers: not implemented yet")
	return 1
}
