package bench

import (
	"math"

	"github.com/smtd/smtd/online"
)

// delaunay is the Delaunay triangulation of a set of points in the plane,
// the support of the local interpolation codes of the disc demonstration.
type delaunay struct {
	pts  [][2]float64
	tri  [][3]int // counter-clockwise triangles
	hull [][2]int // boundary edges: sides of exactly one triangle
}

// newDelaunay triangulates pts (at least three, not all collinear) by
// the Bowyer-Watson algorithm: each point in turn removes the triangles
// whose circumcircle contains it and fans the cavity out from it,
// starting from a triangle far larger than the points (its vertices are
// 10⁴ times the extent of the points away), whose triangles are dropped
// at the end. O(n²) for n points: meant for a few thousand at most.
func newDelaunay(pts [][2]float64) *delaunay {
	n := len(pts)
	lo, hi := pts[0], pts[0]
	for _, p := range pts {
		lo = [2]float64{min(lo[0], p[0]), min(lo[1], p[1])}
		hi = [2]float64{max(hi[0], p[0]), max(hi[1], p[1])}
	}
	c := [2]float64{(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2}
	big := 1e4 * max(hi[0]-lo[0], hi[1]-lo[1], 1e-300)
	all := append(append([][2]float64(nil), pts...),
		[2]float64{c[0] - big, c[1] - big}, [2]float64{c[0] + big, c[1] - big}, [2]float64{c[0], c[1] + big})
	tris := [][3]int{{n, n + 1, n + 2}}
	type edge struct{ a, b int }
	var cavity []edge
	var keep [][3]int
	for i := 0; i < n; i++ {
		p := all[i]
		cavity, keep = cavity[:0], keep[:0]
		for _, t := range tris {
			if inCircle(all[t[0]], all[t[1]], all[t[2]], p) {
				cavity = append(cavity, edge{t[0], t[1]}, edge{t[1], t[2]}, edge{t[2], t[0]})
			} else {
				keep = append(keep, t)
			}
		}
		tris = append(tris[:0], keep...)
		// The cavity's boundary: the edges of exactly one removed triangle
		// (an inner edge appears once in each direction).
		for j, e := range cavity {
			shared := false
			for k, f := range cavity {
				if k != j && f.a == e.b && f.b == e.a {
					shared = true
					break
				}
			}
			if !shared {
				tris = append(tris, [3]int{e.a, e.b, i})
			}
		}
	}
	d := &delaunay{pts: pts}
	for _, t := range tris {
		if t[0] < n && t[1] < n && t[2] < n {
			d.tri = append(d.tri, t)
		}
	}
	count := map[[2]int]int{}
	for _, t := range d.tri {
		for k := 0; k < 3; k++ {
			a, b := t[k], t[(k+1)%3]
			count[[2]int{min(a, b), max(a, b)}]++
		}
	}
	for _, t := range d.tri {
		for k := 0; k < 3; k++ {
			a, b := t[k], t[(k+1)%3]
			if count[[2]int{min(a, b), max(a, b)}] == 1 {
				d.hull = append(d.hull, [2]int{a, b})
			}
		}
	}
	return d
}

// orient returns twice the signed area of the triangle abc, positive when
// it is counter-clockwise.
func orient(a, b, c [2]float64) float64 {
	return (b[0]-a[0])*(c[1]-a[1]) - (b[1]-a[1])*(c[0]-a[0])
}

// inCircle reports whether p lies strictly inside the circumcircle of the
// counter-clockwise triangle abc.
func inCircle(a, b, c, p [2]float64) bool {
	ax, ay := a[0]-p[0], a[1]-p[1]
	bx, by := b[0]-p[0], b[1]-p[1]
	cx, cy := c[0]-p[0], c[1]-p[1]
	det := (ax*ax+ay*ay)*(bx*cy-cx*by) - (bx*bx+by*by)*(ax*cy-cx*ay) + (cx*cx+cy*cy)*(ax*by-bx*ay)
	return det > 0
}

// code appends to c the local interpolation code of x (one more row):
// the barycentric coordinates of x in the triangle that contains it, the
// piecewise-linear "hat functions" of the triangulation, so that
//
//	x = Σ_j α_j φ_j,   Σ_j α_j = 1,   α ≥ 0,   at most three α_j > 0,
//
// continuous in x and exact on affine functions of the landmarks. A point
// outside the triangulation (outside the convex hull of the landmarks) is
// coded by its nearest point on the boundary, an edge (two landmarks) or
// a corner (one). Zero coordinates are left out; the landmarks of a code
// are increasing. It reports whether x was inside.
func (d *delaunay) code(c *online.SparseCodes, x [2]float64) (inside bool) {
	var atoms [3]int
	var w [3]float64
	m := 0
	for _, t := range d.tri {
		a, b, cc := d.pts[t[0]], d.pts[t[1]], d.pts[t[2]]
		area := orient(a, b, cc)
		w0, w1, w2 := orient(x, b, cc)/area, orient(a, x, cc)/area, orient(a, b, x)/area
		if w0 >= 0 && w1 >= 0 && w2 >= 0 {
			atoms, w, m = t, [3]float64{w0, w1, w2}, 3
			inside = true
			break
		}
	}
	if !inside {
		best := math.Inf(1)
		for _, e := range d.hull {
			a, b := d.pts[e[0]], d.pts[e[1]]
			dx, dy := b[0]-a[0], b[1]-a[1]
			s := ((x[0]-a[0])*dx + (x[1]-a[1])*dy) / (dx*dx + dy*dy)
			s = min(max(s, 0), 1)
			px, py := a[0]+s*dx-x[0], a[1]+s*dy-x[1]
			if dist := px*px + py*py; dist < best {
				best = dist
				atoms, w, m = [3]int{e[0], e[1]}, [3]float64{1 - s, s}, 2
			}
		}
	}
	// Renormalise (rounding), drop zeros, sort by landmark.
	sum := 0.0
	for k := 0; k < m; k++ {
		sum += w[k]
	}
	start := len(c.Index)
	for k := 0; k < m; k++ {
		if w[k] <= 0 {
			continue
		}
		c.Index = append(c.Index, atoms[k])
		c.Cos = append(c.Cos, w[k]/sum)
		for p := len(c.Index) - 1; p > start && c.Index[p] < c.Index[p-1]; p-- {
			c.Index[p], c.Index[p-1] = c.Index[p-1], c.Index[p]
			c.Cos[p], c.Cos[p-1] = c.Cos[p-1], c.Cos[p]
		}
	}
	c.Rows++
	c.Ptr = append(c.Ptr, len(c.Index))
	return inside
}
