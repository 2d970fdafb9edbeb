package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// idxImages builds an IDX images header followed by pixels bytes 0, 1, 2, ...
// (so byte k of the file's payload is byte(k)).
func idxImages(magic uint32, n, rows, cols uint32, pixels int) []byte {
	var b bytes.Buffer
	for _, v := range []uint32{magic, n, rows, cols} {
		binary.Write(&b, binary.BigEndian, v)
	}
	for k := 0; k < pixels; k++ {
		b.WriteByte(byte(k))
	}
	return b.Bytes()
}

func idxLabels(magic uint32, n uint32, labels []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	binary.Write(&b, binary.BigEndian, n)
	b.Write(labels)
	return b.Bytes()
}

func TestReadIDXImages(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"ok", idxImages(2051, 3, 2, 4, 24), false},
		{"empty set", idxImages(2051, 0, 28, 28, 0), false},
		{"labels magic", idxImages(2049, 3, 2, 4, 24), true},
		{"float magic", idxImages(0x0d03, 3, 2, 4, 24), true},
		{"zero rows", idxImages(2051, 3, 0, 4, 0), true},
		{"short payload", idxImages(2051, 3, 2, 4, 23), true},
		{"trailing byte", idxImages(2051, 3, 2, 4, 25), true},
		{"short header", idxImages(2051, 3, 2, 4, 0)[:10], true},
		{"empty", nil, true},
		{"huge", idxImages(2051, 1<<31, 1<<16, 1<<16, 10), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im, err := ReadIDXImages(bytes.NewReader(tt.data))
			if tt.wantErr {
				if !errors.Is(err, ErrIDX) {
					t.Fatalf("err = %v, want ErrIDX", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if im.Labels != nil || im.N > 0 && (im.Rows != 2 || im.Cols != 4) {
				t.Fatalf("got %+v", im)
			}
			for i := 0; i < im.N; i++ {
				img := im.Image(i)
				if len(img) != im.Rows*im.Cols || img[0] != byte(i*8) || img[7] != byte(i*8+7) {
					t.Fatalf("image %d = %v", i, img)
				}
			}
		})
	}
}

func TestReadIDXLabels(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		want    []byte
		wantErr bool
	}{
		{"ok", idxLabels(2049, 3, []byte{7, 2, 1}), []byte{7, 2, 1}, false},
		{"images magic", idxLabels(2051, 3, []byte{7, 2, 1}), nil, true},
		{"short", idxLabels(2049, 4, []byte{7, 2, 1}), nil, true},
		{"trailing", idxLabels(2049, 2, []byte{7, 2, 1}), nil, true},
		{"short header", []byte{0, 0, 8}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadIDXLabels(bytes.NewReader(tt.data))
			if tt.wantErr {
				if !errors.Is(err, ErrIDX) {
					t.Fatalf("err = %v, want ErrIDX", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte, gz bool) {
	t.Helper()
	if gz {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		data = b.Bytes()
		path += ".gz"
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadMNIST(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxImages(2051, 3, 2, 4, 24), true)
	writeFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"), idxLabels(2049, 3, []byte{5, 0, 4}), true)
	writeFile(t, filepath.Join(dir, "t10k-images-idx3-ubyte"), idxImages(2051, 2, 2, 4, 16), false)
	writeFile(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), idxLabels(2049, 3, []byte{7, 2, 1}), false)

	im, err := ReadMNIST(dir, "train")
	if err != nil {
		t.Fatal(err)
	}
	if im.N != 3 || im.Rows != 2 || im.Cols != 4 || !bytes.Equal(im.Labels, []byte{5, 0, 4}) {
		t.Fatalf("train = %+v", im)
	}
	if got := im.Image(2); !bytes.Equal(got, []byte{16, 17, 18, 19, 20, 21, 22, 23}) {
		t.Fatalf("Image(2) = %v", got)
	}

	// t10k: 2 images but 3 labels.
	if _, err := ReadMNIST(dir, "t10k"); !errors.Is(err, ErrIDX) {
		t.Fatalf("count mismatch: err = %v, want ErrIDX", err)
	}
	if _, err := ReadMNIST(dir, "test"); err == nil {
		t.Fatal("bad split: no error")
	}
	if _, err := ReadMNIST(t.TempDir(), "train"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing files: err = %v, want ErrNotExist", err)
	}
}

func TestImagePanics(t *testing.T) {
	im := &Images{N: 1, Rows: 1, Cols: 1, Pixels: []uint8{9}}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	im.Image(1)
}

func TestImagesSplit(t *testing.T) {
	im := &Images{N: 3, Rows: 1, Cols: 2, Pixels: []uint8{1, 2, 3, 4, 5, 6}, Labels: []uint8{7, 8, 9}}
	head, tail := im.Split(1)
	if head.N != 1 || !bytes.Equal(head.Image(0), []byte{1, 2}) || !bytes.Equal(head.Labels, []byte{7}) {
		t.Fatalf("head = %+v", head)
	}
	if tail.N != 2 || !bytes.Equal(tail.Image(1), []byte{5, 6}) || !bytes.Equal(tail.Labels, []byte{8, 9}) {
		t.Fatalf("tail = %+v", tail)
	}
	// The head's capacity ends at the split: appending cannot reach the tail.
	if cap(head.Pixels) != 2 || cap(head.Labels) != 1 {
		t.Fatalf("head capacities %d, %d", cap(head.Pixels), cap(head.Labels))
	}
	unlabelled := &Images{N: 2, Rows: 1, Cols: 1, Pixels: []uint8{1, 2}}
	if h, tl := unlabelled.Split(2); h.Labels != nil || tl.N != 0 {
		t.Fatalf("unlabelled split: %+v, %+v", h, tl)
	}
}
