package main

import (
	"archive/tar"
	"path"
	"slices"
	"strings"
	"testing"
	"time"
)

const lddSample = `	linux-vdso.so.1 (0x00007fe792534000)
	libdl.so.2 => /lib/x86_64-linux-gnu/libdl.so.2 (0x00007fe79251a000)
	libstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007fe790400000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fe79061e000)
	/lib64/ld-linux-x86-64.so.2 (0x00007fe792536000)
	libmissing.so.1 => not found
`

// TestParseLdd: the libraries' absolute paths and the loader's, sorted;
// the vDSO and a library not found are left out.
func TestParseLdd(t *testing.T) {
	got := ParseLdd(lddSample)
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libdl.so.2", "/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseLdd: %q, want %q", got, want)
	}
}

// FuzzParseLdd: any ldd output gives only clean absolute paths, never
// the root, and no panic.
func FuzzParseLdd(f *testing.F) {
	f.Add(lddSample)
	f.Add("\tnot a dynamic executable\n")
	f.Add("x => ../../etc/passwd (0x1)\n/ (0x2)\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range ParseLdd(s) {
			if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
				t.Fatalf("ParseLdd gave %q", p)
			}
		}
	})
}

// TestBuildReproducible: the same entries and epoch give the same
// archive; another epoch another one.
func TestBuildReproducible(t *testing.T) {
	es := []entry{{name: "/usr/local/bin/featurefs", typ: tar.TypeReg, mode: 0o755, data: []byte("bin")}}
	a, err := Build(es, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Build(es, time.Unix(0, 0))
	c, _ := Build(es, time.Unix(100, 0))
	if string(a) != string(b) || string(a) == string(c) {
		t.Fatal("Build is not a function of its entries and epoch")
	}
	if _, err := Build([]entry{{name: "rel/path", typ: tar.TypeReg}}, time.Unix(0, 0)); err == nil {
		t.Fatal("Build took a relative path")
	}
}
