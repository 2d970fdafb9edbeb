package dataset

import (
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // LoadGray decodes JPEG
	_ "image/png"  // and PNG
	"math"
	"math/rand/v2"
	"os"
)

// LoadGray decodes the PNG or JPEG file at path into an 8-bit gray image whose
// bounds start at (0, 0). A gray file is returned as decoded; colour pixels
// are converted by color.GrayModel, the ITU-R BT.601 luma
//
//	Y = 0.299 R + 0.587 G + 0.114 B
//
// computed on 16-bit values and rounded to 8 bits (alpha is ignored, as the
// photographs are opaque).
func LoadGray(path string) (*image.Gray, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return toGray(img), nil
}

// toGray converts img to an *image.Gray with bounds at the origin.
func toGray(img image.Image) *image.Gray {
	b := img.Bounds()
	if g, ok := img.(*image.Gray); ok && b.Min == (image.Point{}) {
		return g
	}
	g := image.NewGray(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		row := g.Pix[y*g.Stride : y*g.Stride+b.Dx()]
		for x := range row {
			row[x] = color.GrayModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.Gray).Y
		}
	}
	return g
}

// Motion constants of Pan; see Pan's doc comment for the model.
const (
	panWindowFraction = 0.25 // window side over the photo's shorter side at scale s0
	panSpeed          = 0.75 // typical speed along each axis, output pixels per frame
	panMinPeriod      = 50   // shortest period of any pan component, frames
	panZoom           = 0.2  // amplitude Z of the log-scale
	panRotation       = 0.1  // amplitude Θ of the rotation angle, radians (5.7°)
	panSlowMin        = 200  // zoom and rotation periods are uniform in
	panSlowMax        = 400  // [panSlowMin, panSlowMax] frames
	panComponents     = 3    // sinusoids per pan axis
)

// Pan returns frames frames of width x height pixels, a natural video made by
// moving a window smoothly over img: the camera pans along a smooth random
// path, zooms slowly in and out and rotates a little. All randomness comes
// from src; the same src state gives the same frames.
//
// Motion model. Let the photo be W x H pixels and t = 0, 1, ..., frames-1.
// The window is centred at c(t), rotated by θ(t) and has scale s(t) source
// pixels per output pixel:
//
//	s0   = ¼·min(W, H) / max(width, height)           (window spans a quarter of the photo)
//	s(t) = s0·exp(Z·sin(ω_s·t + φ_s)),                 Z = 0.2
//	θ(t) = Θ·sin(ω_θ·t + φ_θ),                         Θ = 0.1 rad
//	c(t) = (W/2, H/2) + (R_x·u_x(t), R_y·u_y(t))
//	u(t) = Σ_{k=1..3} a_k·sin(ω_k·t + φ_k)             per axis, a_k ≥ 0, Σ a_k = 1
//	R    = (W, H)/2 - s0·e^Z·½·√(width² + height²) - 1  (clamped at 0)
//
// so that the rotated window always stays inside the photo. All phases φ are
// uniform on [0, 2π); the zoom and rotation periods 2π/ω are uniform on
// [200, 400] frames; the pan frequencies are ω_k = (0.75·s0/R)·U[0.5, 1.5]
// (capped at a period of 50 frames), so that along each axis the centre moves
// at most 1.125·s0 source pixels per frame, about one output pixel, and
// consecutive frames overlap almost entirely.
//
// Sampling. Output pixel (i, j) (row, column) sits at d = (j+½-width/2,
// i+½-height/2) from the window centre and shows the photo at
//
//	p = c(t) + s(t)·Rot(θ(t))·d
//
// (pixel (x, y) of the photo covers [x, x+1) x [y, y+1)). Its value is the
// mean of n x n bilinear samples spread evenly over the output pixel's
// footprint, n = ⌈s(t)⌉, a box prefilter that keeps the downsampled video
// free of aliasing; reads beyond the border repeat the edge pixel; values
// are rounded to the nearest integer.
//
// Pan panics if width, height or frames is not positive or img is empty.
func Pan(img *image.Gray, width, height, frames int, src rand.Source) []*image.Gray {
	if width <= 0 || height <= 0 || frames <= 0 {
		panic(fmt.Sprintf("dataset: Pan: bad video size %dx%d, %d frames", width, height, frames))
	}
	b := img.Bounds()
	W, H := float64(b.Dx()), float64(b.Dy())
	if b.Empty() {
		panic("dataset: Pan: empty image")
	}
	rng := rand.New(src)
	phase := func() float64 { return 2 * math.Pi * rng.Float64() }
	slow := func() float64 { return 2 * math.Pi / (panSlowMin + (panSlowMax-panSlowMin)*rng.Float64()) }

	s0 := panWindowFraction * min(W, H) / float64(max(width, height))
	wz, pz := slow(), phase()
	wr, pr := slow(), phase()
	reach := s0*math.Exp(panZoom)*0.5*math.Hypot(float64(width), float64(height)) + 1
	ax := newPanAxis(rng, W/2, max(W/2-reach, 0), s0)
	ay := newPanAxis(rng, H/2, max(H/2-reach, 0), s0)

	out := make([]*image.Gray, frames)
	for t := range frames {
		ft := float64(t)
		s := s0 * math.Exp(panZoom*math.Sin(wz*ft+pz))
		theta := panRotation * math.Sin(wr*ft+pr)
		out[t] = renderWindow(img, width, height, ax.at(ft), ay.at(ft), s, theta)
	}
	return out
}

// panAxis is one coordinate of the window centre: mid + r·Σ a_k sin(ω_k t + φ_k).
type panAxis struct {
	mid, r     float64
	a, w, phik [panComponents]float64
}

func newPanAxis(rng *rand.Rand, mid, r, s0 float64) panAxis {
	ax := panAxis{mid: mid, r: r}
	var sum float64
	for k := range panComponents {
		ax.a[k] = rng.Float64() + 1e-3
		sum += ax.a[k]
		omega := math.Inf(1)
		if r > 0 {
			omega = panSpeed * s0 / r * (0.5 + rng.Float64())
		} else {
			rng.Float64() // keep the draw count independent of r
		}
		ax.w[k] = min(omega, 2*math.Pi/panMinPeriod)
		ax.phik[k] = 2 * math.Pi * rng.Float64()
	}
	for k := range ax.a {
		ax.a[k] /= sum
	}
	return ax
}

func (ax *panAxis) at(t float64) float64 {
	var u float64
	for k := range panComponents {
		u += ax.a[k] * math.Sin(ax.w[k]*t+ax.phik[k])
	}
	return ax.mid + ax.r*u
}

// renderWindow samples the window centred at (cx, cy) with scale s and
// rotation theta into a new width x height image (see Pan).
func renderWindow(img *image.Gray, width, height int, cx, cy, s, theta float64) *image.Gray {
	dst := image.NewGray(image.Rect(0, 0, width, height))
	n := max(1, int(math.Ceil(s)))
	cos, sin := s*math.Cos(theta), s*math.Sin(theta)
	inv := 1 / float64(n*n)
	for i := range height {
		for j := range width {
			var sum float64
			for a := range n {
				dy := float64(i) + (float64(a)+0.5)/float64(n) - float64(height)/2
				for bb := range n {
					dx := float64(j) + (float64(bb)+0.5)/float64(n) - float64(width)/2
					sum += bilinear(img, cx+cos*dx-sin*dy, cy+sin*dx+cos*dy)
				}
			}
			dst.Pix[i*dst.Stride+j] = uint8(math.Round(min(max(sum*inv, 0), 255)))
		}
	}
	return dst
}

// bilinear interpolates img at continuous position (x, y), where pixel (k, l)
// of the image (relative to its bounds) has its centre at (k+½, l+½). Reads
// beyond the border repeat the edge.
func bilinear(img *image.Gray, x, y float64) float64 {
	b := img.Bounds()
	x -= 0.5
	y -= 0.5
	x0, y0 := math.Floor(x), math.Floor(y)
	fx, fy := x-x0, y-y0
	clampX := func(v float64) int { return min(max(int(v), 0), b.Dx()-1) }
	clampY := func(v float64) int { return min(max(int(v), 0), b.Dy()-1) }
	xa, xb := clampX(x0), clampX(x0+1)
	ya, yb := clampY(y0), clampY(y0+1)
	row0 := img.Pix[ya*img.Stride:]
	row1 := img.Pix[yb*img.Stride:]
	top := float64(row0[xa])*(1-fx) + float64(row0[xb])*fx
	bot := float64(row1[xa])*(1-fx) + float64(row1[xb])*fx
	return top*(1-fy) + bot*fy
}
