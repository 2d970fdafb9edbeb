package gemm

import "math"

// kc is the depth of a packed block: the number of steps of l a kernel call
// sums before adding its tile to C. It is shared by all kernels so that
// they round alike. 256 keeps the AVX-512 kernel's micro-panel of op(A)
// (12×256 float64, 24 KiB) in half of a 48 KiB L1 and the block of op(B)
// (kc×nc) in L2 for nc up to a few hundred.
const kc = 256

// kernel is one micro-kernel with the blocking it is run with.
type kernel struct {
	name string
	// mr×nr is the tile of C one call computes.
	mr, nr int
	// mc rows of op(A) are packed at a time (a multiple of mr), and nc
	// columns of op(B) (a multiple of nr): the kc×nc block of op(B) is
	// meant to stay in L2 while every micro-panel of the mc×kc block of
	// op(A) sweeps it.
	mc, nc int
	// tile computes, for i < mr, j < nr,
	//
	//	C[i·ldc+j] = α·Σ_l a[l·mr+i]·b[l·nr+j] + β·C[i·ldc+j]
	//
	// summing l = 0, …, k−1 in order with one FMA per step. β = 0 means
	// C is overwritten, not read. k > 0.
	tile func(k int, a, b, c []float64, ldc int, alpha, beta float64)
	// narrow, if not nil, is a kernel with the same mr and a smaller nr
	// for the last micro-panel of op(B) when it is at most narrow.nr
	// columns wide, so that a tail of a few columns does not cost a whole
	// tile of FMAs. That panel is packed nr = narrow.nr wide.
	narrow *kernel
	// edge, if not nil, is tile on the first rows×cols of the tile only
	// (rows ≤ mr, cols ≤ nr, C is read and written there only). Without
	// it, edge tiles go through a temporary tile.
	edge func(k int, a, b, c []float64, ldc int, alpha, beta float64, rows, cols int)
	// The optional packing routines of full micro-panels of w = mr rows
	// of op(A) or w = nr columns of op(B), for l < depth, j < w:
	//
	//	transpose: dst[l·w + j] = src[j·ld + l]   (op(A) = A, op(B) = Bᵀ)
	//	copy:      dst[l·w + j] = src[l·ld + j]   (op(A) = Aᵀ, op(B) = B)
	//
	// Without them, packA and packB use Go loops.
	transposeA, transposeB, copyA, copyB func(dst, src []float64, ld, depth int)
}

// checkTile panics unless the slices hold the operands of one call of an
// mr×nr kernel.
func checkTile(mr, nr, k int, a, b, c []float64, ldc int) {
	if k < 1 || ldc < nr || len(a) < k*mr || len(b) < k*nr || len(c) < (mr-1)*ldc+nr {
		panic("gemm: kernel: bad operands")
	}
}

// generic is the portable kernel: a 4×4 tile of scalar FMA chains, the
// same chains as the assembly kernels compute, so it gives the same bits.
var generic = &kernel{
	name: "generic",
	mr:   4, nr: 4,
	mc: 1008, nc: 256,
	tile: tileGeneric,
}

func tileGeneric(k int, a, b, c []float64, ldc int, alpha, beta float64) {
	checkTile(4, 4, k, a, b, c, ldc)
	var (
		c00, c01, c02, c03 float64
		c10, c11, c12, c13 float64
		c20, c21, c22, c23 float64
		c30, c31, c32, c33 float64
	)
	a, b = a[:4*k], b[:4*k]
	for len(a) >= 4 && len(b) >= 4 {
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00, c01, c02, c03 = math.FMA(a0, b0, c00), math.FMA(a0, b1, c01), math.FMA(a0, b2, c02), math.FMA(a0, b3, c03)
		c10, c11, c12, c13 = math.FMA(a1, b0, c10), math.FMA(a1, b1, c11), math.FMA(a1, b2, c12), math.FMA(a1, b3, c13)
		c20, c21, c22, c23 = math.FMA(a2, b0, c20), math.FMA(a2, b1, c21), math.FMA(a2, b2, c22), math.FMA(a2, b3, c23)
		c30, c31, c32, c33 = math.FMA(a3, b0, c30), math.FMA(a3, b1, c31), math.FMA(a3, b2, c32), math.FMA(a3, b3, c33)
		a, b = a[4:], b[4:]
	}
	rows := [4][4]float64{
		{c00, c01, c02, c03},
		{c10, c11, c12, c13},
		{c20, c21, c22, c23},
		{c30, c31, c32, c33},
	}
	for i := range rows {
		storeRow(c[i*ldc:i*ldc+4], rows[i][:], alpha, beta)
	}
}

// storeRow sets dst = α·acc + β·dst the way the assembly kernels do:
// α·acc if β = 0 (dst is not read), else fma(α, acc, β·dst).
func storeRow(dst, acc []float64, alpha, beta float64) {
	dst = dst[:len(acc)]
	if beta == 0 {
		for j, v := range acc {
			dst[j] = alpha * v
		}
		return
	}
	for j, v := range acc {
		dst[j] = math.FMA(alpha, v, beta*dst[j])
	}
}
