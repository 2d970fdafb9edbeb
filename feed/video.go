package feed

import (
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// StreamName is the default Smtd-Stream of a video read from path: its
// base name without extension ("stdin" for "-").
func StreamName(path string) string {
	if path == "-" || path == "" {
		return "stdin"
	}
	base := filepath.Base(filepath.Clean(path))
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

// frameItem is frame i of stream as a raw uint8 image of shape s, with
// Smtd-Stream and Smtd-Frame. Its Nats-Msg-Id is made of the stream and
// the frame index, which identify a frame to the daemon as well.
func frameItem(pipeline, stream string, s Shape, i uint64, img image.Image) Item {
	h := s.Header()
	h.Set("Smtd-Stream", stream)
	h.Set("Smtd-Frame", strconv.FormatUint(i, 10))
	id := msgID(pipeline, []byte("frame"), []byte(stream), []byte(strconv.FormatUint(i, 10)))
	return newItem(id, stream+" frame "+strconv.FormatUint(i, 10), h, Raw(nil, img, s))
}

// Y4MFrames returns the frames of a YUV4MPEG2 stream (see Y4M) as frames
// 0, 1, 2, … of the video stream named stream: their luma planes, resized
// to shape s when their size differs.
func Y4MFrames(pipeline string, s Shape, r io.Reader, stream string) (Source, error) {
	y, err := NewY4M(r)
	if err != nil {
		return Source{}, err
	}
	seq := func(yield func(Item, error) bool) {
		for i := uint64(0); ; i++ {
			img, err := y.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(Item{Name: stream + " frame " + strconv.FormatUint(i, 10)}, err)
				return
			}
			if !yield(frameItem(pipeline, stream, s, i, img), nil) {
				return
			}
		}
	}
	return Source{Items: seq}, nil
}

// ErrRawSize is returned for a raw frame size that is not WxH.
var ErrRawSize = errors.New("feed: raw frame size must be WIDTHxHEIGHT")

// ParseSize reads "WIDTHxHEIGHT".
func ParseSize(s string) (width, height int, err error) {
	ws, hs, ok := strings.Cut(s, "x")
	if !ok {
		return 0, 0, fmt.Errorf("%w, got %q", ErrRawSize, s)
	}
	width, err1 := strconv.Atoi(ws)
	height, err2 := strconv.Atoi(hs)
	if err1 != nil || err2 != nil || width < 1 || height < 1 || int64(width)*int64(height) > MaxPixels {
		return 0, 0, fmt.Errorf("%w, got %q", ErrRawSize, s)
	}
	return width, height, nil
}

// RawFrames returns consecutive 8-bit gray frames of width x height
// pixels read from r (as ffmpeg -f rawvideo -pix_fmt gray writes them) as
// frames 0, 1, 2, … of stream, resized to shape s when their size
// differs. A partial last frame is an error.
func RawFrames(pipeline string, s Shape, r io.Reader, width, height int, stream string) Source {
	seq := func(yield func(Item, error) bool) {
		for i := uint64(0); ; i++ {
			img := image.NewGray(image.Rect(0, 0, width, height))
			n, err := io.ReadFull(r, img.Pix)
			if err == io.EOF {
				return
			}
			name := stream + " frame " + strconv.FormatUint(i, 10)
			if err != nil {
				yield(Item{Name: name}, fmt.Errorf("%s: %d of %d bytes: %w", name, n, len(img.Pix), err))
				return
			}
			if !yield(frameItem(pipeline, stream, s, i, img), nil) {
				return
			}
		}
	}
	return Source{Items: seq}
}

// ImageSequence returns the PNG and JPEG files of dir, in lexical order
// of their names (frame-0001.png, frame-0002.png, …), as frames 0, 1, 2,
// … of stream, converted to shape s.
func ImageSequence(pipeline string, s Shape, dir, stream string) (Source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Source{}, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && isImageFile(e.Name()) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	seq := func(yield func(Item, error) bool) {
		for i, name := range names {
			path := filepath.Join(dir, name)
			f, err := os.Open(path)
			if err != nil {
				if !yield(Item{Name: path}, err) {
					return
				}
				continue
			}
			img, err := Decode(f)
			f.Close()
			if err != nil {
				if !yield(Item{Name: path}, fmt.Errorf("%s: %w", path, err)) {
					return
				}
				continue
			}
			if !yield(frameItem(pipeline, stream, s, uint64(i), img), nil) {
				return
			}
		}
	}
	return Source{Total: len(names), Items: seq}, nil
}
