//go:build !purego

package online

// The assembly kernels of knn_amd64.s (see fused_gen.go, knn_kernel.go).

//go:noescape
func knnScoresAVX512(x *float32, blocks, n int, pack *float32, panels int, out *float32, xstride, pstride, add int)

//go:noescape
func knnScoresAVX2(x *float32, blocks, n int, pack *float32, panels int, out *float32, xstride, pstride, add int)

var (
	knnAVX512 = &knnKernel{
		name: "avx512",
		rows: 8,
		scores: func(x []float32, blocks, dim, l0, l1 int, pack []float32, panels int, out []float32) {
			checkKNNScores(8, x, blocks, dim, l0, l1, pack, panels, out)
			knnScoresAVX512(&x[8*l0], blocks, l1-l0, &pack[panelWidth*l0], panels, &out[0], 4*8*dim, 4*panelWidth*dim, boolInt(l0 > 0))
		},
	}
	knnAVX2 = &knnKernel{
		name: "avx2",
		rows: avx2Rows,
		scores: func(x []float32, blocks, dim, l0, l1 int, pack []float32, panels int, out []float32) {
			checkKNNScores(avx2Rows, x, blocks, dim, l0, l1, pack, panels, out)
			knnScoresAVX2(&x[avx2Rows*l0], blocks, l1-l0, &pack[panelWidth*l0], panels, &out[0], 4*avx2Rows*dim, 4*panelWidth*dim, boolInt(l0 > 0))
		},
	}
)

func bestKNNKernel() *knnKernel {
	switch {
	case hasAVX512():
		return knnAVX512
	case hasAVX2():
		return knnAVX2
	}
	return knnGeneric
}

// knnKernels returns every KNN kernel this CPU runs, fastest first.
func knnKernels() []*knnKernel {
	var ks []*knnKernel
	if hasAVX512() {
		ks = append(ks, knnAVX512)
	}
	if hasAVX2() {
		ks = append(ks, knnAVX2)
	}
	return append(ks, knnGeneric)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
