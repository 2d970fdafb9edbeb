package online

// The KNN scoring kernels compute, for a block of unit query rows x_i and
// panels of stored unit rows t_j, the cosines
//
//	s_ij = Σ_l x_il·t_jl    (float32, one fused multiply-add per l, l = 0…Dim−1)
//
// into a score tile of knnTilePanels panels of stored rows, which KNN.Classify
// merges into each query's K best before the next tile: the queries ×
// stored rows score matrix is never written. The layouts are those of the
// k-means kernels (fused.go): the stored rows are kept in panels of
// panelWidth rows, dimension after dimension, and the queries are packed
// in blocks of knnKernel.rows rows, so the assembly is the same dot loop
// (fused_gen.go) with a store in place of the reduction.
//
// The AVX-512 and AVX2 kernels accumulate every lane in the same order
// and give bit-identical scores; the portable kernel rounds products and
// sums separately and may differ from them in the last bits. The error of
// a score is within fusedTol(Dim) of the exact cosine.

// knnKernel is one implementation of the KNN score tile.
type knnKernel struct {
	name string
	rows int // query rows per block

	// scores adds, for dimensions l0 ≤ l < l1 of dim, the products of
	// query row r of block b with stored row a of panel p to
	// out[((b·panels + p)·rows + r)·panelWidth + a], or sets it to them if
	// l0 = 0, for the blocks·rows packed rows of x and the panels of pack.
	// Sweeping l0 … l1 over 0 … dim in order leaves the cosines in out.
	scores func(x []float32, blocks, dim, l0, l1 int, pack []float32, panels int, out []float32)
}

// knnGeneric is the portable KNN kernel.
var knnGeneric = &knnKernel{name: "generic", rows: 4, scores: knnScoresGeneric}

// knnBest is the KNN kernel this process uses: the fastest the CPU runs.
var knnBest = bestKNNKernel()

func knnScoresGeneric(x []float32, blocks, dim, l0, l1 int, pack []float32, panels int, out []float32) {
	checkKNNScores(4, x, blocks, dim, l0, l1, pack, panels, out)
	var acc [4][panelWidth]float32
	o := 0
	for b := 0; b < blocks; b++ {
		blk := x[b*4*dim+4*l0 : b*4*dim+4*l1]
		for p := 0; p < panels; p++ {
			scoreGeneric(&acc, blk, pack[p*dim*panelWidth+l0*panelWidth:p*dim*panelWidth+l1*panelWidth])
			for i := range acc {
				dst := out[o : o+panelWidth]
				if l0 == 0 {
					copy(dst, acc[i][:])
				} else {
					for a, v := range acc[i] {
						dst[a] += v
					}
				}
				o += panelWidth
			}
		}
	}
}

// checkKNNScores panics unless the buffers hold what a KNN kernel with
// blocks of r rows reads and writes: the assembly does not check.
func checkKNNScores(r int, x []float32, blocks, dim, l0, l1 int, pack []float32, panels int, out []float32) {
	if blocks < 1 || dim < 1 || panels < 1 || l0 < 0 || l1 <= l0 || l1 > dim ||
		len(x) < blocks*r*dim || len(pack) < panels*dim*panelWidth || len(out) < blocks*panels*r*panelWidth {
		panic("online: knn kernel: buffers too short")
	}
}
