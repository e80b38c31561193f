// Command benchcodec measures cache/codec on feature files: for each
// directory of .npy files given (NAME=DIR), the bytes per feature stored by
// each method, features per GiB, and single-goroutine encode, decode and
// 4 KiB partial-read speed, over interleaved rounds (scripts/bench-codec.sh
// runs it). It prints one markdown table.
//
//	go run ./scripts/benchcodec -rounds 3 resnet50/layer12/float32=DIR ...
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
)

type set struct {
	name  string
	es    int
	files [][]byte
}

type result struct {
	stored           int
	enc, dec, partAt []float64 // MB/s, MB/s, µs per 4 KiB read
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func main() {
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	flag.Parse()
	var sets []set
	for _, a := range flag.Args() {
		name, dir, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintln(os.Stderr, "benchcodec: want NAME=DIR, got", a)
			os.Exit(2)
		}
		paths, _ := filepath.Glob(filepath.Join(dir, "*", "*.npy"))
		if len(paths) == 0 {
			paths, _ = filepath.Glob(filepath.Join(dir, "*.npy"))
		}
		if len(paths) == 0 {
			fmt.Fprintln(os.Stderr, "benchcodec: no .npy files in", dir)
			os.Exit(1)
		}
		s := set{name: name, es: 4}
		if strings.Contains(name, "float16") {
			s.es = 2
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			s.files = append(s.files, b)
		}
		sets = append(sets, s)
	}
	methods := []codec.Method{codec.S2, codec.Zeros, codec.ZstdFastest, codec.ZstdDefault}
	res := map[string]map[codec.Method]*result{}
	for _, s := range sets {
		res[s.name] = map[codec.Method]*result{}
		for _, m := range methods {
			res[s.name][m] = &result{}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range *rounds {
		for i := range methods {
			m := methods[(i+round)%len(methods)]
			for _, s := range sets {
				rs := res[s.name][m]
				var raw, stored int
				blobs := make([][]byte, len(s.files))
				t0 := time.Now()
				for k, f := range s.files {
					b, err := codec.Encode(nil, f, s.es, m)
					if err != nil {
						panic(err)
					}
					blobs[k] = b
					raw += len(f)
					stored += len(b)
				}
				enc := time.Since(t0)
				t0 = time.Now()
				for k, b := range blobs {
					out, err := codec.Decode(make([]byte, 0, len(s.files[k])), b)
					if err != nil || len(out) != len(s.files[k]) {
						panic(fmt.Sprint("decode: ", err))
					}
				}
				dec := time.Since(t0)
				p := make([]byte, 4096)
				const reads = 200
				t0 = time.Now()
				for range reads {
					k := r.IntN(len(blobs))
					off := int64(r.IntN(len(s.files[k]) - 4096))
					n, _, err := codec.ReadAt(blobs[k], p, off)
					if err != nil || !bytes.Equal(p[:n], s.files[k][off:off+int64(n)]) {
						panic(fmt.Sprint("ReadAt: ", err))
					}
				}
				part := time.Since(t0)
				rs.stored = stored / len(s.files)
				rs.enc = append(rs.enc, float64(raw)/enc.Seconds()/1e6)
				rs.dec = append(rs.dec, float64(raw)/dec.Seconds()/1e6)
				rs.partAt = append(rs.partAt, part.Seconds()/reads*1e6)
			}
		}
	}
	fmt.Println("| features | method | bytes per feature, raw | stored | ratio | features per GiB (raw: stored) | encode MB/s | decode MB/s | 4 KiB read, us |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range sets {
		raw := len(s.files[0])
		for _, m := range methods {
			rs := res[s.name][m]
			fmt.Printf("| %s (%d files) | %s | %d | %d | **%.2fx** | %d: %d | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.0f |\n",
				s.name, len(s.files), m, raw, rs.stored, float64(raw)/float64(rs.stored),
				(1<<30)/raw, (1<<30)/rs.stored,
				median(rs.enc), minf(rs.enc), maxf(rs.enc), median(rs.dec), minf(rs.dec), maxf(rs.dec), median(rs.partAt))
		}
	}
}

func minf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
