//go:build !purego

package online

// The assembly kernels of knn_amd64.s (see fused_gen.go, knn_kernel.go).

//go:noescape
func knnScoresAVX512(x *float32, blocks, dim int, pack *float32, panels int, out *float32)

//go:noescape
func knnScoresAVX2(x *float32, blocks, dim int, pack *float32, panels int, out *float32)

var (
	knnAVX512 = &knnKernel{
		name: "avx512",
		rows: 8,
		scores: func(x []float32, blocks, dim int, pack []float32, panels int, out []float32) {
			checkKNNScores(8, x, blocks, dim, pack, panels, out)
			knnScoresAVX512(&x[0], blocks, dim, &pack[0], panels, &out[0])
		},
	}
	knnAVX2 = &knnKernel{
		name: "avx2",
		rows: 3,
		scores: func(x []float32, blocks, dim int, pack []float32, panels int, out []float32) {
			checkKNNScores(3, x, blocks, dim, pack, panels, out)
			knnScoresAVX2(&x[0], blocks, dim, &pack[0], panels, &out[0])
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
