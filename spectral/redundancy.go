package spectral

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// RedundancySettings configures Redundancy. A zero field means its
// documented default.
type RedundancySettings struct {
	// Alpha sets the bandwidth of the regression of coordinate i,
	// h = Alpha·(Σ_{j<i} var(y_j))^(1/2), like the smoother of
	// NonRedundantSettings but about the centred coordinates. Zero means
	// 0.1; it must be >= 0.
	Alpha float64
	// Neighbours is the number of nearest neighbours (the point itself
	// left out) the regression averages over, those within 4h. Zero
	// means min(N − 1, 200).
	Neighbours int
}

// Validate reports whether the settings are usable.
func (s RedundancySettings) Validate() error {
	switch {
	case !(s.Alpha >= 0) || math.IsInf(s.Alpha, 1):
		return fmt.Errorf("spectral: redundancy alpha %v: must be > 0 (0 means 0.1)", s.Alpha)
	case s.Neighbours < 0:
		return fmt.Errorf("spectral: redundancy neighbours %d: must be >= 1 (0 means min(N-1, 200))", s.Neighbours)
	}
	return nil
}

// Redundancy measures how far each coordinate of an embedding (N points,
// one per row of y, with d coordinates) is a function of the coordinates
// before it, as in Fig. 3 of Blau and Michaeli (after Dsilva et al.
// 2015): coordinate i is regressed on coordinates 0, ..., i−1 by the
// leave-one-out Nadaraya–Watson estimator with a Gaussian kernel, and the
// normalised error of the regression is
//
//	ŷ_ai = Σ_{b≠a} K_ab y_bi / Σ_{b≠a} K_ab,   K_ab = exp(−‖y_a,<i − y_b,<i‖²/(2h²)),
//	e_i = (Σ_a (y_ai − ŷ_ai)² / Σ_a (y_ai − ȳ_i)²)^(1/2),
//
// K_ab kept for the nearest neighbours of RedundancySettings. e_i near 0
// means coordinate i is redundant (a function of the previous ones); near
// 1, unpredictable from them (noise in the estimate can push it a little
// above 1). e_0 is 1 by definition, and a constant coordinate (nothing to
// predict) gives 0.
//
// It returns one value per column, and panics if the settings are
// invalid or y has fewer than 2 rows.
func Redundancy(y mat.Matrix, s RedundancySettings) []float64 {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	yd := mat.DenseCopyOf(y)
	n, d := yd.Dims()
	if n < 2 {
		panic(fmt.Sprintf("spectral: redundancy of %d points", n))
	}
	alpha := s.Alpha
	if alpha == 0 {
		alpha = 0.1
	}
	k := s.Neighbours
	if k == 0 {
		k = 200
	}
	k = min(k, n-1)
	// Centre the columns: distances do not change, the bandwidth is
	// about the variances.
	col := make([]float64, n)
	pred := make([]float64, n)
	for j := 0; j < d; j++ {
		mat.Col(col, j, yd)
		mean := floats.Sum(col) / float64(n)
		floats.AddConst(-mean, col)
		yd.SetCol(j, col)
	}
	out := make([]float64, d)
	if d > 0 {
		out[0] = 1
	}
	for i := 1; i < d; i++ {
		prev := yd.Slice(0, n, 0, i).(*mat.Dense)
		h := bandwidth(prev, nil, alpha)
		p := nwSmoother(prev, nil, h, k, false)
		mat.Col(col, i, yd)
		p.mulVec(pred, col)
		den := floats.Dot(col, col)
		if den == 0 {
			continue
		}
		floats.Sub(pred, col)
		out[i] = math.Sqrt(floats.Dot(pred, pred) / den)
	}
	return out
}
