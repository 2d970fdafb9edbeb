package hebbian

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
)

// moons returns n points of two interleaving noisy half circles, centred
// (the recipe of scikit-learn's make_moons, as in bench.MakeMoons).
func moons(n int, noise float64, src rand.Source) *mat.Dense {
	rng := rand.New(src)
	x := mat.NewDense(n, 2, nil)
	for i := range n {
		th := math.Pi * rng.Float64()
		a, b := math.Cos(th), math.Sin(th)
		if i%2 == 1 {
			a, b = 1-a, 0.5-b
		}
		x.Set(i, 0, a+noise*rng.NormFloat64()-0.5)
		x.Set(i, 1, b+noise*rng.NormFloat64()-0.25)
	}
	return x
}

func TestNormalizedError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	y := randMatrix(rng, 6, 3, 0, 1)
	var yy mat.SymDense
	yy.SymOuterK(1, y)
	if e := NormalizedError(&yy, y); e > 1e-15 {
		t.Errorf("exact factor: error %v, want 0", e)
	}
	if e := NormalizedError(&yy, mat.NewDense(6, 1, nil)); e != 1 {
		t.Errorf("zero factor: error %v, want 1", e)
	}
	half := mat.DenseCopyOf(y)
	half.Scale(math.Sqrt(0.5), y)
	if e := NormalizedError(&yy, half); !scalar.EqualWithinAbsOrRel(e, 0.5, 1e-14, 1e-14) {
		t.Errorf("half: error %v, want 0.5", e)
	}
}

// TestKernelPCAIsOptimal checks the rank-n error of kernel PCA against
// the tail of the eigenvalues, √(Σ_{i>n} λ_i²/Σ λ_i²) (eq. 28).
func TestKernelPCAIsOptimal(t *testing.T) {
	x := moons(120, 0.1, rand.NewPCG(3, 4))
	var k mat.SymDense
	KernelMatrix(&k, Gaussian{Sigma: 0.3}, x)
	var eig mat.EigenSym
	eig.Factorize(&k, false)
	vals := eig.Values(nil)
	var y mat.Dense
	if err := KernelPCA(&y, &k, 16); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 4, 16} {
		var tail, all float64
		for i, v := range vals {
			all += v * v
			if i < len(vals)-n {
				tail += v * v
			}
		}
		got := NormalizedError(&k, y.Slice(0, 120, 0, n))
		if want := math.Sqrt(tail / all); !scalar.EqualWithinAbsOrRel(got, want, 1e-9, 1e-9) {
			t.Errorf("rank %d: error %v, want %v", n, got, want)
		}
	}
}

func TestNystrom(t *testing.T) {
	x := moons(100, 0.1, rand.NewPCG(5, 6))
	k := Gaussian{Sigma: 0.5}
	var km mat.SymDense
	KernelMatrix(&km, k, x)
	// Every point a landmark: exact up to the pseudo-inverse threshold.
	var y mat.Dense
	if err := Nystrom(&y, k, x, x); err != nil {
		t.Fatal(err)
	}
	if e := NormalizedError(&km, &y); e > 1e-4 {
		t.Errorf("all points as landmarks: error %v", e)
	}
	// Duplicated landmarks add nothing (pseudo-inverse of a singular B).
	var lm, dup mat.Dense
	UniformLandmarks(&lm, x, 8, rand.NewPCG(1, 1))
	dup.Stack(&lm, &lm)
	var y8, y16 mat.Dense
	if err := Nystrom(&y8, k, x, &lm); err != nil {
		t.Fatal(err)
	}
	if err := Nystrom(&y16, k, x, &dup); err != nil {
		t.Fatal(err)
	}
	if a, b := NormalizedError(&km, &y8), NormalizedError(&km, &y16); !scalar.EqualWithinAbsOrRel(a, b, 1e-6, 1e-6) {
		t.Errorf("duplicated landmarks: error %v, want %v", b, a)
	}
}

// TestLandmarkMethods checks the ordering of section 4.1 on a small half
// moons set: k-means landmarks beat uniform ones, and kernel PCA beats
// both.
func TestLandmarkMethods(t *testing.T) {
	x := moons(400, 0.1, rand.NewPCG(7, 8))
	k := Gaussian{Sigma: 0.3}
	var km mat.SymDense
	KernelMatrix(&km, k, x)
	const n = 12
	var uni, cen, yu, yk, yp mat.Dense
	UniformLandmarks(&uni, x, n, rand.NewPCG(1, 1))
	if it := KMeansLandmarks(&cen, x, n, 100, rand.NewPCG(1, 1)); it < 1 {
		t.Errorf("k-means ran %d iterations", it)
	}
	if err := Nystrom(&yu, k, x, &uni); err != nil {
		t.Fatal(err)
	}
	if err := Nystrom(&yk, k, x, &cen); err != nil {
		t.Fatal(err)
	}
	if err := KernelPCA(&yp, &km, n); err != nil {
		t.Fatal(err)
	}
	eu, ek, ep := NormalizedError(&km, &yu), NormalizedError(&km, &yk), NormalizedError(&km, &yp)
	if !(ep < ek && ek < eu) {
		t.Errorf("errors: kernel PCA %.3f, k-means %.3f, uniform %.3f; want increasing", ep, ek, eu)
	}
}

func TestKMeansLandmarksFindsClusters(t *testing.T) {
	// Three tight clusters: k-means finds their centres.
	rng := rand.New(rand.NewPCG(9, 10))
	centres := [][2]float64{{0, 0}, {5, 0}, {0, 5}}
	x := mat.NewDense(90, 2, nil)
	for i := range 90 {
		c := centres[i%3]
		x.Set(i, 0, c[0]+0.1*rng.NormFloat64())
		x.Set(i, 1, c[1]+0.1*rng.NormFloat64())
	}
	var lm mat.Dense
	KMeansLandmarks(&lm, x, 3, 100, rand.NewPCG(1, 1))
	for _, c := range centres {
		best := math.Inf(1)
		for j := range 3 {
			best = min(best, math.Hypot(lm.At(j, 0)-c[0], lm.At(j, 1)-c[1]))
		}
		if best > 0.1 {
			t.Errorf("no centre within 0.1 of %v (nearest %.3f)", c, best)
		}
	}
}

func TestUniformLandmarksAreDistinctRows(t *testing.T) {
	x := mat.NewDense(10, 1, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	var lm mat.Dense
	UniformLandmarks(&lm, x, 10, rand.NewPCG(1, 1))
	seen := map[float64]bool{}
	for i := range 10 {
		seen[lm.At(i, 0)] = true
	}
	if len(seen) != 10 {
		t.Errorf("%d distinct rows of 10", len(seen))
	}
}

// TestRandomFourierConverges checks that the random Fourier features'
// error falls as n grows (Rahimi and Recht: O(1/√n)).
func TestRandomFourierConverges(t *testing.T) {
	x := moons(200, 0.1, rand.NewPCG(11, 12))
	var km mat.SymDense
	KernelMatrix(&km, Gaussian{Sigma: 0.3}, x)
	var prev float64 = math.Inf(1)
	for _, n := range []int{16, 256, 4096} {
		var y mat.Dense
		RandomFourier(&y, x, n, 0.3, rand.NewPCG(1, uint64(n)))
		e := NormalizedError(&km, &y)
		if e >= prev {
			t.Errorf("n = %d: error %.3f, not below %.3f", n, e, prev)
		}
		prev = e
	}
	if prev > 0.1 {
		t.Errorf("4096 features: error %.3f", prev)
	}
}

// TestNetworkLearnsHalfMoons trains small networks on half moons and
// checks the paper's finding (section 4.1) that the learned landmarks are
// better than uniform ones, and this package's that with Mixing the
// responses themselves are (nearly) those of Nyström with the learned
// landmarks, below the paper's network.
func TestNetworkLearnsHalfMoons(t *testing.T) {
	x := moons(256, 0.1, rand.NewPCG(13, 14))
	k := Gaussian{Sigma: 0.3}
	var km mat.SymDense
	KernelMatrix(&km, k, x)
	const n = 8
	var uni, yu mat.Dense
	UniformLandmarks(&uni, x, n, rand.NewPCG(1, 1))
	if err := Nystrom(&yu, k, x, &uni); err != nil {
		t.Fatal(err)
	}
	uniform := NormalizedError(&km, &yu)
	errs := map[bool][2]float64{}
	for _, mixing := range []bool{false, true} {
		net := New(Settings{Neurons: n, Dim: 2, Kernel: k, Mixing: mixing, Lambda: 1e-5, AnnealEvery: 1500}, rand.NewPCG(2, 2))
		if err := net.SetWeights(&uni); err != nil {
			t.Fatal(err)
		}
		for s := range 3000 {
			i := (s * 32) % 256
			if err := net.Step(nil, x.Slice(i, i+32, 0, 2)); err != nil {
				t.Fatal(err)
			}
		}
		var y, yn mat.Dense
		net.Transform(&y, x)
		if err := Nystrom(&yn, k, x, net.Weights()); err != nil {
			t.Fatal(err)
		}
		errs[mixing] = [2]float64{NormalizedError(&km, &y), NormalizedError(&km, &yn)}
	}
	paper, mixed := errs[false], errs[true]
	t.Logf("uniform Nyström %.3f; network %.3f (its Nyström %.3f); mixing %.3f (its Nyström %.3f)",
		uniform, paper[0], paper[1], mixed[0], mixed[1])
	if !(paper[1] < uniform && mixed[1] < uniform) {
		t.Errorf("learned landmarks no better than uniform ones")
	}
	if !(mixed[0] < paper[0]) || mixed[0] > mixed[1]+0.02 {
		t.Errorf("mixing responses %.3f: want below the paper's %.3f and near its Nyström %.3f", mixed[0], paper[0], mixed[1])
	}
}
