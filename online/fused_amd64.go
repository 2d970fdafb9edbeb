//go:build !purego

package online

import "golang.org/x/sys/cpu"

//go:generate go run fused_gen.go

// The assembly kernels of fused_amd64.s (see fused_gen.go). The caller has
// checked the lengths; blocks and panels are positive.

//go:noescape
func argmaxAVX512(x *float32, blocks, dim int, pack *float32, panels int, max *float32, idx *int32)

//go:noescape
func aboveAVX512(x *float32, blocks, dim int, pack *float32, panels int, t float32, pos *int64, cos *float32, idx *int32)

//go:noescape
func firstMaxAVX512(max *float32, idx *int32, rows int, best *int32, cos *float32)

//go:noescape
func argmaxAVX2(x *float32, blocks, dim int, pack *float32, panels int, max *float32, idx *int32)

//go:noescape
func aboveAVX2(x *float32, blocks, dim int, pack *float32, panels int, t float32, pos *int64, cos *float32, idx *int32, lut *[256][8]int32)

var (
	avx512Kernel = &kernel{
		name: "avx512",
		rows: 8,
		argmax: func(x []float32, blocks, dim int, pack []float32, panels int, max []float32, idx []int32) {
			checkArgmax(8, x, blocks, dim, pack, panels, max, idx)
			argmaxAVX512(&x[0], blocks, dim, &pack[0], panels, &max[0], &idx[0])
		},
		above: func(x []float32, blocks, dim int, pack []float32, panels int, t float32, pos []int64, cos []float32, idx []int32) {
			checkAbove(8, x, blocks, dim, pack, panels, pos, cos, idx)
			aboveAVX512(&x[0], blocks, dim, &pack[0], panels, t, &pos[0], &cos[0], &idx[0])
		},
		reduce: func(max []float32, idx []int32, rows int, best []int32, cos []float32) {
			if rows < 1 || len(max) < rows*panelWidth || len(idx) < rows*panelWidth || len(best) < rows || len(cos) < rows {
				panic("online: fused reduction: buffers too short")
			}
			firstMaxAVX512(&max[0], &idx[0], rows, &best[0], &cos[0])
		},
	}
	avx2Kernel = &kernel{
		name: "avx2",
		rows: 3,
		argmax: func(x []float32, blocks, dim int, pack []float32, panels int, max []float32, idx []int32) {
			checkArgmax(3, x, blocks, dim, pack, panels, max, idx)
			argmaxAVX2(&x[0], blocks, dim, &pack[0], panels, &max[0], &idx[0])
		},
		above: func(x []float32, blocks, dim int, pack []float32, panels int, t float32, pos []int64, cos []float32, idx []int32) {
			checkAbove(3, x, blocks, dim, pack, panels, pos, cos, idx)
			aboveAVX2(&x[0], blocks, dim, &pack[0], panels, t, &pos[0], &cos[0], &idx[0], &compressTable)
		},
	}
)

// compressTable[m] lists the lanes of the set bits of the 8-bit mask m, in
// increasing order: the permutation that packs the lanes above the
// threshold to the front of an AVX2 register (AVX2 has no compress).
var compressTable = func() (t [256][8]int32) {
	for m := range t {
		n := 0
		for a := 0; a < 8; a++ {
			if m&(1<<a) != 0 {
				t[m][n] = int32(a)
				n++
			}
		}
	}
	return t
}()

func hasAVX512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasPOPCNT }
func hasAVX2() bool   { return cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasPOPCNT }

func bestKernel() *kernel {
	switch {
	case hasAVX512():
		return avx512Kernel
	case hasAVX2():
		return avx2Kernel
	}
	return generic
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
