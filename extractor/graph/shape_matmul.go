package graph

// Shape inference of matrix products.

import (
	"slices"
	"strings"
	"unicode"
)

// inferGemm is Gemm: [M, K] x [K, N] -> [M, N], either side transposed by
// transA and transB; both inputs must be matrices.
func inferGemm(op opArgs) ([]*val, error) {
	a, b := op.arg(0), op.arg(1)
	if a == nil || b == nil || a.rank() != 2 || b.rank() != 2 {
		return nil, nil
	}
	m := a.shape[0]
	if intAttr(op.n, "transA", 0) != 0 {
		m = a.shape[1]
	}
	n := b.shape[1]
	if intAttr(op.n, "transB", 0) != 0 {
		n = b.shape[0]
	}
	return one(&val{shape: []int64{m, n}, dtype: a.dtype})
}

// inferMatMul is MatMul or MatMulInteger, by numpy.matmul's shape rule
// (matmulShape).
func inferMatMul(op opArgs) ([]*val, error) {
	a, b := op.arg(0), op.arg(1)
	if a == nil || b == nil {
		return nil, nil
	}
	s, ok := matmulShape(a.shape, b.shape)
	if !ok {
		return nil, nil
	}
	return one(&val{shape: s, dtype: a.dtype})
}

// matmulShape is numpy.matmul's shape rule.
func matmulShape(a, b []int64) ([]int64, bool) {
	if len(a) == 0 || len(b) == 0 {
		return nil, false
	}
	a1, b1 := len(a) == 1, len(b) == 1
	if a1 {
		a = []int64{1, a[0]}
	}
	if b1 {
		b = []int64{b[0], 1}
	}
	if a[len(a)-1] != b[len(b)-2] {
		return nil, false
	}
	batch, ok := broadcast(a[:len(a)-2], b[:len(b)-2])
	if !ok {
		return nil, false
	}
	out := batch
	if !a1 {
		out = append(out, a[len(a)-2])
	}
	if !b1 {
		out = append(out, b[len(b)-1])
	}
	return out, true
}

// inferEinsum is Einsum by its equation: each output letter takes the
// size it has in the inputs (a size of 1 broadcasts), "..." the broadcast
// of the inputs' ellipsis axes; without "->" the output is the ellipsis
// then the letters used once, in alphabetical order. An equation that does
// not fit the inputs is unknown.
func inferEinsum(op opArgs) ([]*val, error) {
	eq := strings.ReplaceAll(strAttr(op.n, "equation", ""), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(op.in) || len(terms) == 0 {
		return nil, nil
	}
	size := map[rune]int64{}
	count := map[rune]int{}
	var ell []int64
	for i, term := range terms {
		x := op.arg(i)
		if x == nil {
			return nil, nil
		}
		pre, post, hasEll := strings.Cut(term, "...")
		if strings.Contains(post, "...") {
			return nil, nil
		}
		letters := []rune(pre + post)
		nEll := x.rank() - len(letters)
		if nEll < 0 || (!hasEll && nEll != 0) {
			return nil, nil
		}
		if hasEll {
			b, ok := broadcast(ell, x.shape[len([]rune(pre)):len([]rune(pre))+nEll])
			if !ok {
				return nil, nil
			}
			ell = b
		}
		for j, c := range letters {
			if !unicode.IsLetter(c) {
				return nil, nil
			}
			ax := j
			if j >= len([]rune(pre)) {
				ax += nEll
			}
			d := x.shape[ax]
			switch old, seen := size[c]; {
			case !seen || old == 1:
				size[c] = d
			case d != old && d != 1:
				return nil, nil
			}
			count[c]++
		}
	}
	if !explicit {
		var once []rune
		for c, n := range count {
			if n == 1 {
				once = append(once, c)
			}
		}
		slices.Sort(once)
		rhs = "..." + string(once)
	}
	pre, post, hasEll := strings.Cut(rhs, "...")
	var s []int64
	for _, c := range pre {
		d, ok := size[c]
		if !ok {
			return nil, nil
		}
		s = append(s, d)
	}
	if hasEll {
		s = append(s, ell...)
	}
	for _, c := range post {
		d, ok := size[c]
		if !ok {
			return nil, nil
		}
		s = append(s, d)
	}
	return one(&val{shape: s, dtype: op.arg(0).dtype})
}
