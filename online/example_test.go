package online_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/smtd/smtd/online"
	"gonum.org/v1/gonum/mat"
)

func ExampleKMeans() {
	// Rows near two directions of the plane, streamed in minibatches of
	// four; the zero row is blank and is left out.
	x := mat.NewDense(12, 2, []float64{
		1, 0.1, 0.1, 1, 1, -0.1, 0, 0,
		-0.1, 1, 0.9, 0, 0, 0.9, 1.1, 0.05,
		0.05, 1.2, 1, 0, 0, 1, 1, 0.02,
	})
	src := rand.NewPCG(1, 2) // owned (and checkpointed) by the caller
	km := online.NewKMeans(online.KMeansSettings{K: 2, Dim: 2}, src)
	for i := 0; i < 12; i += 4 {
		km.Learn(x.Slice(i, i+4, 0, 2), nil)
	}
	fmt.Printf("atoms:\n%.3f\n", mat.Formatted(km.Atoms()))

	q := mat.NewDense(3, 2, []float64{2, 0.3, 0, 0, -0.2, 3})
	code := make([]int, 3)
	cos := make([]float64, 3)
	km.Assign(code, cos, q) // f_vq
	fmt.Printf("f_vq: %v, cosines %.3f\n", code, cos)

	var gq online.SparseCodes
	km.CodesGQ(&gq, q, 0.5) // f_gq with t = 0.5
	for i := 0; i < gq.Rows; i++ {
		atoms, _ := gq.Row(i)
		fmt.Printf("f_gq row %d: atoms %v\n", i, atoms)
	}
	fmt.Println("samples learned:", km.Samples())
	// Output:
	// atoms:
	// ⎡1.000  0.011⎤
	// ⎣0.008  1.000⎦
	// f_vq: [0 -1 1], cosines [0.991 0.000 0.997]
	// f_gq row 0: atoms [0]
	// f_gq row 1: atoms []
	// f_gq row 2: atoms [1]
	// samples learned: 11
}

func ExamplePatcher() {
	// One 8×8 image with a vertical stroke: its 3×3 patches, centred by
	// the contextual mean of their neighbours within one step, whitened
	// and normalised. Patches far from the stroke are blank.
	g := online.PatchGrid{Width: 8, Height: 8, Size: 3}
	img := make([]float64, g.Pixels())
	for y := 0; y < 8; y++ {
		img[y*8+1] = 1
	}
	p := online.Patcher{Grid: g, Mean: online.MeanContextual, Context: 1}
	var patches mat.Dense
	p.Extract(&patches, img)

	w := online.NewWhitener(g.Dim(), online.WhitenSettings{Lambda: 0.01})
	if err := w.Observe(&patches, nil); err != nil {
		fmt.Println(err)
		return
	}
	var x mat.Dense
	w.Whiten(&x, &patches)
	blank := online.NormalizeRows(&x, 1e-9, nil)
	n := 0
	for _, b := range blank {
		if b {
			n++
		}
	}
	fmt.Printf("%d patches on a %dx%d grid, %d blank\n", g.Len(), g.Rows(), g.Cols(), n)
	// Output:
	// 36 patches on a 6x6 grid, 18 blank
}
