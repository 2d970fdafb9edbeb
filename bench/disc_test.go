package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// convexHullArea returns the area of the convex hull of pts (Andrew's
// monotone chain).
func convexHullArea(pts [][2]float64) float64 {
	p := append([][2]float64(nil), pts...)
	sort.Slice(p, func(i, j int) bool { return p[i][0] < p[j][0] || (p[i][0] == p[j][0] && p[i][1] < p[j][1]) })
	var h [][2]float64
	for pass := 0; pass < 2; pass++ {
		start := len(h)
		for _, q := range p {
			for len(h) >= start+2 && orient(h[len(h)-2], h[len(h)-1], q) <= 0 {
				h = h[:len(h)-1]
			}
			h = append(h, q)
		}
		h = h[:len(h)-1]
		for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
			p[i], p[j] = p[j], p[i]
		}
	}
	var a float64
	for i := range h {
		a += orient([2]float64{}, h[i], h[(i+1)%len(h)])
	}
	return a / 2
}

func TestDelaunay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spiral bool
	}{{"random", false}, {"spiral", true}} {
		t.Run(tc.name, func(t *testing.T) {
			pts := discLandmarks(200, tc.spiral, rand.New(rand.NewPCG(1, 2)))
			d := newDelaunay(pts)
			var area float64
			for _, tr := range d.tri {
				a, b, c := pts[tr[0]], pts[tr[1]], pts[tr[2]]
				o := orient(a, b, c)
				if o <= 0 {
					t.Fatalf("triangle %v is not counter-clockwise", tr)
				}
				area += o / 2
				for j, p := range pts {
					if j != tr[0] && j != tr[1] && j != tr[2] && inCircle(a, b, c, p) {
						t.Fatalf("point %d inside the circumcircle of %v", j, tr)
					}
				}
			}
			if hull := convexHullArea(pts); math.Abs(area-hull) > 1e-9*hull {
				t.Errorf("triangles cover %v, convex hull %v", area, hull)
			}
			// Euler: a triangulation of n points with h on the hull has
			// 2n − 2 − h triangles.
			if want := 2*len(pts) - 2 - len(d.hull); len(d.tri) != want {
				t.Errorf("%d triangles, %d hull edges: want %d triangles", len(d.tri), len(d.hull), want)
			}
		})
	}
}

func TestDelaunayCode(t *testing.T) {
	pts := discLandmarks(300, false, rand.New(rand.NewPCG(3, 4)))
	d := newDelaunay(pts)
	rng := rand.New(rand.NewPCG(5, 6))
	c := newCodes(len(pts))
	for i := 0; i < 1000; i++ {
		r, th := 0.9*math.Sqrt(rng.Float64()), 2*math.Pi*rng.Float64()
		x := [2]float64{r * math.Cos(th), r * math.Sin(th)}
		if !d.code(c, x) {
			t.Fatalf("point %v of radius %.2f outside the triangulation", x, r)
		}
		atoms, w := c.Row(c.Rows - 1)
		var px, py, sum float64
		for k, a := range atoms {
			if w[k] <= 0 || (k > 0 && a <= atoms[k-1]) || len(atoms) > 3 {
				t.Fatalf("code %v %v", atoms, w)
			}
			px += w[k] * pts[a][0]
			py += w[k] * pts[a][1]
			sum += w[k]
		}
		if math.Abs(px-x[0]) > 1e-12 || math.Abs(py-x[1]) > 1e-12 || math.Abs(sum-1) > 1e-12 {
			t.Fatalf("Φα = (%v, %v), Σα = %v; want %v, 1", px, py, sum, x)
		}
	}
	// Far outside: the nearest point of the hull, a corner here.
	far := [2]float64{40, 0}
	if d.code(c, far) {
		t.Fatal("far point inside")
	}
	atoms, _ := c.Row(c.Rows - 1)
	best, bestD := -1, math.Inf(1)
	for j, p := range pts {
		if dd := math.Hypot(p[0]-far[0], p[1]-far[1]); dd < bestD {
			best, bestD = j, dd
		}
	}
	if len(atoms) != 1 || atoms[0] != best {
		t.Errorf("far point coded on %v, want the nearest landmark %d", atoms, best)
	}
}

func TestDelaunayCodeContinuous(t *testing.T) {
	pts := discLandmarks(300, false, rand.New(rand.NewPCG(7, 8)))
	d := newDelaunay(pts)
	// A line from outside the hull across the disc and out again, in
	// small steps: the code moves by O(step/spacing), it never jumps.
	const steps = 5000
	c := newCodes(len(pts))
	for i := 0; i < steps; i++ {
		s := float64(i) / steps
		d.code(c, [2]float64{-1.2 + 2.4*s, 0.3 - 0.4*s})
	}
	step := math.Hypot(2.4, 0.4) / steps
	dense := func(i int) []float64 {
		v := make([]float64, len(pts))
		atoms, w := c.Row(i)
		for k, a := range atoms {
			v[a] = w[k]
		}
		return v
	}
	prev, worst := dense(0), 0.0
	for i := 1; i < steps; i++ {
		cur := dense(i)
		var l1 float64
		for a := range cur {
			l1 += math.Abs(cur[a] - prev[a])
		}
		worst = max(worst, l1/step)
		prev = cur
	}
	// A jump would show as about 1/step ≈ 2000 per unit distance; the
	// hat functions of random landmarks have slopes of a few hundred.
	if worst > 1000 {
		t.Errorf("code changes by %.0f per unit distance", worst)
	}
}

// TestDiscSmall runs the benchmark at a small size and checks its bars:
// rows 2 and 3 are the landmark coordinates and the SGD reaches the
// closed form's objective.
func TestDiscSmall(t *testing.T) {
	args := []string{"-landmarks", "80", "-sequences", "1500", "-dim", "6", "-epochs", "60", "-batch", "1024", "-zernike-order", "1"}
	got := figures(t, Disc, args...)
	for _, name := range []string{"disc_closed_row2_r2", "disc_closed_row3_r2", "disc_closed_xy_r2", "disc_sgd_xy_r2", "disc_closed_zernike_n1_cos1_corr"} {
		if got[name] < 0.95 {
			t.Errorf("%s = %v, want >= 0.95", name, got[name])
		}
	}
	if r := got["disc_sgd_objective_ratio"]; !(r >= 0.999 && r < 1.1) {
		t.Errorf("SGD objective %v times the closed form's", r)
	}
	if got["disc_closed_row01_zernike_n"] != 0 || got["disc_closed_row01_zernike_corr"] < 0.999 {
		t.Errorf("row 1 is not the constant: order %v, correlation %v", got["disc_closed_row01_zernike_n"], got["disc_closed_row01_zernike_corr"])
	}
}

func TestDiscFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-layout", "square"},
		{"-speed-min", "0"},
		{"-dim", "2"},
		{"-rate", "-1"},
		{"extra"},
	} {
		if err := Disc(context.Background(), &strings.Builder{}, args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
