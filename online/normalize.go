package online

import (
	"math"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// NormalizeRows scales each row of x to unit L2 norm in place, the
// spherical projection of smt-minimalistic App. D (Algorithm 1, lines
// 2-6), and flags blank rows.
//
// A row whose norm is below minNorm, zero or NaN is blank: it is set to
// exactly zero and flagged true in the returned slice (false otherwise).
// A blank patch carries no direction worth learning, and normalising it
// would blow a faint smudge or rounding noise up to a unit vector that
// grabs atoms. This is deliberate and common: on MNIST (pixels in [0, 1],
// 6×6 patches) 31.7% of the raw patches are pure background; after the
// contextual mean (d = 1) 20.4% are still exactly zero, their whole
// neighbourhood being background; after whitening with λ = 0.1, 22.6%
// have a norm below 0.1. Callers leave blank rows out of learning
// (KMeans.Learn and Whitener.Observe take the flags) and give them an
// all-zero code (KMeans.Assign and KMeans.CodesGQ recognise zero rows).
// minNorm is in the units of x, so it depends on the whitening.
//
// The flags are written into blank if it has one element per row of x;
// otherwise a new slice is allocated.
func NormalizeRows(x *mat.Dense, minNorm float64, blank []bool) []bool {
	r, _ := x.Dims()
	if len(blank) != r {
		blank = make([]bool, r)
	}
	raw := x.RawMatrix()
	for i := 0; i < r; i++ {
		row := raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols]
		// A plain sum of squares: whitened patches are far from float64's
		// overflow and underflow, and BLAS's scaled nrm2 costs as much as
		// the rest of the normalisation several times over.
		norm := math.Sqrt(floats.Dot(row, row))
		if norm == 0 || norm < minNorm || math.IsNaN(norm) {
			clear(row)
			blank[i] = true
			continue
		}
		blank[i] = false
		inv := 1 / norm
		for k := range row {
			row[k] *= inv
		}
	}
	return blank
}
