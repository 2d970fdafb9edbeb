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
func approxVNNI(x *int8, bias *int32, groups int, pack *uint8, scale *float32, panels int, s *float32, width int, top *float32)

//go:noescape
func selectAVX512(s *float32, rows, width int, t *float32, pos *int64, idx *int32)

//go:noescape
func gatherAVX512(pack *float32, dim int, idx *int32, n int, dst *float32)

//go:noescape
func argmaxAVX2(x *float32, blocks, dim int, pack *float32, panels int, max *float32, idx *int32)

//go:noescape
func aboveAVX2(x *float32, blocks, dim int, pack *float32, panels int, t float32, pos *int64, cos *float32, idx *int32, lut *[256][8]int32)

// avx2Rows is the number of rows in a block of the AVX2 kernels, k-means
// and KNN alike (fused_gen.go).
const avx2Rows = 6

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
	// avx512VNNIKernel is the AVX-512 kernel with the int8 prefilter of
	// prefilter.go in front of its argmax: the same codes, bit for bit.
	avx512VNNIKernel = &kernel{
		name:   "avx512-vnni",
		rows:   8,
		argmax: avx512Kernel.argmax,
		above:  avx512Kernel.above,
		reduce: avx512Kernel.reduce,
		pre: &prefilterOps{
			approx: func(x []int8, bias []int32, groups int, pack []uint8, scale []float32, panels int, s []float32, width int, top []float32) {
				const rows = prefilterRows
				if groups < 1 || panels < 1 || width < panels*panelWidth || len(x) < rows*groups*4 || len(bias) < rows ||
					len(pack) < panels*groups*4*panelWidth || len(scale) < panels*panelWidth ||
					len(s) < (rows-1)*width+panels*panelWidth || len(top) < rows*16 {
					panic("online: prefilter: buffers too short")
				}
				approxVNNI(&x[0], &bias[0], groups, &pack[0], &scale[0], panels, &s[0], width, &top[0])
			},
			sel: func(s []float32, rows, width int, t []float32, pos []int64, idx []int32) {
				if rows < 1 || width < 16 || width%16 != 0 || len(s) < rows*width || len(t) < rows || len(pos) < rows {
					panic("online: prefilter selection: buffers too short")
				}
				for r := range rows {
					end := int(pos[r]) + width + 16
					if pos[r] < 0 || end > len(idx) || (r+1 < rows && end > int(pos[r+1])) {
						panic("online: prefilter selection: output too short")
					}
				}
				selectAVX512(&s[0], rows, width, &t[0], &pos[0], &idx[0])
			},
			gather: func(pack []float32, dim int, idx []int32, n int, dst []float32) {
				if dim < 1 || n < 0 || n > 16 || len(idx) < max(1, n) || len(dst) < (dim-1)*panelWidth+16 {
					panic("online: prefilter gather: buffers too short")
				}
				for _, j := range idx[:n] {
					if j < 0 || panelsFor(int(j)+1)*dim*panelWidth > len(pack) {
						panic("online: prefilter gather: atom out of range")
					}
				}
				gatherAVX512(&pack[0], dim, &idx[0], n, &dst[0])
			},
		},
	}
	avx2Kernel = &kernel{
		name: "avx2",
		rows: avx2Rows,
		argmax: func(x []float32, blocks, dim int, pack []float32, panels int, max []float32, idx []int32) {
			checkArgmax(avx2Rows, x, blocks, dim, pack, panels, max, idx)
			argmaxAVX2(&x[0], blocks, dim, &pack[0], panels, &max[0], &idx[0])
		},
		above: func(x []float32, blocks, dim int, pack []float32, panels int, t float32, pos []int64, cos []float32, idx []int32) {
			checkAbove(avx2Rows, x, blocks, dim, pack, panels, pos, cos, idx)
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
func hasVNNI() bool   { return hasAVX512() && cpu.X86.HasAVX512VNNI }
func hasAVX2() bool   { return cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasPOPCNT }

func bestKernel() *kernel {
	switch {
	case hasVNNI():
		return avx512VNNIKernel
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
	if hasVNNI() {
		ks = append(ks, avx512VNNIKernel)
	}
	if hasAVX512() {
		ks = append(ks, avx512Kernel)
	}
	if hasAVX2() {
		ks = append(ks, avx2Kernel)
	}
	return append(ks, generic)
}
