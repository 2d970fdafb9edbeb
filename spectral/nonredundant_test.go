package spectral_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"

	"github.com/smtd/smtd/spectral"
)

// gridPencil is an SMT pencil whose atoms sit on a w×h grid (plus some
// never used): V = 2·I on the grid, L its 4-neighbour graph Laplacian,
// whose eigenvectors are cos(πk1(x+½)/w)·cos(πk2(y+½)/h), the
// discrete strip of Fig. 2.
type gridPencil struct {
	w, h, unused int
	l            *mat.SymDense
}

func newGridPencil(w, h, unused int) *gridPencil {
	n := w*h + unused
	l := mat.NewSymDense(n, nil)
	edge := func(a, b int) {
		l.SetSym(a, b, l.At(a, b)-1)
		l.SetSym(a, a, l.At(a, a)+1)
		l.SetSym(b, b, l.At(b, b)+1)
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			if x+1 < w {
				edge(y*w+x, y*w+x+1)
			}
			if y+1 < h {
				edge(y*w+x, (y+1)*w+x)
			}
		}
	}
	return &gridPencil{w: w, h: h, unused: unused, l: l}
}

func (g *gridPencil) Size() int       { return g.w*g.h + g.unused }
func (g *gridPencil) DiagonalV() bool { return true }
func (g *gridPencil) DiagV(dst []float64) []float64 {
	if len(dst) != g.Size() {
		dst = make([]float64, g.Size())
	}
	for a := range dst {
		dst[a] = 0
		if a < g.w*g.h {
			dst[a] = 2
		}
	}
	return dst
}
func (g *gridPencil) MulV(dst *mat.Dense, x mat.Matrix) {
	r, c := x.Dims()
	if dst.IsEmpty() {
		dst.ReuseAs(r, c)
	}
	v := g.DiagV(nil)
	for a := 0; a < r; a++ {
		for j := 0; j < c; j++ {
			dst.Set(a, j, v[a]*x.At(a, j))
		}
	}
}
func (g *gridPencil) MulL(dst *mat.Dense, x mat.Matrix) { dst.Mul(g.l, x) }

// TestSolveSMTNonRedundantGrid: on a 28×8 grid of atoms (L1 = 3.5·L2) the
// second row of the standard SMT solution is a function of the first
// (both cosines along x), the non-redundant second row follows y, and
// both satisfy P V Pᵀ = I.
func TestSolveSMTNonRedundantGrid(t *testing.T) {
	g := newGridPencil(28, 8, 3)
	s := spectral.Settings{Dim: 2, Drop: 1}
	var std, nr mat.Dense
	if _, err := spectral.SolveSMT(&std, g, s, rand.NewPCG(1, 2)); err != nil {
		t.Fatal(err)
	}
	res, err := spectral.SolveSMTNonRedundant(&nr, g, s, spectral.NonRedundantSettings{}, rand.NewPCG(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	n := g.w * g.h
	ys := make([]float64, n)
	for a := range ys {
		ys[a] = float64(a / g.w)
	}
	row := func(p *mat.Dense, i int) []float64 { return mat.Row(nil, i, p)[:n] }
	if c := stat.Correlation(row(&std, 0), row(&nr, 0), nil); c < 0.9999 {
		t.Errorf("first rows differ: correlation %.6f", c)
	}
	if r := math.Abs(spearman(row(&std, 1), ys)); r > 0.1 {
		t.Errorf("standard row 2: |Spearman| with y %.3f, want about 0", r)
	}
	if r := math.Abs(spearman(row(&nr, 1), ys)); r < 0.95 {
		t.Errorf("non-redundant row 2: |Spearman| with y %.3f, want >= 0.95", r)
	}
	if e := spectral.ConstraintError(g, &nr); e > 1e-9 {
		t.Errorf("‖P V Pᵀ − I‖ = %.3g", e)
	}
	for a := n; a < g.Size(); a++ {
		if nr.At(0, a) != 0 || nr.At(1, a) != 0 {
			t.Errorf("unused atom %d has a nonzero column", a)
		}
	}
	lam := 2 - 2*math.Cos(math.Pi/float64(g.h)) // cos(πy/h) on the grid, V = 2I
	if !scalar.EqualWithinAbs(res.Values[1], lam/2, 1e-3) {
		t.Errorf("row 2 objective %.6f, want ≈ %.6f", res.Values[1], lam/2)
	}
	if len(res.Dropped) != 1 || math.Abs(res.Dropped[0]) > 1e-9 {
		t.Errorf("dropped %v, want the constant's 0", res.Dropped)
	}
	if obj := spectral.Objective(g, &nr); !scalar.EqualWithinRel(obj, res.Values[0]+res.Values[1], 1e-9) {
		t.Errorf("objective %.9g, values sum to %.9g", obj, res.Values[0]+res.Values[1])
	}
}

func TestSolveSMTNonRedundantErrors(t *testing.T) {
	g := newGridPencil(3, 2, 4)
	var p mat.Dense
	_, err := spectral.SolveSMTNonRedundant(&p, g, spectral.Settings{Dim: 6, Drop: 1}, spectral.NonRedundantSettings{}, nil)
	if !errors.Is(err, spectral.ErrTooFewAtoms) {
		t.Errorf("7 eigenvectors of 6 atoms: %v, want ErrTooFewAtoms", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a wrong dst shape did not panic")
		}
	}()
	bad := mat.NewDense(3, 3, nil)
	spectral.SolveSMTNonRedundant(bad, g, spectral.Settings{Dim: 2}, spectral.NonRedundantSettings{}, nil)
}

// TestNonRedundantNoRoom: when the smoother's singular vectors span
// every remaining direction, the solve reports ErrNoRoom.
func TestNonRedundantNoRoom(t *testing.T) {
	g := newGridPencil(4, 1, 0)
	var p mat.Dense
	// Four atoms on a path, one dropped, the first row a monotone
	// function: a smoother with a tiny bandwidth predicts everything.
	_, err := spectral.SolveSMTNonRedundant(&p, g, spectral.Settings{Dim: 3, Drop: 1}, spectral.NonRedundantSettings{Alpha: 1e-6}, nil)
	if !errors.Is(err, spectral.ErrNoRoom) {
		t.Errorf("err = %v, want ErrNoRoom", err)
	}
}
