package graph

// Shape inference of matrix products.

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
