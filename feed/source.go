package feed

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
)

// Item is one input message and the Nats-Msg-Id that identifies it.
type Item struct {
	// ID is the message's Nats-Msg-Id (also in Header).
	ID     string
	Header nats.Header
	Data   []byte
	// Name says what the item is, for --dry-run and errors: a file
	// path, "clip.y4m frame 3", "notes.txt:12".
	Name string
}

// Source is a sequence of items. An error that concerns one item (an
// image that does not decode) comes with that item's Name and the
// sequence goes on; an error that ends the source (a truncated video
// stream) is its last element.
type Source struct {
	// Total is the number of items when known in advance, 0 otherwise.
	Total int
	Items iter.Seq2[Item, error]
}

// msgID is the Nats-Msg-Id of an item of pipeline: the pipeline and a
// SHA-256 digest of the parts that make the item what it is.
func msgID(pipeline string, parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return pipeline + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

func newItem(id, name string, h nats.Header, data []byte) Item {
	if h == nil {
		h = nats.Header{}
	}
	h.Set(nats.MsgIdHdr, id)
	return Item{ID: id, Header: h, Data: data, Name: name}
}

// isImageFile says whether name has a PNG or JPEG extension.
func isImageFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".png", ".jpg", ".jpeg":
		return true
	}
	return false
}

// imageFile is a file found under a root given on the command line.
type imageFile struct {
	path  string // as found: the root joined with the path below it
	rel   string // below the root ("" for a file given itself)
	label string
}

// listImages returns the PNG and JPEG files of paths, each a file or a
// directory searched recursively, in lexical order within each directory.
// A file below a directory is labelled with the name of the directory
// that holds it, unless that is the root itself.
func listImages(paths []string) ([]imageFile, error) {
	var files []imageFile
	for _, root := range paths {
		fi, err := os.Stat(root)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, imageFile{path: root})
			continue
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !isImageFile(path) {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			f := imageFile{path: path, rel: filepath.ToSlash(rel)}
			if dir := filepath.Dir(rel); dir != "." {
				f.label = filepath.Base(dir)
			}
			files = append(files, f)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// Labels maps image paths to labels, as read by ReadLabels.
type Labels map[string]string

// ReadLabels reads a CSV file of path,label rows (a first row
// "path,label" is taken as a header). A path may be given as the feed
// finds it (the directory on the command line joined with the path below
// it), absolute, relative to the working directory, relative to the
// directory on the command line, or as the file's base name.
func ReadLabels(r io.Reader) (Labels, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	cr.TrimLeadingSpace = true
	l := Labels{}
	for i := 0; ; i++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return l, nil
		}
		if err != nil {
			return nil, err
		}
		if i == 0 && rec[0] == "path" && rec[1] == "label" {
			continue
		}
		l[filepath.ToSlash(filepath.Clean(rec[0]))] = rec[1]
	}
}

func (l Labels) lookup(f imageFile, wd string) (string, bool) {
	if len(l) == 0 {
		return "", false
	}
	for _, k := range f.names(wd) {
		if v, ok := l[k]; ok && k != "" {
			return v, true
		}
	}
	return "", false
}

// names are the ways a labels file may name f (see ReadLabels), wd
// being the working directory.
func (f imageFile) names(wd string) []string {
	names := []string{filepath.Clean(f.path)}
	abs := f.path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(wd, abs)
	}
	names = append(names, filepath.Clean(abs))
	if rel, err := filepath.Rel(wd, abs); err == nil {
		names = append(names, rel)
	}
	names = append(names, f.rel, filepath.Base(f.path))
	for i, n := range names {
		names[i] = filepath.ToSlash(n)
	}
	return names
}

// Unmatched returns the paths of l that name none of the PNG and JPEG
// files of paths (as Images finds them), sorted.
func (l Labels) Unmatched(paths []string) ([]string, error) {
	files, err := listImages(paths)
	if err != nil {
		return nil, err
	}
	wd, _ := os.Getwd()
	named := map[string]bool{}
	for _, f := range files {
		for _, n := range f.names(wd) {
			named[n] = true
		}
	}
	var out []string
	for k := range l {
		if !named[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// maxFileBytes bounds the image files read.
const maxFileBytes = 256 << 20

// Images returns the PNG and JPEG files of paths (files, or directories
// searched recursively) as raw uint8 images of shape s for pipeline:
// resized and converted as Raw does, labelled by labels (which may be
// nil) or else by the name of the directory holding them. An item's
// Nats-Msg-Id is a digest of its label and the file's bytes.
func Images(pipeline string, s Shape, paths []string, labels Labels) (Source, error) {
	files, err := listImages(paths)
	if err != nil {
		return Source{}, err
	}
	wd, _ := os.Getwd()
	seq := func(yield func(Item, error) bool) {
		for _, f := range files {
			if l, ok := labels.lookup(f, wd); ok {
				f.label = l
			}
			it, err := imageItem(pipeline, s, f)
			if !yield(it, err) {
				return
			}
		}
	}
	return Source{Total: len(files), Items: seq}, nil
}

func imageItem(pipeline string, s Shape, f imageFile) (Item, error) {
	it := Item{Name: f.path}
	fi, err := os.Stat(f.path)
	if err != nil {
		return it, err
	}
	if fi.Size() > maxFileBytes {
		return it, fmt.Errorf("%s: %d bytes, more than %d", f.path, fi.Size(), maxFileBytes)
	}
	content, err := os.ReadFile(f.path)
	if err != nil {
		return it, err
	}
	img, err := Decode(bytes.NewReader(content))
	if err != nil {
		return it, fmt.Errorf("%s: %w", f.path, err)
	}
	h := s.Header()
	if f.label != "" {
		h.Set("Smtd-Label", f.label)
	}
	return newItem(msgID(pipeline, []byte(f.label), content), f.path, h, Raw(nil, img, s)), nil
}
