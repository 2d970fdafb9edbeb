package sgd

import (
	"fmt"

	"github.com/smtd/smtd/online"
	"gonum.org/v1/gonum/mat"
)

// BlankMode selects how blank patches (f_vq code −1, empty f_gq code: the
// rows online.NormalizeRows flags as blank) enter the statistics, the SGD
// step and the embedding. It is part of the shape of Stats and SMT: with
// BlankAtom they have K+1 atoms.
type BlankMode int

const (
	// BlankAtom treats every blank patch as one more atom, number K, the
	// "blank atom". Blank patches count in V (V_KK is their frequency),
	// pair with their neighbours in ADDᵀAᵀ like any other atom, and embed
	// to the blank atom's column of P. The image vector then says where
	// the background is, not only where the strokes are; on MNIST (about
	// 31% blank patches) this is worth several points of soft-KNN accuracy
	// over BlankSkip with the whole image as context, and about half a
	// point with a 3-position context (see the package documentation). It
	// is the default.
	BlankAtom BlankMode = iota
	// BlankSkip leaves blank patches out entirely: they are not counted in
	// V, every neighbour pair with a blank end is dropped from ADDᵀAᵀ,
	// and they embed to the zero vector, so pooling windows over pure
	// background give zero (after normalisation still zero).
	BlankSkip
)

var blankModeNames = [...]string{BlankAtom: "atom", BlankSkip: "skip"}

// String returns "atom" or "skip".
func (b BlankMode) String() string {
	if b >= 0 && int(b) < len(blankModeNames) {
		return blankModeNames[b]
	}
	return fmt.Sprintf("BlankMode(%d)", int(b))
}

// ParseBlankMode returns the BlankMode named s ("atom" or "skip").
func ParseBlankMode(s string) (BlankMode, error) {
	for m, name := range blankModeNames {
		if s == name {
			return BlankMode(m), nil
		}
	}
	return 0, fmt.Errorf("sgd: unknown blank mode %q: want atom or skip", s)
}

func (b BlankMode) valid() bool { return b == BlankAtom || b == BlankSkip }

// atoms returns the number of atoms of the statistics and of P for a
// dictionary of k atoms.
func (b BlankMode) atoms(k int) int {
	if b == BlankAtom {
		return k + 1
	}
	return k
}

// csr is a minibatch of codes in compressed sparse row form, with blank
// rows already mapped to the blank atom (BlankAtom) or left empty
// (BlankSkip). The atoms of row i are idx[ptr[i]:ptr[i+1]], increasing.
// oneHot says that no row has more than one atom, which enables the
// faster paths.
type csr struct {
	ptr     []int
	idx     []int
	val     []float64 // the coefficient of each atom; nil: all 1 (binary codes)
	oneHot  bool
	counted int // rows with at least one atom
}

func (c *csr) rows() int        { return len(c.ptr) - 1 }
func (c *csr) row(i int) []int  { return c.idx[c.ptr[i]:c.ptr[i+1]] }
func (c *csr) empty(i int) bool { return c.ptr[i] == c.ptr[i+1] }
func (c *csr) first(i int) int  { return c.idx[c.ptr[i]] }

// fromVQ fills c from f_vq codes: code[i] in [0, k) or −1 for blank. It
// panics if a code is out of range.
func (c *csr) fromVQ(codes []int, k int, blank BlankMode) {
	c.val = nil
	c.ptr = grow(c.ptr, len(codes)+1)
	c.idx = grow(c.idx, len(codes))[:0]
	c.oneHot = true
	c.counted = 0
	c.ptr[0] = 0
	for i, a := range codes {
		switch {
		case a >= 0 && a < k:
			c.idx = append(c.idx, a)
		case a == -1:
			if blank == BlankAtom {
				c.idx = append(c.idx, k)
			}
		default:
			panic(fmt.Sprintf("sgd: f_vq code %d of row %d out of range [-1, %d)", a, i, k))
		}
		c.ptr[i+1] = len(c.idx)
		if c.ptr[i+1] > c.ptr[i] {
			c.counted++
		}
	}
}

// fromGQ fills c from f_gq codes in online's CSR form. It panics with
// mat.ErrShape if the codes are of another dictionary size and if an atom
// is out of range or the atoms of a row are not increasing.
func (c *csr) fromGQ(codes *online.SparseCodes, k int, blank BlankMode) {
	if codes.Atoms != k || len(codes.Ptr) < codes.Rows+1 {
		panic(mat.ErrShape)
	}
	c.val = nil
	r := codes.Rows
	c.ptr = grow(c.ptr, r+1)
	c.idx = grow(c.idx, len(codes.Index)+r)[:0]
	c.oneHot = true
	c.counted = 0
	c.ptr[0] = 0
	for i := 0; i < r; i++ {
		atoms := codes.Index[codes.Ptr[i]:codes.Ptr[i+1]]
		if len(atoms) == 0 {
			if blank == BlankAtom {
				c.idx = append(c.idx, k)
			}
		}
		for p, a := range atoms {
			if a < 0 || a >= k || (p > 0 && a <= atoms[p-1]) {
				panic(fmt.Sprintf("sgd: f_gq code of row %d: atom %d out of range [0, %d) or not increasing", i, a, k))
			}
			c.idx = append(c.idx, a)
		}
		if len(atoms) > 1 {
			c.oneHot = false
		}
		c.ptr[i+1] = len(c.idx)
		if c.ptr[i+1] > c.ptr[i] {
			c.counted++
		}
	}
}

// fromWeighted is fromGQ keeping the codes' Cos as the coefficients of
// their atoms (the blank atom's is 1).
func (c *csr) fromWeighted(codes *online.SparseCodes, k int, blank BlankMode, vals []float64) []float64 {
	c.fromGQ(codes, k, blank)
	vals = vals[:0]
	for i := 0; i < codes.Rows; i++ {
		_, cos := codes.Row(i)
		if len(cos) == 0 && blank == BlankAtom {
			vals = append(vals, 1)
		}
		vals = append(vals, cos...)
	}
	c.val = vals
	return vals
}

// spvec is a sparse vector with increasing indices, used for the columns
// A·d of the differential operator.
type spvec struct {
	idx []int
	val []float64
}

func (v *spvec) reset() { v.idx, v.val = v.idx[:0], v.val[:0] }

// addRow adds w·α for the binary code atoms (increasing) to v, keeping the
// indices increasing and dropping entries that cancel to exactly zero.
func (v *spvec) addRow(atoms []int, w float64, tmp *spvec) { v.addScaled(atoms, nil, w, tmp) }
