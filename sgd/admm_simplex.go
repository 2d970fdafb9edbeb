package sgd

import (
	"math"
	"slices"
)

// ProjectSimplex writes to dst the Euclidean projection of v onto the
// probability simplex {z : z_j >= 0, Σ_j z_j = 1}, the operator P_s of
// eq. 13 (sparsemax, Martins and Astudillo 2016, Algorithm 1):
//
//	u = v sorted in decreasing order
//	k = max{ j : u_j − (Σ_{r<=j} u_r − 1)/j > 0 }
//	τ = (Σ_{r<=k} u_r − 1)/k
//	dst_j = max(v_j − τ, 0)
//
// The result is exact up to rounding and usually sparse: entries below
// the threshold τ are exactly zero. dst and v may be the same slice. It
// panics if their lengths differ or are zero.
func ProjectSimplex(dst, v []float64) {
	admmProjectSimplex(dst, v, make([]float64, len(v)))
}

// admmProjectSimplex is ProjectSimplex with a workspace of len(v).
func admmProjectSimplex(dst, v, sorted []float64) {
	if len(dst) != len(v) || len(v) == 0 {
		panic("sgd: ProjectSimplex: lengths differ or are zero")
	}
	sorted = sorted[:len(v)]
	copy(sorted, v)
	slices.Sort(sorted) // increasing; walk from the end
	var sum, tau float64
	for j := 1; j <= len(sorted); j++ {
		u := sorted[len(sorted)-j]
		sum += u
		if t := (sum - 1) / float64(j); u > t {
			tau = t
		} else {
			break
		}
	}
	for j, x := range v {
		dst[j] = math.Max(x-tau, 0)
	}
}
