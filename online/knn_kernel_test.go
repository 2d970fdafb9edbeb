package online

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/mat"
)

// exactCosines returns the float64 cosines of every row of test with
// every row of train (0 for a zero row), test-major.
func exactCosines(train, test mat.Matrix) []float64 {
	n, dim := train.Dims()
	r, _ := test.Dims()
	unit := func(m mat.Matrix, i int) []float64 {
		v := mat.Row(nil, i, m)
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		if ss > 0 {
			for l := range v {
				v[l] /= math.Sqrt(ss)
			}
		}
		return v
	}
	tr := make([][]float64, n)
	for j := range tr {
		tr[j] = unit(train, j)
	}
	out := make([]float64, r*n)
	for q := 0; q < r; q++ {
		x := unit(test, q)
		for j, t := range tr {
			var s float64
			for l := 0; l < dim; l++ {
				s += x[l] * t[l]
			}
			out[q*n+j] = s
		}
	}
	return out
}

// checkNearest checks that h, the neighbours of one query, are its kk
// nearest rows under the exact cosines want, except that rows within
// 2·tol of the kk-th largest cosine (near-ties, which float32 rounding may
// order either way) can stand in for each other, and that each cosine is
// within tol of the exact one.
func checkNearest(t *testing.T, what string, h []neighbour, want []float64, kk int, tol float64) {
	t.Helper()
	if len(h) != kk {
		t.Fatalf("%s: %d neighbours, want %d", what, len(h), kk)
	}
	in := make(map[int]bool, kk)
	for _, nb := range h {
		if in[nb.idx] || nb.idx < 0 || nb.idx >= len(want) {
			t.Fatalf("%s: neighbour %d repeated or out of range", what, nb.idx)
		}
		in[nb.idx] = true
		if d := math.Abs(float64(nb.cos) - want[nb.idx]); !(d <= tol) {
			t.Fatalf("%s: row %d cosine %v, want %v ± %g", what, nb.idx, nb.cos, want[nb.idx], tol)
		}
	}
	sorted := slices.Clone(want)
	sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
	kth := sorted[kk-1]
	for j, c := range want {
		switch {
		case in[j] && c < kth-2*tol:
			t.Fatalf("%s: row %d (cosine %v) chosen below the %d-th cosine %v", what, j, c, kk, kth)
		case !in[j] && c > kth+2*tol:
			t.Fatalf("%s: row %d (cosine %v) missed above the %d-th cosine %v", what, j, c, kk, kth)
		}
	}
}

// checkKNNKernels runs every kernel on the rows of train and test with K
// neighbours and checks each query's neighbours against the float64
// cosines.
func checkKNNKernels(t *testing.T, train, test mat.Matrix, K int) {
	t.Helper()
	n, dim := train.Dims()
	r, _ := test.Dims()
	k := NewKNN(KNNSettings{K: K}, dim)
	if err := k.Add(train, make([]int, n)); err != nil {
		t.Fatal(err)
	}
	want := exactCosines(train, test)
	kk, tol := min(K, n), fusedTol(dim)
	for _, kn := range knnKernels() {
		seen := 0
		err := k.nearest(kn, test, func(q int, h []neighbour) {
			if q != seen {
				t.Fatalf("%s: query %d found after %d", kn.name, q, seen)
			}
			seen++
			checkNearest(t, fmt.Sprintf("%s query %d", kn.name, q), h, want[q*n:(q+1)*n], kk, tol)
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != r {
			t.Fatalf("%s: %d queries answered, want %d", kn.name, seen, r)
		}
	}
}

// TestKNNKernelsRandom checks every kernel on clustered random rows,
// across query chunks (knnQueryRows), tiles (knnTilePanels panels),
// slices of dimensions (knnDimSlice) and ragged last panels, against the float64 cosines.
func TestKNNKernelsRandom(t *testing.T) {
	for _, tc := range []struct{ n, r, dim, K int }{
		{1000, 50, 37, 30},
		{knnTilePanels*panelWidth*2 + 5, knnQueryRows + 11, 50, 30},
		{300, 17, 3200, 30},
		{70, 9, 1, 5},
		{33, 8, 64, 40}, // K larger than the stored rows
		{1, 1, 2, 30},
	} {
		t.Run(fmt.Sprintf("n=%d/r=%d/dim=%d/K=%d", tc.n, tc.r, tc.dim, tc.K), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.dim)))
			all, _ := knnClusters(rng, 5, tc.dim, tc.n+tc.r, 0.5)
			checkKNNKernels(t, all.Slice(0, tc.n, 0, tc.dim), all.Slice(tc.n, tc.n+tc.r, 0, tc.dim), tc.K)
		})
	}
}

// TestKNNKernelsMNIST checks every kernel on raw MNIST digits, whose
// non-negative pixels give many close cosines.
func TestKNNKernelsMNIST(t *testing.T) {
	imgs := mnistImages(t, 100)
	x := mat.NewDense(100, 784, nil)
	for i, im := range imgs {
		x.SetRow(i, im)
	}
	checkKNNKernels(t, x.Slice(0, 70, 0, 784), x.Slice(70, 100, 0, 784), 30)
}

// TestKNNMatchesBlas32 checks that Classify predicts what the blas32
// sgemm computation it replaced did, on MNIST digits and clustered rows.
func TestKNNMatchesBlas32(t *testing.T) {
	imgs := mnistImages(t, 100)
	digits := mat.NewDense(100, 784, nil)
	for i, im := range imgs {
		digits.SetRow(i, im)
	}
	rng := rand.New(rand.NewPCG(81, 82))
	clusters, cl := knnClusters(rng, 6, 300, 1300, 1.2)
	for _, tc := range []struct {
		name         string
		train, test  mat.Matrix
		labels       []int
		s            KNNSettings
		maxDifferent int
	}{
		{"mnist", digits.Slice(0, 70, 0, 784), digits.Slice(70, 100, 0, 784), seq(70, 10), KNNSettings{K: 10}, 0},
		{"mnist/cosine", digits.Slice(0, 70, 0, 784), digits.Slice(70, 100, 0, 784), seq(70, 10), KNNSettings{K: 10, Vote: VoteCosine}, 0},
		{"clusters", clusters.Slice(0, 1000, 0, 300), clusters.Slice(1000, 1300, 0, 300), cl[:1000], KNNSettings{}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, dim := tc.train.Dims()
			r, _ := tc.test.Dims()
			k := NewKNN(tc.s, dim)
			if err := k.Add(tc.train, tc.labels); err != nil {
				t.Fatal(err)
			}
			got, want := make([]int, r), make([]int, r)
			if err := k.Classify(got, tc.test); err != nil {
				t.Fatal(err)
			}
			classifyBlas32(want, k, rowMajor(k), tc.test)
			diff := 0
			for i := range got {
				if got[i] != want[i] {
					diff++
				}
			}
			if diff > tc.maxDifferent {
				t.Errorf("%d of %d predictions differ from blas32 (n = %d)", diff, r, n)
			}
		})
	}
}

// seq returns n labels cycling through c classes.
func seq(n, c int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i % c
	}
	return s
}

// TestKNNKernelsAgree checks that the vector kernels find the same
// neighbours with bit-identical cosines.
func TestKNNKernelsAgree(t *testing.T) {
	ks := knnKernels()
	if len(ks) < 3 {
		t.Skip("fewer than two vector kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(83, 84))
	all, labels := knnClusters(rng, 4, 77, 700, 0.8)
	k := NewKNN(KNNSettings{K: 13}, 77)
	if err := k.Add(all.Slice(0, 600, 0, 77), labels[:600]); err != nil {
		t.Fatal(err)
	}
	found := func(kn *knnKernel) [][]neighbour {
		var out [][]neighbour
		if err := k.nearest(kn, all.Slice(600, 700, 0, 77), func(_ int, h []neighbour) {
			h = slices.Clone(h)
			slices.SortFunc(h, func(a, b neighbour) int { return a.idx - b.idx })
			out = append(out, h)
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	ref := found(ks[0])
	for _, kn := range ks[1 : len(ks)-1] {
		got := found(kn)
		for q := range ref {
			if !slices.Equal(got[q], ref[q]) {
				t.Fatalf("query %d: %s and %s differ:\n%v\n%v", q, kn.name, ks[0].name, got[q], ref[q])
			}
		}
	}
}

// TestKNNTiesKeepFirstRows checks that among equal cosines the earlier
// stored rows are the neighbours, with every kernel, across panels and
// tiles.
func TestKNNTiesKeepFirstRows(t *testing.T) {
	const n, dim, K = 600, 19, 40
	row := make([]float64, dim)
	for l := range row {
		row[l] = float64(l%5) - 1.5
	}
	train := mat.NewDense(n, dim, nil)
	for i := 0; i < n; i++ {
		train.SetRow(i, row)
	}
	k := NewKNN(KNNSettings{K: K}, dim)
	if err := k.Add(train, make([]int, n)); err != nil {
		t.Fatal(err)
	}
	for _, kn := range knnKernels() {
		if err := k.nearest(kn, train.Slice(0, 3, 0, dim), func(q int, h []neighbour) {
			idx := make([]int, len(h))
			for i, nb := range h {
				idx[i] = nb.idx
			}
			slices.Sort(idx)
			for i, j := range idx {
				if i != j {
					t.Fatalf("%s query %d: neighbours %v, want rows 0…%d", kn.name, q, idx, K-1)
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKNNAddFailureKeepsRows checks that a rejected Add leaves the stored
// rows, the padding of their last panel included, as they were.
func TestKNNAddFailureKeepsRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(85, 86))
	x, labels := knnClusters(rng, 3, 9, 40, 0.5)
	k := NewKNN(KNNSettings{K: 5}, 9)
	if err := k.Add(x.Slice(0, 20, 0, 9), labels[:20]); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(k.pack)
	bad := mat.DenseCopyOf(x.Slice(20, 40, 0, 9))
	bad.Set(15, 3, math.NaN()) // after rows that went into the first panel's padding and a new panel
	if err := k.Add(bad, labels[20:]); err == nil {
		t.Fatal("NaN row accepted")
	}
	if k.Len() != 20 || !slices.Equal(k.pack, before) {
		t.Errorf("failed Add changed the stored rows (%d rows)", k.Len())
	}
}

// FuzzKNNKernels checks every kernel on shapes across the block edges:
// query and stored row counts that are not multiples of the block, panel
// or tile, dimensions from 1 to 300, and some zero and repeated rows.
func FuzzKNNKernels(f *testing.F) {
	f.Add(uint64(1), uint16(1), uint8(1), uint16(1), uint8(1))
	f.Add(uint64(2), uint16(33), uint8(9), uint16(17), uint8(30))
	f.Add(uint64(3), uint16(300), uint8(25), uint16(300), uint8(7))
	f.Add(uint64(4), uint16(257), uint8(8), uint16(2), uint8(64))
	f.Fuzz(func(t *testing.T, seed uint64, n uint16, r uint8, dim uint16, K uint8) {
		nn, rr, dd, kk := 1+int(n)%600, 1+int(r)%40, 1+int(dim)%300, 1+int(K)%64
		rng := rand.New(rand.NewPCG(seed, 87))
		all, _ := knnClusters(rng, 3, dd, nn+rr, 0.5)
		for i := 0; i < nn+rr; i += 7 {
			switch rng.IntN(3) {
			case 0:
				all.SetRow(i, make([]float64, dd))
			case 1:
				all.SetRow(i, all.RawRowView(rng.IntN(nn+rr)))
			}
		}
		checkKNNKernels(t, all.Slice(0, nn, 0, dd), all.Slice(nn, nn+rr, 0, dd), kk)
	})
}

// rowMajor returns the stored unit rows of k, row after row.
func rowMajor(k *KNN) []float32 {
	n, dim := k.Len(), k.dim
	rows := make([]float32, n*dim)
	for j := 0; j < n; j++ {
		base := (j/panelWidth)*dim*panelWidth + j%panelWidth
		for l := 0; l < dim; l++ {
			rows[j*dim+l] = k.pack[base+l*panelWidth]
		}
	}
	return rows
}

// classifyBlas32 is the soft KNN as KNN.Classify computed it before the
// fused kernels: the cosines of 256 queries with 4,096 stored rows (the
// unit rows of k, row-major) per blas32 sgemm, merged into the heaps.
func classifyBlas32(dst []int, k *KNN, rows []float32, x mat.Matrix) {
	r, c := x.Dims()
	n := k.Len()
	kk := min(k.s.k(), n)
	invT := 1 / k.s.temperature()
	bq, bt := min(256, r), min(4096, n)
	query := make([]float32, bq*c)
	scores := make([]float32, bq*bt)
	heaps := make([]neighbour, bq*kk)
	sizes := make([]int, bq)
	z := make([]float64, k.classes)
	row := make([]float64, c)
	for q0 := 0; q0 < r; q0 += bq {
		nq := min(bq, r-q0)
		for i := 0; i < nq; i++ {
			mat.Row(row, q0+i, x)
			inv, _ := unitScale(row)
			for l, v := range row {
				query[i*c+l] = float32(v * inv)
			}
		}
		clear(sizes)
		qm := blas32.General{Rows: nq, Cols: c, Stride: c, Data: query[:nq*c]}
		for t0 := 0; t0 < n; t0 += bt {
			nt := min(bt, n-t0)
			tm := blas32.General{Rows: nt, Cols: c, Stride: c, Data: rows[t0*c : (t0+nt)*c]}
			sm := blas32.General{Rows: nq, Cols: nt, Stride: nt, Data: scores[:nq*nt]}
			blas32.Gemm(blas.NoTrans, blas.Trans, 1, qm, tm, 0, sm)
			for i := 0; i < nq; i++ {
				h := heaps[i*kk : (i+1)*kk]
				size := sizes[i]
				for j, v := range sm.Data[i*nt : (i+1)*nt] {
					cand := neighbour{cos: v, idx: t0 + j}
					if size < kk {
						h[size] = cand
						size++
						siftUp(h, size-1)
						continue
					}
					if worse(h[0], cand) {
						h[0] = cand
						siftDown(h[:size], 0)
					}
				}
				sizes[i] = size
			}
		}
		for i := 0; i < nq; i++ {
			clear(z)
			for _, nb := range heaps[i*kk : i*kk+sizes[i]] {
				w := float64(nb.cos)
				if k.s.Vote == VoteExp {
					w = math.Exp((w - 1) * invT)
				}
				z[k.labels[nb.idx]] += w
			}
			best := 0
			for cl, v := range z {
				if v > z[best] {
					best = cl
				}
			}
			dst[q0+i] = best
		}
	}
}

// BenchmarkKNN compares the fused kernels with the blas32 sgemm path on
// the same rows: 2,000 stored rows and 10,000 queries of dimension 3,200
// (the MNIST embeddings of smt-minimalistic), 1.28·10¹¹ flops per
// Classify. gonum's sgemm may use every core; the kernels use one.
func BenchmarkKNN(b *testing.B) {
	const n, r, dim = 2000, 10000, 3200
	rng := rand.New(rand.NewPCG(7, 8))
	x, labels := knnClusters(rng, 10, dim, n+r, 1)
	k := NewKNN(KNNSettings{}, dim)
	if err := k.Add(x.Slice(0, n, 0, dim), labels[:n]); err != nil {
		b.Fatal(err)
	}
	q := x.Slice(n, n+r, 0, dim)
	pred := make([]int, r)
	gflops := func(b *testing.B, i int) {
		b.ReportMetric(float64(i)*2*n*r*dim/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
	for _, kn := range knnKernels() {
		if kn == knnGeneric && knnBest != knnGeneric {
			continue // 100 times slower than the vector kernels
		}
		b.Run(kn.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := k.nearest(kn, q, func(int, []neighbour) {}); err != nil {
					b.Fatal(err)
				}
				i++
			}
			gflops(b, i)
		})
	}
	b.Run("Classify", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := k.Classify(pred, q); err != nil {
				b.Fatal(err)
			}
			i++
		}
		gflops(b, i)
	})
	rows := rowMajor(k)
	b.Run("blas32", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			classifyBlas32(pred, k, rows, q)
			i++
		}
		gflops(b, i)
	})
}

// TestKNNSlicesExact checks that sweeping the dimensions in slices gives
// the vector kernels' scores of one sweep bit for bit: each lane's fused
// multiply-adds continue from the stored float32.
func TestKNNSlicesExact(t *testing.T) {
	const blocks, dim, panels = 2, 301, 3
	rng := rand.New(rand.NewPCG(88, 89))
	pack := make([]float32, panels*dim*panelWidth)
	for i := range pack {
		pack[i] = float32(rng.NormFloat64())
	}
	for _, kn := range knnKernels() {
		if kn == knnGeneric {
			continue
		}
		x := make([]float32, blocks*kn.rows*dim)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		whole := make([]float32, blocks*kn.rows*panels*panelWidth)
		sliced := make([]float32, len(whole))
		kn.scores(x, blocks, dim, 0, dim, pack, panels, whole)
		for _, l := range [][2]int{{0, 1}, {1, 100}, {100, 256}, {256, 301}} {
			kn.scores(x, blocks, dim, l[0], l[1], pack, panels, sliced)
		}
		if !slices.Equal(whole, sliced) {
			t.Errorf("%s: sliced sweep differs from one sweep", kn.name)
		}
	}
}
