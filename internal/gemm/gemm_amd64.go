//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

//go:generate go run gemm_gen.go

// The assembly of gemm_amd64.s (see gemm_gen.go): the micro-kernels, in
// which zero = 1 stands for β = 0 and (AVX-512) rows and the bits of mask
// limit the store to the first rows and columns of the tile; and the
// AVX-512 packing of full micro-panels. The Go wrappers below check the
// operands.

//go:noescape
func dgemmAVX512(kc int, a, b, c *float64, ldc int, alpha, beta float64, zero, rows, mask int)

//go:noescape
func dgemmAVX512x8(kc int, a, b, c *float64, ldc int, alpha, beta float64, zero, rows, mask int)

//go:noescape
func dgemmAVX2(kc int, a, b, c *float64, ldc int, alpha, beta float64, zero int)

//go:noescape
func transpose12AVX512(dst, src *float64, ld, blocks int)

//go:noescape
func transpose16AVX512(dst, src *float64, ld, blocks int)

//go:noescape
func copy12AVX512(dst, src *float64, ld, depth int)

//go:noescape
func copy16AVX512(dst, src *float64, ld, depth int)

// copier returns the copyA/B function of a kernel of w columns from the
// assembly copy.
func copier(w int, copyRows func(dst, src *float64, ld, depth int)) func(dst, src []float64, ld, depth int) {
	return func(dst, src []float64, ld, depth int) {
		if depth < 1 || ld < w || len(dst) < depth*w || len(src) < (depth-1)*ld+w {
			panic("gemm: copy: bad operands")
		}
		copyRows(&dst[0], &src[0], ld, depth)
	}
}

// transposer returns the transposeA/B function of a kernel of w rows from
// the assembly transpose of w rows by blocks of 8 columns; the last
// columns are copied in Go.
func transposer(w int, transpose func(dst, src *float64, ld, blocks int)) func(dst, src []float64, ld, depth int) {
	return func(dst, src []float64, ld, depth int) {
		if depth < 1 || ld < depth || len(dst) < depth*w || len(src) < (w-1)*ld+depth {
			panic("gemm: transpose: bad operands")
		}
		blocks := depth / 8
		if blocks > 0 {
			transpose(&dst[0], &src[0], ld, blocks)
		}
		for i := 0; i < w; i++ {
			row := src[i*ld : i*ld+depth]
			for l := 8 * blocks; l < depth; l++ {
				dst[l*w+i] = row[l]
			}
		}
	}
}

// The AVX-512 kernel's blocking: 12×16 tiles (24 accumulators); kc = 256
// (kernel.go); nc = 256, so that the 512 KiB block of op(B) fits a 1 MiB
// L2 with room for the streams of op(A) and C; mc = 1008 only bounds the
// packing buffer of op(A) (2 MiB, read one 24 KiB micro-panel at a time)
// and how often op(B) is packed again. Measured on a 2-core AMD EPYC
// (Zen 5, 48 KiB L1d, 1 MiB L2): nc 128 to 512 and mc 240 to 1008 are
// within the noise at 256³ and 1000³; mc = 96 lost about 10% at 1000³.
// The AVX2 kernel's micro-panels are half as large and keep the same
// blocks.
var (
	avx512Kernel = &kernel{
		name: "avx512",
		mr:   12, nr: 16,
		mc: 1008, nc: 256,
		tile: func(k int, a, b, c []float64, ldc int, alpha, beta float64) {
			checkTile(12, 16, k, a, b, c, ldc)
			dgemmAVX512(k, &a[0], &b[0], &c[0], ldc, alpha, beta, isZero(beta), 12, 1<<16-1)
		},
		edge: func(k int, a, b, c []float64, ldc int, alpha, beta float64, rows, cols int) {
			checkEdge(12, 16, k, a, b, c, ldc, rows, cols)
			dgemmAVX512(k, &a[0], &b[0], &c[0], ldc, alpha, beta, isZero(beta), rows, 1<<cols-1)
		},
		narrow: &kernel{
			name: "avx512x8",
			mr:   12, nr: 8,
			tile: func(k int, a, b, c []float64, ldc int, alpha, beta float64) {
				checkTile(12, 8, k, a, b, c, ldc)
				dgemmAVX512x8(k, &a[0], &b[0], &c[0], ldc, alpha, beta, isZero(beta), 12, 1<<8-1)
			},
			edge: func(k int, a, b, c []float64, ldc int, alpha, beta float64, rows, cols int) {
				checkEdge(12, 8, k, a, b, c, ldc, rows, cols)
				dgemmAVX512x8(k, &a[0], &b[0], &c[0], ldc, alpha, beta, isZero(beta), rows, 1<<cols-1)
			},
		},
		transposeA: transposer(12, transpose12AVX512),
		transposeB: transposer(16, transpose16AVX512),
		copyA:      copier(12, copy12AVX512),
		copyB:      copier(16, copy16AVX512),
	}
	avx2Kernel = &kernel{
		name: "avx2",
		mr:   6, nr: 8,
		mc: 1008, nc: 256,
		tile: func(k int, a, b, c []float64, ldc int, alpha, beta float64) {
			checkTile(6, 8, k, a, b, c, ldc)
			dgemmAVX2(k, &a[0], &b[0], &c[0], ldc, alpha, beta, isZero(beta))
		},
	}
)

// checkEdge panics unless the slices hold the operands of one edge call
// of an mr×nr kernel on rows×cols.
func checkEdge(mr, nr, k int, a, b, c []float64, ldc, rows, cols int) {
	if rows < 1 || rows > mr || cols < 1 || cols > nr || k < 1 || ldc < cols || len(a) < k*mr || len(b) < k*nr || len(c) < (rows-1)*ldc+cols {
		panic("gemm: kernel: bad operands")
	}
}

func isZero(beta float64) int {
	if beta == 0 {
		return 1
	}
	return 0
}

func hasAVX512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX2 && cpu.X86.HasFMA }
func hasAVX2() bool   { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// bestKernel returns the fastest kernel, or nil (gonum's Dgemm) on CPUs
// without FMA, where the portable kernel's math.FMA is emulated.
func bestKernel() *kernel {
	switch {
	case hasAVX512():
		return avx512Kernel
	case hasAVX2():
		return avx2Kernel
	}
	return nil
}

// kernels returns every kernel this CPU runs, fastest first.
func kernels() []*kernel {
	var ks []*kernel
	if hasAVX512() {
		ks = append(ks, avx512Kernel)
	}
	if hasAVX2() {
		ks = append(ks, avx2Kernel)
	}
	return append(ks, generic)
}
