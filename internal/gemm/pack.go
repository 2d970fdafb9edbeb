package gemm

// packA copies the rows×depth block of op(A) at (i0, l0) into dst as
// micro-panels of mr rows, each depth steps of mr values:
//
//	dst[p·mr·depth + l·mr + i] = op(A)[i0 + p·mr + i][l0 + l]
//
// zero-padding the last panel to mr rows.
func packA(kn *kernel, dst []float64, trans bool, a []float64, lda, i0, l0, rows, depth int) {
	mr := kn.mr
	for p := 0; p < rows; p += mr {
		panel := dst[p*depth : (p+mr)*depth]
		r := min(mr, rows-p)
		if trans && r == mr && kn.copyA != nil {
			kn.copyA(panel, a[l0*lda+i0+p:], lda, depth)
		} else if trans {
			packCopy(panel, a, lda, l0*lda+i0+p, r, depth, mr)
		} else if r == mr && kn.transposeA != nil {
			kn.transposeA(panel, a[(i0+p)*lda+l0:], lda, depth)
		} else {
			packRows(panel, a, lda, (i0+p)*lda+l0, r, depth, mr)
		}
		if r < mr {
			for l := 0; l < depth; l++ {
				clear(panel[l*mr+r : l*mr+mr])
			}
		}
	}
}

// packB copies the depth×cols block of op(B) at (l0, j0) into dst as
// micro-panels of nr columns, each depth steps of nr values:
//
//	dst[q·nr·depth + l·nr + j] = op(B)[l0 + l][j0 + q·nr + j]
//
// zero-padding the last panel to nr columns, or to kn.narrow.nr if it is
// no wider (panelWidth).
func packB(kn *kernel, dst []float64, trans bool, b []float64, ldb, l0, j0, depth, cols int) {
	for q := 0; q < cols; q += kn.nr {
		w := min(kn.nr, cols-q)
		nr := panelWidth(kn, w)
		panel := dst[q*depth : (q+nr)*depth]
		if trans && w == kn.nr && kn.transposeB != nil {
			kn.transposeB(panel, b[(j0+q)*ldb+l0:], ldb, depth)
		} else if trans {
			packRows(panel, b, ldb, (j0+q)*ldb+l0, w, depth, nr)
		} else if w == kn.nr && kn.copyB != nil {
			kn.copyB(panel, b[l0*ldb+j0+q:], ldb, depth)
		} else {
			packCopy(panel, b, ldb, l0*ldb+j0+q, w, depth, nr)
		}
		if w < nr {
			for l := 0; l < depth; l++ {
				clear(panel[l*nr+w : l*nr+nr])
			}
		}
	}
}

// packRows transposes r ≤ mr rows of depth values, stride lda from off in
// a, into panel[l·mr + i]: a micro-panel of op(A) from A, or of op(B) from
// Bᵀ. Four rows at a time, so that each step of l
// reads four streams and writes four adjacent values.
func packRows(panel, a []float64, lda, off, r, depth, mr int) {
	i := 0
	for ; i+4 <= r; i += 4 {
		o := off + i*lda
		r0 := a[o : o+depth]
		r1 := a[o+lda : o+lda+depth]
		r2 := a[o+2*lda : o+2*lda+depth]
		r3 := a[o+3*lda : o+3*lda+depth]
		for l := range r0 {
			d := panel[l*mr+i : l*mr+i+4]
			d[0], d[1], d[2], d[3] = r0[l], r1[l], r2[l], r3[l]
		}
	}
	for ; i < r; i++ {
		o := off + i*lda
		for l, v := range a[o : o+depth] {
			panel[l*mr+i] = v
		}
	}
}

// packCopy copies depth rows of w ≤ nr values, stride ld from off in b,
// into panel[l·nr + j]: a micro-panel of op(B) from B, or of op(A) from
// Aᵀ.
func packCopy(panel, b []float64, ld, off, w, depth, nr int) {
	for l := 0; l < depth; l++ {
		copy(panel[l*nr:l*nr+w], b[off+l*ld:off+l*ld+w])
	}
}

// panelWidth returns the packed width of a micro-panel of op(B) with w
// columns: kn.narrow.nr if w fits it, else kn.nr.
func panelWidth(kn *kernel, w int) int {
	if kn.narrow != nil && w <= kn.narrow.nr {
		return kn.narrow.nr
	}
	return kn.nr
}
