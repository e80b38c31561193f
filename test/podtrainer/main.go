// Command podtrainer stands in for a trainer's image in the Kubernetes
// pod tests (test/kubernetes_pods_test.go): an unprivileged process that
// knows nothing of featurefs and reads a feature tree the way
// DatasetFolder does (sorted class directories, sorted files). For every
// .npy file under its argument it prints one line, "PATH SIZE SHA256"
// (PATH relative to the argument), then "read N files". With -loop it
// reads the tree again and again until it is stopped, so that a stop
// finds readers active. It exits 1 on the first error.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	loop := flag.Bool("loop", false, "read the tree until stopped")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: podtrainer [-loop] DIR")
		os.Exit(2)
	}
	root := flag.Arg(0)
	for {
		n, err := readTree(root, !*loop)
		if err != nil {
			fmt.Fprintln(os.Stderr, "podtrainer:", err)
			os.Exit(1)
		}
		if !*loop {
			fmt.Printf("read %d files\n", n)
			return
		}
	}
}

// readTree reads every .npy file under root, in lexical order (WalkDir's),
// printing each one's line when print is set.
func readTree(root string, print bool) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".npy") {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		size, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n++
		if print {
			rel, _ := filepath.Rel(root, p)
			fmt.Printf("%s %d %s\n", rel, size, hex.EncodeToString(h.Sum(nil)))
		}
		return nil
	})
	return n, err
}
