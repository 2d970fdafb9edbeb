// Package finite finds NaN and ±Inf in float64 slices: the health checks
// of the learners run it over every parameter after each minibatch, so it
// is written for speed on the common case, a slice that is all finite.
package finite

import "math"

// Index returns the index of the first NaN or ±Inf of s, or −1 if every
// element is finite.
//
// It first sums v·0 over s in four independent chains: the product is ±0
// for a finite v and NaN for NaN and ±Inf, so the sums stay zero exactly
// when every element is finite. Only when they do not does it test the
// elements one by one, to find the first. On a finite s that is about
// five times faster than testing each element with math.IsNaN and
// math.IsInf.
func Index(s []float64) int {
	var a0, a1, a2, a3 float64
	i := 0
	for ; i+4 <= len(s); i += 4 {
		c := s[i : i+4 : i+4]
		a0 += c[0] * 0
		a1 += c[1] * 0
		a2 += c[2] * 0
		a3 += c[3] * 0
	}
	for ; i < len(s); i++ {
		a0 += s[i] * 0
	}
	if (a0+a1)+(a2+a3) == 0 {
		return -1
	}
	for i, v := range s {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return i
		}
	}
	return -1
}

// All reports whether every element of s is finite.
func All(s []float64) bool { return Index(s) < 0 }

// NonNegative returns the index of the first element of s that is NaN,
// ±Inf or negative, or −1 if there is none, and whether that element is
// finite (a negative number): the check of a vector of counts or
// weights.
func NonNegative(s []float64) (i int, isFinite bool) {
	bad := Index(s)
	before := s
	if bad >= 0 {
		before = s[:bad]
	}
	for i, v := range before {
		if v < 0 {
			return i, true
		}
	}
	return bad, false
}
