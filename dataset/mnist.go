package dataset

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// IDX magic numbers (big-endian u32 at the start of the file): 0x00000803 for
// unsigned-byte 3-D tensors (images) and 0x00000801 for unsigned-byte 1-D
// tensors (labels).
const (
	idxImagesMagic = 2051
	idxLabelsMagic = 2049
)

// maxIDXBytes bounds the payload an IDX header may announce, so that a corrupt
// header cannot make the reader allocate gigabytes. MNIST training images are
// 47,040,000 bytes.
const maxIDXBytes = 1 << 30

// ErrIDX is wrapped by every error about a malformed IDX file.
var ErrIDX = errors.New("dataset: malformed idx file")

// Images is a set of equally sized 8-bit gray images, optionally labelled.
type Images struct {
	N, Rows, Cols int
	// Pixels holds the N images one after the other, each Rows*Cols bytes
	// in row-major order (0 is background for MNIST, 255 is ink).
	Pixels []uint8
	// Labels holds one label per image, or is nil if the set is unlabelled.
	Labels []uint8
}

// Image returns image i as a Rows*Cols row-major slice that aliases Pixels.
// It panics if i is out of range.
func (im *Images) Image(i int) []uint8 {
	if i < 0 || i >= im.N {
		panic(fmt.Sprintf("dataset: image index %d out of range [0,%d)", i, im.N))
	}
	n := im.Rows * im.Cols
	return im.Pixels[i*n : (i+1)*n : (i+1)*n]
}

// Split returns the first n images and the rest as two sets that alias
// im's memory. It panics if n is out of [0, N].
func (im *Images) Split(n int) (head, tail *Images) {
	if n < 0 || n > im.N {
		panic(fmt.Sprintf("dataset: split at %d out of range [0,%d]", n, im.N))
	}
	size := im.Rows * im.Cols
	head = &Images{N: n, Rows: im.Rows, Cols: im.Cols, Pixels: im.Pixels[: n*size : n*size]}
	tail = &Images{N: im.N - n, Rows: im.Rows, Cols: im.Cols, Pixels: im.Pixels[n*size:]}
	if im.Labels != nil {
		head.Labels, tail.Labels = im.Labels[:n:n], im.Labels[n:]
	}
	return head, tail
}

// ReadMNIST reads the MNIST split "train" or "t10k" from dir: the files
// <split>-images-idx3-ubyte and <split>-labels-idx1-ubyte, each either plain
// or gzip-compressed with a ".gz" suffix (the plain file is preferred when
// both exist). It checks that both files agree on the number of images.
func ReadMNIST(dir, split string) (*Images, error) {
	if split != "train" && split != "t10k" {
		return nil, fmt.Errorf("dataset: mnist split %q: want \"train\" or \"t10k\"", split)
	}
	var im *Images
	err := withIDXFile(filepath.Join(dir, split+"-images-idx3-ubyte"), func(r io.Reader) error {
		var err error
		im, err = ReadIDXImages(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	var labels []uint8
	err = withIDXFile(filepath.Join(dir, split+"-labels-idx1-ubyte"), func(r io.Reader) error {
		var err error
		labels, err = ReadIDXLabels(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(labels) != im.N {
		return nil, fmt.Errorf("%w: mnist %s in %s: %d images but %d labels", ErrIDX, split, dir, im.N, len(labels))
	}
	im.Labels = labels
	return im, nil
}

// withIDXFile opens path, or path+".gz" through a gzip reader when path does
// not exist, and calls read on its decompressed content. Errors name the file.
func withIDXFile(path string, read func(io.Reader) error) error {
	f, err := os.Open(path)
	gz := false
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.Open(path + ".gz")
		gz = true
		path += ".gz"
	}
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReaderSize(f, 1<<16)
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("dataset: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	if err := read(r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ReadIDXImages reads an IDX unsigned-byte 3-D tensor:
//
//	magic:u32 = 2051, count:u32, rows:u32, cols:u32, count*rows*cols pixels
//
// with big-endian integers. It returns an error wrapping ErrIDX for a wrong
// magic number, zero or too large sizes, a short payload or trailing bytes.
func ReadIDXImages(r io.Reader) (*Images, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: images header: %w", ErrIDX, err)
	}
	if m := binary.BigEndian.Uint32(hdr[0:]); m != idxImagesMagic {
		return nil, fmt.Errorf("%w: images magic %d, want %d", ErrIDX, m, idxImagesMagic)
	}
	n := uint64(binary.BigEndian.Uint32(hdr[4:]))
	rows := uint64(binary.BigEndian.Uint32(hdr[8:]))
	cols := uint64(binary.BigEndian.Uint32(hdr[12:]))
	if rows == 0 || cols == 0 {
		return nil, fmt.Errorf("%w: image size %dx%d", ErrIDX, rows, cols)
	}
	if rows*cols > maxIDXBytes || n*rows*cols > maxIDXBytes {
		return nil, fmt.Errorf("%w: %d images of %dx%d exceed %d bytes", ErrIDX, n, rows, cols, maxIDXBytes)
	}
	pix, err := readPayload(r, int(n*rows*cols))
	if err != nil {
		return nil, fmt.Errorf("%w: images payload: %w", ErrIDX, err)
	}
	return &Images{N: int(n), Rows: int(rows), Cols: int(cols), Pixels: pix}, nil
}

// ReadIDXLabels reads an IDX unsigned-byte 1-D tensor:
//
//	magic:u32 = 2049, count:u32, count labels
//
// with big-endian integers. Errors wrap ErrIDX as for ReadIDXImages.
func ReadIDXLabels(r io.Reader) ([]uint8, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: labels header: %w", ErrIDX, err)
	}
	if m := binary.BigEndian.Uint32(hdr[0:]); m != idxLabelsMagic {
		return nil, fmt.Errorf("%w: labels magic %d, want %d", ErrIDX, m, idxLabelsMagic)
	}
	n := uint64(binary.BigEndian.Uint32(hdr[4:]))
	if n > maxIDXBytes {
		return nil, fmt.Errorf("%w: %d labels exceed %d bytes", ErrIDX, n, maxIDXBytes)
	}
	labels, err := readPayload(r, int(n))
	if err != nil {
		return nil, fmt.Errorf("%w: labels payload: %w", ErrIDX, err)
	}
	return labels, nil
}

// readPayload reads exactly n bytes and checks that r is then exhausted. It
// grows its buffer as data arrives, so a header that lies about the size of a
// short file costs no more memory than the file itself.
func readPayload(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, 1<<20))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			if len(buf) < n {
				return nil, fmt.Errorf("got %d of %d bytes: %w", len(buf), n, io.ErrUnexpectedEOF)
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	var one [1]byte
	for {
		m, err := r.Read(one[:])
		if m > 0 {
			return nil, fmt.Errorf("trailing bytes after %d bytes", n)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
