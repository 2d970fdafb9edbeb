package spectral

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// Pencil is the pair of matrices of the SMT problem (V, L), n×n symmetric,
// V positive semi-definite, given by products. *sgd.Stats implements it.
type Pencil interface {
	// Size returns n, the number of atoms.
	Size() int
	// DiagonalV reports whether V is diagonal (1-hot codes).
	DiagonalV() bool
	// DiagV writes the diagonal of V into dst if it has length n, else
	// into a new slice, and returns it.
	DiagV(dst []float64) []float64
	// MulV writes V·x into dst for an n×c x; dst is n×c or empty.
	MulV(dst *mat.Dense, x mat.Matrix)
	// MulL writes L·x into dst for an n×c x; dst is n×c or empty.
	MulL(dst *mat.Dense, x mat.Matrix)
}

// Restrictor is a Pencil with a diagonal V that applies
//
//	Q = V^(−1/2) L V^(−1/2)
//
// on the atoms in use itself, so that the Lanczos solve of SolveSMT does
// not go through MulL on all n atoms (scattering each Lanczos vector into
// R^n and gathering the product back). A compact operator can also leave
// out the zero entries of L and fold the scaling into its entries.
type Restrictor interface {
	Pencil
	// Restrict returns the operator x ↦ diag(scale)·L_UU·diag(scale)·x
	// on R^len(used), L_UU the rows and columns of L of the atoms used
	// (ascending, V_aa > 0), scale[i] = 1/√V_aa of used[i]. The operator
	// may keep both slices.
	Restrict(used []int, scale []float64) Operator
}

// Method selects how SolveSMT finds the eigenvectors.
type Method int

const (
	// Auto uses Dense for small problems (at most 400 atoms in use) and
	// Lanczos otherwise; for a non-diagonal V it uses Dense.
	Auto Method = iota
	// Lanczos uses the matrix-free thick-restart Lanczos method
	// (Smallest) on V^(−1/2) L V^(−1/2). It needs a diagonal V.
	Lanczos
	// Dense forms the matrices and uses gonum's EigenSym: O(n³) time and
	// O(n²) memory, the reference for small n.
	Dense
)

var methodNames = [...]string{Auto: "auto", Lanczos: "lanczos", Dense: "dense"}

// String returns "auto", "lanczos" or "dense".
func (m Method) String() string {
	if m >= 0 && int(m) < len(methodNames) {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// denseAuto is the number of atoms in use up to which Auto picks Dense.
const denseAuto = 400

// Settings configures SolveSMT. A zero field means its documented default.
type Settings struct {
	// Dim is the embedding dimension, the number of rows of P. Required.
	Dim int
	// Drop is the number of smallest eigenvectors skipped before the Dim
	// kept ones. With 1-hot codes the smallest is always the constant
	// function, eigenvalue 0 (L is a graph Laplacian), and one more
	// appears for every connected component of the co-occurrence graph;
	// smt-minimalistic drops the first 16 of 384 on CIFAR. Zero keeps
	// them all; it must be >= 0.
	Drop int
	// Method selects the eigensolver. The zero value is Auto.
	Method Method
	// Lanczos configures the Lanczos method.
	Lanczos LanczosSettings
}

// Validate reports whether the settings are usable.
func (s Settings) Validate() error {
	switch {
	case s.Dim < 1:
		return fmt.Errorf("spectral: embedding dimension %d: must be >= 1", s.Dim)
	case s.Drop < 0:
		return fmt.Errorf("spectral: drop %d: must be >= 0", s.Drop)
	case s.Method < Auto || s.Method > Dense:
		return fmt.Errorf("spectral: unknown %v", s.Method)
	}
	return s.Lanczos.Validate()
}

// Result describes a solution of SolveSMT.
type Result struct {
	// Values are the generalized eigenvalues λ (L x = λ V x) of the rows
	// of P, ascending: row i of P has tr-contribution Values[i], so the
	// objective tr(P L Pᵀ) is their sum.
	Values []float64
	// Dropped are the eigenvalues of the Drop rows left out.
	Dropped []float64
	// Atoms is the number of atoms in the problem (V_jj > 0); the others
	// get zero columns.
	Atoms int
	// Method is the method used (never Auto).
	Method Method
	// LanczosCounts sum the work of the Lanczos solves (zero for Dense).
	LanczosCounts
}

// Errors of SolveSMT.
var (
	// ErrTooFewAtoms means fewer atoms are in use than Dim+Drop.
	ErrTooFewAtoms = errors.New("spectral: fewer atoms in use than eigenvectors wanted")
	// ErrNotDefinite means V restricted to the atoms in use is singular
	// or not finite, so V^(−1/2) does not exist.
	ErrNotDefinite = errors.New("spectral: V is not positive definite on the atoms in use")
)

// SolveSMT writes into dst (Dim×n, or empty) the closed-form solution of
// the sparse manifold transform (sparse-manifold-transform, eq. 8;
// smt-minimalistic, eq. 3):
//
//	min_P ‖P A D‖²_F = tr(P L Pᵀ)   s.t.  P V Pᵀ = I,
//	P = Uᵀ V^(−1/2),
//
// U the eigenvectors of Q = V^(−1/2) L V^(−1/2) with the smallest
// eigenvalues, after skipping Drop of them. (The papers write
// P = V^(−1/2) U and P = U V^(−1/2) for the same thing with other
// orientation conventions; with P of shape Dim×n it is Uᵀ V^(−1/2).)
//
// Atoms never used (V_jj = 0) have zero rows and columns in V and L: Q is
// undefined there, and any regularisation V_jj = ε would make each of them
// an eigenvector of eigenvalue 0 that crowds out the real ones. They are
// left out of the problem and get zero columns in P, so their patches
// embed to zero, like blank ones with sgd.BlankSkip.
//
// For a diagonal V (1-hot codes) Q is applied matrix-free, one product
// with L per Lanczos step (or the pencil's own operator, if it is a
// Restrictor), so K = 16384 needs no dense n×n matrix besides L's own
// storage. For a non-diagonal V it uses Dense.
//
// Each row of P is signed so that its entry of largest magnitude is
// positive, which makes the result reproducible. src seeds the Lanczos
// start vector; nil means a fixed seed.
//
// It returns an error wrapping ErrTooFewAtoms, ErrNotDefinite or
// ErrNoConvergence (then dst holds the best vectors found) when the
// problem cannot be solved, and panics if the settings are invalid or dst
// has another shape.
func SolveSMT(dst *mat.Dense, pb Pencil, s Settings, src rand.Source) (Result, error) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n := pb.Size()
	fresh := dst.IsEmpty()
	smtShape(dst, s.Dim, n)
	if src == nil {
		src = rand.NewPCG(0x5eed, 0x5c7a1)
	}
	want := s.Dim + s.Drop
	v, used, err := usedAtoms(pb, want)
	res := Result{Atoms: len(used)}
	if err != nil {
		return res, err
	}
	method := s.Method
	if method == Auto {
		method = Lanczos
		if !pb.DiagonalV() || len(used) <= denseAuto {
			method = Dense
		}
	}
	if method == Lanczos && !pb.DiagonalV() {
		return res, fmt.Errorf("spectral: the Lanczos solve needs a diagonal V (1-hot codes); use Dense")
	}
	res.Method = method

	var u *mat.Dense   // nu×want eigenvectors of Q
	var vals []float64 // their eigenvalues
	var vih *mat.Dense // V^(−1/2) on the used atoms, nil when diagonal
	switch {
	case method == Lanczos:
		d := &diagOp{pb: pb, used: used, n: n}
		d.init(v)
		var op Operator = d
		if r, ok := pb.(Restrictor); ok {
			op = r.Restrict(used, d.isq)
		}
		var lr LanczosResult
		lr, err = Smallest(op, want, s.Lanczos, src)
		res.add(lr.LanczosCounts)
		if lr.Vectors == nil {
			return res, err
		}
		u, vals = lr.Vectors, lr.Values
	default:
		var q *mat.SymDense
		q, vih, err = denseQ(pb, used, v)
		if err != nil {
			return res, err
		}
		var eig mat.EigenSym
		if !eig.Factorize(q, true) {
			return res, fmt.Errorf("spectral: eigendecomposition of the %d×%d matrix failed", len(used), len(used))
		}
		all := eig.Values(nil)
		var vecs mat.Dense
		eig.VectorsTo(&vecs)
		u = mat.DenseCopyOf(vecs.Slice(0, len(used), 0, want))
		vals = all[:want]
	}
	res.Dropped = append([]float64(nil), vals[:s.Drop]...)
	res.Values = append([]float64(nil), vals[s.Drop:]...)

	// P = Uᵀ V^(−1/2) on the used atoms, zero elsewhere. A dst that
	// smtShape has just allocated is zero already: not clearing it again
	// saves a pass over Dim×n values (on the Brown corpus 128×50,000, of
	// which 8,471 columns are used).
	if !fresh {
		dst.Zero()
	}
	nu := len(used)
	// pu(r, i) is P on used atom i: (Uᵀ V^(−1/2))_ri.
	var isq []float64
	pu := func(r, i int) float64 { return u.At(i, s.Drop+r) * isq[i] }
	if vih != nil {
		var m mat.Dense // Dim×nu
		m.Mul(u.Slice(0, nu, s.Drop, want).T(), vih)
		pu = m.At
	} else {
		isq = make([]float64, nu)
		for i, a := range used {
			isq[i] = 1 / math.Sqrt(v[a])
		}
	}
	// Each row of P gets the sign that makes its largest entry positive.
	// With V diagonal the rows of U are read in order, once for the signs
	// and once for P (row by row of P, U would be read a column at a time:
	// a cache miss per entry on 8,471 words); the values and the choice
	// of each sign are the same either way.
	big, sign := make([]float64, s.Dim), make([]float64, s.Dim)
	for r := range sign {
		sign[r] = 1
	}
	if vih != nil {
		for r := 0; r < s.Dim; r++ {
			for i := 0; i < nu; i++ {
				if x := pu(r, i); math.Abs(x) > big[r] {
					big[r], sign[r] = math.Abs(x), math.Copysign(1, x)
				}
			}
			for i, a := range used {
				dst.Set(r, a, sign[r]*pu(r, i))
			}
		}
		return res, err
	}
	for i := 0; i < nu; i++ {
		for r, x := range u.RawRowView(i)[s.Drop : s.Drop+s.Dim] {
			if x *= isq[i]; math.Abs(x) > big[r] {
				big[r], sign[r] = math.Abs(x), math.Copysign(1, x)
			}
		}
	}
	raw := dst.RawMatrix()
	for i, a := range used {
		for r, x := range u.RawRowView(i)[s.Drop : s.Drop+s.Dim] {
			raw.Data[r*raw.Stride+a] = sign[r] * (x * isq[i])
		}
	}
	return res, err
}

// smtShape sizes an empty dst to dim×n and panics with mat.ErrShape if a
// non-empty one has another shape.
func smtShape(dst *mat.Dense, dim, n int) {
	if dst.IsEmpty() {
		dst.ReuseAs(dim, n)
	} else if r, c := dst.Dims(); r != dim || c != n {
		panic(mat.ErrShape)
	}
}

// usedAtoms returns the diagonal of the pencil's V and the atoms in use
// (V_aa > 0). It returns an error wrapping ErrNotDefinite for a negative
// or non-finite entry, and one wrapping ErrTooFewAtoms (with the atoms in
// use) if fewer than want are used.
func usedAtoms(pb Pencil, want int) ([]float64, []int, error) {
	v := pb.DiagV(nil)
	var used []int
	for a, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return nil, nil, fmt.Errorf("%w: V_%d,%d = %v", ErrNotDefinite, a, a, x)
		}
		if x > 0 {
			used = append(used, a)
		}
	}
	if len(used) < want {
		return v, used, fmt.Errorf("%w: %d in use, %d wanted", ErrTooFewAtoms, len(used), want)
	}
	return v, used, nil
}

// diagOp is Q = D^(−1/2) L D^(−1/2) restricted to the used atoms, for a
// diagonal V = D.
type diagOp struct {
	pb     Pencil
	used   []int
	n      int
	isq    []float64 // 1/√V_aa of each used atom
	xf, yf *mat.Dense
}

func (o *diagOp) init(v []float64) {
	o.isq = make([]float64, len(o.used))
	for i, a := range o.used {
		o.isq[i] = 1 / math.Sqrt(v[a])
	}
	o.xf = mat.NewDense(o.n, 1, nil)
	o.yf = mat.NewDense(o.n, 1, nil)
}

func (o *diagOp) Size() int { return len(o.used) }

func (o *diagOp) Apply(dst, x []float64) {
	xr := o.xf.RawMatrix().Data
	for i, a := range o.used {
		xr[a] = x[i] * o.isq[i]
	}
	o.pb.MulL(o.yf, o.xf)
	yr := o.yf.RawMatrix().Data
	for i, a := range o.used {
		dst[i] = yr[a] * o.isq[i]
	}
}

// denseQ forms Q = V^(−1/2) L V^(−1/2) on the used atoms, and V^(−1/2)
// itself when V is not diagonal.
func denseQ(pb Pencil, used []int, v []float64) (q *mat.SymDense, vih *mat.Dense, err error) {
	n, nu := pb.Size(), len(used)
	e := mat.NewDense(n, nu, nil) // the used unit vectors
	for i, a := range used {
		e.Set(a, i, 1)
	}
	var le mat.Dense
	pb.MulL(&le, e)
	l := mat.NewDense(nu, nu, nil)
	for i, a := range used {
		for j := 0; j < nu; j++ {
			l.Set(i, j, le.At(a, j))
		}
	}
	var qd mat.Dense
	if pb.DiagonalV() {
		isq := make([]float64, nu)
		for i, a := range used {
			isq[i] = 1 / math.Sqrt(v[a])
		}
		qd.CloneFrom(l)
		for i := 0; i < nu; i++ {
			for j := 0; j < nu; j++ {
				qd.Set(i, j, qd.At(i, j)*isq[i]*isq[j])
			}
		}
	} else {
		var ve mat.Dense
		pb.MulV(&ve, e)
		vs := mat.NewSymDense(nu, nil)
		for i, a := range used {
			for j := i; j < nu; j++ {
				vs.SetSym(i, j, 0.5*(ve.At(a, j)+ve.At(used[j], i)))
			}
		}
		var eig mat.EigenSym
		if !eig.Factorize(vs, true) {
			return nil, nil, fmt.Errorf("%w: eigendecomposition failed", ErrNotDefinite)
		}
		vals := eig.Values(nil)
		if !(vals[0] > 1e-12*vals[nu-1]) {
			return nil, nil, fmt.Errorf("%w: eigenvalues %.3g to %.3g", ErrNotDefinite, vals[0], vals[nu-1])
		}
		var w mat.Dense
		eig.VectorsTo(&w)
		var ws mat.Dense
		ws.CloneFrom(&w)
		for j, x := range vals {
			f := 1 / math.Sqrt(x)
			for i := 0; i < nu; i++ {
				ws.Set(i, j, ws.At(i, j)*f)
			}
		}
		vih = new(mat.Dense)
		vih.Mul(&ws, w.T())
		var t mat.Dense
		t.Mul(vih, l)
		qd.Mul(&t, vih)
	}
	q = mat.NewSymDense(nu, nil)
	for i := 0; i < nu; i++ {
		for j := i; j < nu; j++ {
			q.SetSym(i, j, 0.5*(qd.At(i, j)+qd.At(j, i)))
		}
	}
	return q, vih, nil
}

// Objective returns tr(P L Pᵀ) = ‖P A D‖²_F/M, the objective of
// SolveSMT, for a Dim×n P. It panics with mat.ErrShape if p does not have
// n columns.
func Objective(pb Pencil, p mat.Matrix) float64 {
	var y mat.Dense
	pb.MulL(&y, p.T())
	return traceProduct(p, &y)
}

// ConstraintError returns ‖P V Pᵀ − I‖_F, how far a Dim×n P is from the
// constraint of SolveSMT. It panics with mat.ErrShape if p does not have n
// columns.
func ConstraintError(pb Pencil, p mat.Matrix) float64 {
	var y mat.Dense
	pb.MulV(&y, p.T())
	var m mat.Dense
	m.Mul(p, &y)
	r, _ := m.Dims()
	for i := 0; i < r; i++ {
		m.Set(i, i, m.At(i, i)-1)
	}
	return mat.Norm(&m, 2)
}

// traceProduct returns tr(p·y) for p Dim×n and y n×Dim.
func traceProduct(p mat.Matrix, y *mat.Dense) float64 {
	r, c := p.Dims()
	var s float64
	for i := 0; i < r; i++ {
		for a := 0; a < c; a++ {
			s += p.At(i, a) * y.At(a, i)
		}
	}
	return s
}
