package feed

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"io"
	"strconv"
	"strings"
)

// Y4M reads the luma (Y) plane of each frame of a YUV4MPEG2 stream, the
// uncompressed format of ffmpeg's yuv4mpegpipe muxer and of mjpegtools:
// a header line "YUV4MPEG2 W<width> H<height> [F.. I.. A.. C<colour space> X..]",
// then frames, each a line "FRAME [params]" and the planes Y, then Cb and
// Cr (subsampled as the colour space says; none for mono). Only 8-bit
// colour spaces are read.
type Y4M struct {
	r             *bufio.Reader
	width, height int
	chroma        int // bytes of Cb and Cr after each Y plane
	frame         []byte
	n             int
}

// ErrY4M is returned for a stream that is not YUV4MPEG2 or that this
// reader does not handle.
var ErrY4M = errors.New("feed: bad YUV4MPEG2 stream")

// maxHeaderLine bounds the header and frame lines of a Y4M stream.
const maxHeaderLine = 4096

// NewY4M reads the stream header from r.
func NewY4M(r io.Reader) (*Y4M, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	line, err := readLine(br)
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrY4M, err)
	}
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "YUV4MPEG2" {
		return nil, fmt.Errorf("%w: no YUV4MPEG2 signature", ErrY4M)
	}
	y := &Y4M{r: br}
	cs := "420jpeg"
	for _, f := range fields[1:] {
		switch f[0] {
		case 'W', 'H':
			n, err := strconv.Atoi(f[1:])
			if err != nil || n < 1 || n > 1<<15 {
				return nil, fmt.Errorf("%w: header field %q", ErrY4M, f)
			}
			if f[0] == 'W' {
				y.width = n
			} else {
				y.height = n
			}
		case 'C':
			cs = f[1:]
		}
	}
	if y.width == 0 || y.height == 0 {
		return nil, fmt.Errorf("%w: header without W and H", ErrY4M)
	}
	if int64(y.width)*int64(y.height) > MaxPixels {
		return nil, fmt.Errorf("%w: %dx%d frames", ErrTooLarge, y.width, y.height)
	}
	cw, ch := (y.width+1)/2, (y.height+1)/2
	switch cs {
	case "420jpeg", "420paldv", "420mpeg2", "420":
		y.chroma = 2 * cw * ch
	case "422":
		y.chroma = 2 * cw * y.height
	case "444":
		y.chroma = 2 * y.width * y.height
	case "444alpha":
		y.chroma = 3 * y.width * y.height
	case "mono":
	default:
		return nil, fmt.Errorf("%w: colour space %q (want 8-bit: 420jpeg, 420paldv, 420mpeg2, 420, 422, 444, 444alpha or mono; ffmpeg: -pix_fmt gray or yuv420p)", ErrY4M, cs)
	}
	y.frame = make([]byte, y.width*y.height+y.chroma)
	return y, nil
}

// Size returns the frames' width and height.
func (y *Y4M) Size() (width, height int) { return y.width, y.height }

// Next returns the luma plane of the next frame, valid until the next
// call, or io.EOF after the last frame.
func (y *Y4M) Next() (*image.Gray, error) {
	line, err := readLine(y.r)
	if err == io.EOF && line == "" {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("%w: frame %d: %v", ErrY4M, y.n, err)
	}
	if line != "FRAME" && !strings.HasPrefix(line, "FRAME ") {
		return nil, fmt.Errorf("%w: frame %d: want a FRAME marker, got %q", ErrY4M, y.n, truncate(line))
	}
	if _, err := io.ReadFull(y.r, y.frame); err != nil {
		return nil, fmt.Errorf("%w: frame %d: %v", ErrY4M, y.n, err)
	}
	y.n++
	return &image.Gray{Pix: y.frame[:y.width*y.height], Stride: y.width, Rect: image.Rect(0, 0, y.width, y.height)}, nil
}

// readLine reads a line of at most maxHeaderLine bytes, without its "\n".
func readLine(r *bufio.Reader) (string, error) {
	var b bytes.Buffer
	for {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF && b.Len() > 0 {
				err = io.ErrUnexpectedEOF
			}
			return b.String(), err
		}
		if c == '\n' {
			return b.String(), nil
		}
		if b.Len() == maxHeaderLine {
			return "", fmt.Errorf("line longer than %d bytes", maxHeaderLine)
		}
		b.WriteByte(c)
	}
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
