package feed

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers JPEG for image.Decode
	_ "image/png"  // registers PNG for image.Decode
	"io"
	"strconv"

	"github.com/nats-io/nats.go"
	"golang.org/x/image/draw"
)

// Shape is the shape of a pipeline's images.
type Shape struct {
	Width, Height int
	// Channels is 1 (gray) or 3 (RGB).
	Channels int
}

// Len is the number of bytes of a raw uint8 image of shape s.
func (s Shape) Len() int { return s.Width * s.Height * s.Channels }

func (s Shape) String() string {
	return fmt.Sprintf("%dx%dx%d", s.Width, s.Height, s.Channels)
}

// Header returns the Smtd-Shape and Smtd-Dtype headers of a raw uint8
// image of shape s.
func (s Shape) Header() nats.Header {
	h := nats.Header{}
	h.Set("Smtd-Encoding", "raw")
	h.Set("Smtd-Shape", strconv.Itoa(s.Height)+","+strconv.Itoa(s.Width)+","+strconv.Itoa(s.Channels))
	h.Set("Smtd-Dtype", "uint8")
	return h
}

// MaxPixels bounds the images Decode accepts (64 megapixels): a small
// file cannot claim a huge image and exhaust memory.
const MaxPixels = 1 << 26

// ErrTooLarge is returned for an image of more than MaxPixels pixels.
var ErrTooLarge = errors.New("feed: image larger than 64 megapixels")

// Decode reads a PNG or JPEG image after checking its size.
func Decode(r io.ReadSeeker) (image.Image, error) {
	cfg, _, err := image.DecodeConfig(r)
	if err != nil {
		return nil, err
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return nil, fmt.Errorf("%w: %dx%d", ErrTooLarge, cfg.Width, cfg.Height)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(r)
	return img, err
}

// Raw returns img as raw uint8 pixels of shape s, row-major with the
// channels interleaved: the centre of img, cut to the aspect ratio of s,
// is resized with the Catmull-Rom kernel (no resizing when the sizes
// agree), and converted to gray (ITU-R BT.601 luma, as image/color does)
// when s has one channel. dst is reused when it has the capacity.
func Raw(dst []byte, img image.Image, s Shape) []byte {
	if s.Channels != 1 && s.Channels != 3 {
		panic(fmt.Sprintf("feed: %d channels, want 1 or 3", s.Channels))
	}
	src := img.Bounds()
	if src.Dx() != s.Width || src.Dy() != s.Height {
		rgba := image.NewRGBA(image.Rect(0, 0, s.Width, s.Height))
		draw.CatmullRom.Scale(rgba, rgba.Bounds(), img, centre(src, s), draw.Src, nil)
		img = rgba
		src = rgba.Bounds()
	}
	if cap(dst) < s.Len() {
		dst = make([]byte, s.Len())
	}
	dst = dst[:s.Len()]
	i := 0
	for y := src.Min.Y; y < src.Max.Y; y++ {
		for x := src.Min.X; x < src.Max.X; x++ {
			c := img.At(x, y)
			if s.Channels == 1 {
				dst[i] = color.GrayModel.Convert(c).(color.Gray).Y
				i++
				continue
			}
			r, g, b, _ := c.RGBA()
			dst[i], dst[i+1], dst[i+2] = byte(r>>8), byte(g>>8), byte(b>>8)
			i += 3
		}
	}
	return dst
}

// centre is the largest rectangle of r's centre with the aspect ratio
// of s.
func centre(r image.Rectangle, s Shape) image.Rectangle {
	w, h := r.Dx(), r.Dy()
	// Compare w/h with s.Width/s.Height without division.
	switch a, b := w*s.Height, h*s.Width; {
	case a > b: // too wide
		cw := max(h*s.Width/s.Height, 1)
		x := r.Min.X + (w-cw)/2
		return image.Rect(x, r.Min.Y, x+cw, r.Max.Y)
	case a < b: // too tall
		ch := max(w*s.Height/s.Width, 1)
		y := r.Min.Y + (h-ch)/2
		return image.Rect(r.Min.X, y, r.Max.X, y+ch)
	}
	return r
}
