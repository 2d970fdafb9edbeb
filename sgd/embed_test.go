package sgd_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/sgd"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// bruteEmbed computes the image vector of smt-minimalistic, section 3, by
// its definition: normalised patch embeddings, averaged over each k×k
// window at stride s, each pooled vector normalised.
func bruteEmbed(p mat.Matrix, atoms [][]int, blankCol int, rows, cols, k, s int) []float64 {
	dim, _ := p.Dims()
	beta := make([][]float64, len(atoms))
	for i, a := range atoms {
		b := make([]float64, dim)
		if len(a) == 0 && blankCol >= 0 {
			a = []int{blankCol}
		}
		for _, x := range a {
			for l := 0; l < dim; l++ {
				b[l] += p.At(l, x)
			}
		}
		if n := floats.Norm(b, 2); n > 0 {
			floats.Scale(1/n, b)
		}
		beta[i] = b
	}
	var out []float64
	for or := 0; or+k <= rows; or += s {
		for oc := 0; oc+k <= cols; oc += s {
			z := make([]float64, dim)
			for r := or; r < or+k; r++ {
				for c := oc; c < oc+k; c++ {
					floats.AddScaled(z, 1/float64(k*k), beta[r*cols+c])
				}
			}
			if n := floats.Norm(z, 2); n > 0 {
				floats.Scale(1/n, z)
			}
			out = append(out, z...)
		}
	}
	return out
}

func TestEmbedImagesMatchesDefinition(t *testing.T) {
	grid := online.PatchGrid{Width: 12, Height: 11, Size: 3} // 9×10 grid
	const k, dim, images = 7, 3, 3
	for _, tc := range []struct {
		name  string
		blank sgd.BlankMode
		pool  sgd.PoolSettings
		multi bool
	}{
		{"atom/default", sgd.BlankAtom, sgd.PoolSettings{}, false},
		{"skip/default", sgd.BlankSkip, sgd.PoolSettings{}, false},
		{"atom/3x3-stride1", sgd.BlankAtom, sgd.PoolSettings{Kernel: 3, Stride: 1}, false},
		{"skip/whole", sgd.BlankSkip, sgd.PoolSettings{Kernel: 9, Stride: 9}, false},
		{"skip/none", sgd.BlankSkip, sgd.PoolSettings{Kernel: 1, Stride: 1}, false},
		{"gq/atom", sgd.BlankAtom, sgd.PoolSettings{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, 32))
			m := sgd.NewSMT(sgd.SMTSettings{K: k, Blank: tc.blank, Dim: dim}, rand.NewPCG(1, 2))
			var got mat.Dense
			var rows [][]int
			n := images * grid.Len()
			// Mostly blank images, so that some pooling windows hold only
			// blank patches.
			if tc.multi {
				c := randomGQ(rng, n, k, 0.8)
				m.EmbedImagesGQ(&got, c, images, grid, tc.pool)
				rows = rowsOfGQ(c)
			} else {
				c := randomVQ(rng, n, k, 0.8)
				m.EmbedImagesVQ(&got, c, images, grid, tc.pool)
				rows = rowsOfVQ(c)
			}
			blankCol := -1
			if tc.blank == sgd.BlankAtom {
				blankCol = k
			}
			kk, s := tc.pool.Kernel, tc.pool.Stride
			if kk == 0 {
				kk, s = 4, 2
			}
			if r, c := got.Dims(); r != images || c != tc.pool.Len(grid, dim) {
				t.Fatalf("image vectors %dx%d, want %dx%d", r, c, images, tc.pool.Len(grid, dim))
			}
			zeros := 0
			for img := 0; img < images; img++ {
				want := bruteEmbed(m.P(), rows[img*grid.Len():(img+1)*grid.Len()], blankCol, grid.Rows(), grid.Cols(), kk, s)
				if len(want) != tc.pool.Len(grid, dim) {
					t.Fatalf("definition has %d values, Len says %d", len(want), tc.pool.Len(grid, dim))
				}
				for j, w := range want {
					if g := got.At(img, j); math.Abs(g-w) > 1e-12 {
						t.Fatalf("image %d value %d = %v, want %v", img, j, g, w)
					}
				}
				for j := 0; j < len(want); j += dim {
					if floats.Norm(want[j:j+dim], 2) == 0 {
						zeros++
					}
				}
			}
			if tc.blank == sgd.BlankSkip && tc.pool.Kernel == 1 && zeros == 0 {
				t.Error("no zero position with blank patches skipped")
			}
			if tc.blank == sgd.BlankAtom && zeros != 0 {
				t.Errorf("%d zero positions with the blank atom", zeros)
			}
		})
	}
}

func TestEmbedPatches(t *testing.T) {
	m := sgd.NewSMT(sgd.SMTSettings{K: 3, Blank: sgd.BlankSkip, Dim: 2}, rand.NewPCG(1, 2))
	if err := m.SetP(mat.NewDense(2, 3, []float64{3, 0, 1, 4, 2, -1})); err != nil {
		t.Fatal(err)
	}
	var b mat.Dense
	m.EmbedPatchesVQ(&b, []int{0, -1, 1, 2})
	want := mat.NewDense(4, 2, []float64{0.6, 0.8, 0, 0, 0, 1, 1 / math.Sqrt2, -1 / math.Sqrt2})
	if !mat.EqualApprox(&b, want, 1e-15) {
		t.Errorf("patch embeddings\n%v\nwant\n%v", mat.Formatted(&b), mat.Formatted(want))
	}
	gq := &online.SparseCodes{Rows: 2, Atoms: 3, Ptr: []int{0, 2, 2}, Index: []int{0, 1}, Cos: []float64{1, 1}}
	b.Reset()
	m.EmbedPatchesGQ(&b, gq)
	want = mat.NewDense(2, 2, []float64{3 / math.Sqrt(45), 6 / math.Sqrt(45), 0, 0})
	if !mat.EqualApprox(&b, want, 1e-15) {
		t.Errorf("f_gq patch embeddings\n%v\nwant\n%v", mat.Formatted(&b), mat.Formatted(want))
	}
	if err := m.SetP(mat.NewDense(2, 3, []float64{math.NaN(), 0, 1, 4, 2, -1})); err == nil {
		t.Error("SetP accepted NaN")
	}
}

func TestPoolShape(t *testing.T) {
	for _, tc := range []struct {
		grid       online.PatchGrid
		pool       sgd.PoolSettings
		rows, cols int
	}{
		{mnistGrid, sgd.PoolSettings{}, 10, 10}, // 23×23 grid: (23−4)/2+1
		{mnistGrid, sgd.PoolSettings{Kernel: 23, Stride: 1}, 1, 1},
		{mnistGrid, sgd.PoolSettings{Kernel: 24}, 0, 0},
		{online.PatchGrid{Width: 32, Height: 32, Size: 6, Stride: 2}, sgd.PoolSettings{}, 6, 6}, // 14×14 grid
	} {
		if r, c := tc.pool.Shape(tc.grid); r != tc.rows || c != tc.cols {
			t.Errorf("%+v on %dx%d: shape %dx%d, want %dx%d", tc.pool, tc.grid.Rows(), tc.grid.Cols(), r, c, tc.rows, tc.cols)
		}
	}
}

// Weighted codes scale each atom's column of P by its coefficient: with
// all coefficients 1 they embed like binary f_gq codes, and scaling one
// patch's coefficients together changes nothing (β is normalised), while
// reweighting its atoms does.
func TestEmbedImagesWeighted(t *testing.T) {
	grid := online.PatchGrid{Width: 8, Height: 8, Size: 3} // 6×6 grid
	const k, dim = 7, 3
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Blank: sgd.BlankAtom, Dim: dim}, rand.NewPCG(1, 2))
	rng := rand.New(rand.NewPCG(3, 4))
	c := randomGQ(rng, grid.Len(), k, 0.3)
	for i := range c.Cos {
		c.Cos[i] = 1
	}
	var binary, weighted mat.Dense
	m.EmbedImagesGQ(&binary, c, 1, grid, sgd.PoolSettings{Kernel: 1, Stride: 1})
	m.EmbedImagesWeighted(&weighted, c, 1, grid, sgd.PoolSettings{Kernel: 1, Stride: 1})
	if !mat.EqualApprox(&binary, &weighted, 1e-12) {
		t.Fatal("unit coefficients embed differently from binary codes")
	}
	// Patch p: scale all its coefficients by 3, then reweight one atom.
	p := -1
	for i := range grid.Len() {
		if atoms, _ := c.Row(i); len(atoms) >= 2 {
			p = i
			break
		}
	}
	if p < 0 {
		t.Fatal("no patch with two atoms")
	}
	_, cos := c.Row(p)
	for j := range cos {
		cos[j] = 3
	}
	var scaled mat.Dense
	m.EmbedImagesWeighted(&scaled, c, 1, grid, sgd.PoolSettings{Kernel: 1, Stride: 1})
	if !mat.EqualApprox(&binary, &scaled, 1e-12) {
		t.Error("scaling a patch's coefficients together changed its embedding")
	}
	cos[0] = 0.1
	var reweighted mat.Dense
	m.EmbedImagesWeighted(&reweighted, c, 1, grid, sgd.PoolSettings{Kernel: 1, Stride: 1})
	before, after := binary.RawRowView(0)[p*dim:(p+1)*dim], reweighted.RawRowView(0)[p*dim:(p+1)*dim]
	if floats.EqualApprox(before, after, 1e-6) {
		t.Error("reweighting a patch's atoms did not change its embedding")
	}
}

// A clone of the SMT, a new snapshot, embeds in the workspaces its
// original left: embedding with it allocates nothing beyond the copy.
func TestSMTCloneSharesWorkspaces(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	const k = 64
	codes := benchCodes(1, k)[0]
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: 8}, rand.NewPCG(1, 2))
	dst := mat.NewDense(32, sgd.PoolSettings{}.Len(mnistGrid, 8), nil)
	m.EmbedImagesVQ(dst, codes, 32, mnistGrid, sgd.PoolSettings{})
	clone := testing.AllocsPerRun(20, func() { m.Clone() })
	cloneAndEmbed := testing.AllocsPerRun(20, func() {
		m.Clone().EmbedImagesVQ(dst, codes, 32, mnistGrid, sgd.PoolSettings{})
	})
	if cloneAndEmbed != clone {
		t.Errorf("Clone then EmbedImagesVQ: %v allocations, Clone alone %v", cloneAndEmbed, clone)
	}
}
