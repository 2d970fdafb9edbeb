package spectral

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// SolveSMTNonRedundant writes into dst (Dim×n, or empty) a solution of
// the closed-form SMT problem of SolveSMT whose rows are chosen
// non-redundantly (Blau and Michaeli, Alg. 1): each row of P, a function
// on the dictionary atoms, is unpredictable from the rows before it
// under the atoms' usage, so that a low embedding dimension carries more
// than one direction of the manifold. With u = V^(1/2) pᵀ for a row p
// and Q = V^(−1/2) L V^(−1/2),
//
//	min_p p L pᵀ = uᵀ Q u   s.t.  p V pᵀ = ‖u‖² = 1
//
// becomes the maximisation of uᵀ K u with K = c·I − Q (Alg. 1, step 2;
// c = 1.01·λ_max(Q), λ_max from a few Lanczos steps), which NonRedundant
// solves row by row with
//
//   - Scale V^(−1/2): the coordinates are the rows of P, p = V^(−1/2) u;
//   - Weights diag V: an atom counts in the Nadaraya–Watson smoother
//     (and its bandwidth) as often as it is used;
//   - Fixed: the Drop eigenvectors of Q with the smallest eigenvalues
//     (the constant function among them), left out as in SolveSMT.
//
// The rows are V-orthonormal, P V Pᵀ = I, like those of SolveSMT; the
// first is SolveSMT's first. Result.Values are the objectives p L pᵀ of
// the rows, in order (not ascending: the later rows pay for being
// unpredictable). Atoms never used get zero columns. Each row is signed
// so that its entry of largest magnitude is positive. src seeds the
// solver; nil means a fixed seed. nr.Lanczos, when zero, is s.Lanczos.
//
// It needs a diagonal V (1-hot codes), and returns the errors of
// SolveSMT and of NonRedundant. It panics if the settings are invalid or
// dst has another shape.
func SolveSMTNonRedundant(dst *mat.Dense, pb Pencil, s Settings, nr NonRedundantSettings, src rand.Source) (Result, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	if err := nr.Validate(); err != nil {
		panic(err)
	}
	n := pb.Size()
	smtShape(dst, s.Dim, n)
	if src == nil {
		src = rand.NewPCG(0x5eed, 0x6e7273)
	}
	if nr.Lanczos == (LanczosSettings{}) {
		nr.Lanczos = s.Lanczos
	}
	rng := rand.New(src)
	v, used, err := usedAtoms(pb, s.Dim+s.Drop)
	res := Result{Atoms: len(used), Method: Lanczos}
	if err != nil {
		return res, err
	}
	if !pb.DiagonalV() {
		return res, fmt.Errorf("spectral: the non-redundant solve needs a diagonal V (1-hot codes)")
	}
	nu := len(used)
	q := &diagOp{pb: pb, used: used, n: n}
	q.init(v)

	// The top of Q's spectrum, for the shift of step 2.
	top, err := Smallest(negated{q}, 1, LanczosSettings{Tol: 1e-6}, rand.NewPCG(rng.Uint64(), rng.Uint64()))
	res.add(top.LanczosCounts)
	if top.Vectors == nil {
		return res, err
	}
	shift := 1.01 * max(-top.Values[0], 0)
	if shift == 0 {
		shift = 1
	}

	var fixed *mat.Dense
	if s.Drop > 0 {
		lr, err := Smallest(q, s.Drop, s.Lanczos, rand.NewPCG(rng.Uint64(), rng.Uint64()))
		res.add(lr.LanczosCounts)
		if err != nil {
			return res, fmt.Errorf("spectral: dropped eigenvectors: %w", err)
		}
		fixed = lr.Vectors
		res.Dropped = append([]float64(nil), lr.Values...)
	}
	scale := make([]float64, nu)
	weights := make([]float64, nu)
	for i, a := range used {
		scale[i] = 1 / math.Sqrt(v[a])
		weights[i] = v[a]
	}
	pr := NonRedundantProblem{K: shifted{q, shift}, Scale: scale, Weights: weights}
	if fixed != nil {
		pr.Fixed = fixed
	}
	f := mat.NewDense(nu, s.Dim, nil)
	nres, err := NonRedundant(f, pr, s.Dim, nr, rand.NewPCG(rng.Uint64(), rng.Uint64()))
	res.add(nres.LanczosCounts)
	if err != nil && !errors.Is(err, ErrNoConvergence) {
		return res, err
	}
	res.Values = make([]float64, s.Dim)
	for r, x := range nres.Values {
		res.Values[r] = shift - x
	}
	dst.Zero()
	for i, a := range used {
		for r := 0; r < s.Dim; r++ {
			dst.Set(r, a, f.At(i, r))
		}
	}
	return res, err
}

// negated is −A.
type negated struct{ a Operator }

func (o negated) Size() int { return o.a.Size() }

func (o negated) Apply(dst, x []float64) {
	o.a.Apply(dst, x)
	for i := range dst {
		dst[i] = -dst[i]
	}
}

// shifted is c·I − A.
type shifted struct {
	a Operator
	c float64
}

func (o shifted) Size() int { return o.a.Size() }

func (o shifted) Apply(dst, x []float64) {
	o.a.Apply(dst, x)
	for i := range dst {
		dst[i] = o.c*x[i] - dst[i]
	}
}
