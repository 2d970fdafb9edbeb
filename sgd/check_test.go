package sgd

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/smtd/smtd/online"
)

// checkCase is a corruption of a learner and the error Check must give.
type checkCase struct {
	name  string
	check func() error // Check of a corrupted copy
	part  string
	index int
	want  error
}

func runCheckCases(t *testing.T, learner string, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		err := tc.check()
		var ce *CheckError
		if !errors.As(err, &ce) || !errors.Is(err, tc.want) || ce.Learner != learner || ce.Part != tc.part || ce.Index != tc.index {
			t.Errorf("%s: Check = %v, want %v in %s %s at %d", tc.name, err, tc.want, learner, tc.part, tc.index)
		}
	}
}

// healthyStats returns statistics of random multi-hot codes over 6×6
// grids of patches, forgotten with a short memory.
func healthyStats(t *testing.T) *Stats {
	rng := rand.New(rand.NewPCG(1, 2))
	g := online.PatchGrid{Width: 8, Height: 8, Size: 3}
	const k = 6
	st := NewStats(StatsSettings{K: k, Range: 1, MultiHot: true, Memory: 50})
	for range 5 {
		c := &online.SparseCodes{Rows: 4 * g.Len(), Atoms: k, Ptr: []int{0}}
		for range c.Rows {
			for a := range k {
				if rng.IntN(3) == 0 {
					c.Index = append(c.Index, a)
					c.Cos = append(c.Cos, 0.5+rng.Float64()/2)
				}
			}
			c.Ptr = append(c.Ptr, len(c.Index))
		}
		st.AddImagesGQ(c, 4, g)
	}
	if err := st.Check(); err != nil {
		t.Fatalf("healthy statistics: %v", err)
	}
	return st
}

func TestStatsCheck(t *testing.T) {
	st := healthyStats(t)
	corrupt := func(f func(c *Stats)) func() error {
		return func() error {
			c := st.Clone()
			f(c)
			return c.Check()
		}
	}
	runCheckCases(t, "stats", []checkCase{
		{"NaN forgetting factor", corrupt(func(c *Stats) { c.g = math.NaN() }), "weights", -1, ErrNonFinite},
		{"zero forgetting factor", corrupt(func(c *Stats) { c.g = 0 }), "weights", -1, ErrNegative},
		{"negative weight", corrupt(func(c *Stats) { c.w = -1 }), "weights", -1, ErrNegative},
		{"Inf pair weight", corrupt(func(c *Stats) { c.wp = math.Inf(1) }), "weights", -1, ErrNonFinite},
		{"NaN in diag V", corrupt(func(c *Stats) { c.vd[2] = math.NaN() }), "V", 2, ErrNonFinite},
		{"negative diag V", corrupt(func(c *Stats) { c.vd[3] = -1 }), "V", 3, ErrNegative},
		{"Inf off V", corrupt(func(c *Stats) { c.vo.v[4] = math.Inf(-1) }), "V", 4, ErrNonFinite},
		{"negative diag L", corrupt(func(c *Stats) { c.ld[1] = -0.5 }), "L", 1, ErrNegative},
		{"NaN off L", corrupt(func(c *Stats) { c.lo.v[0] = math.NaN() }), "L", 0, ErrNonFinite},
	})
}

func TestSMTCheck(t *testing.T) {
	st := healthyStats(t)
	const k, dim = 6, 3
	m := NewSMT(SMTSettings{K: k, Dim: dim}, rand.NewPCG(3, 4))
	rng := rand.New(rand.NewPCG(5, 6))
	for range 5 {
		codes := make([]int, 40)
		for i := range codes {
			codes[i] = rng.IntN(k)
		}
		if err := m.StepSequencesVQ(st, codes, []int{20, 20}); err != nil {
			t.Fatal(err)
		}
		if err := m.Check(); err != nil {
			t.Fatalf("after step %d: %v", m.Steps(), err)
		}
	}
	corrupt := func(f func(c *SMT)) func() error {
		return func() error {
			c := m.Clone()
			f(c)
			return c.Check()
		}
	}
	runCheckCases(t, "SMT", []checkCase{
		{"NaN in P", corrupt(func(c *SMT) { c.pt.Set(4, 1, math.NaN()) }), "P", 4, ErrNonFinite},
		{"zero P", corrupt(func(c *SMT) { c.pt.Zero() }), "P", -1, ErrCollapsed},
		{"parallel rows", corrupt(func(c *SMT) {
			// Every atom embeds along one direction: P has rank 1.
			for a := range c.n {
				for l := range dim {
					c.pt.Set(a, l, float64(a+1)*float64(l+1))
				}
			}
		}), "P", -1, ErrCollapsed},
		{"one dimension lost", corrupt(func(c *SMT) {
			for a := range c.n {
				c.pt.Set(a, 2, c.pt.At(a, 0)+c.pt.At(a, 1))
			}
		}), "P", -1, ErrCollapsed},
	})
	if !m.Finite() {
		t.Error("Finite no longer holds")
	}
}

func TestWordStatsCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ws := NewWordStats(WordSettings{Words: 20, Memory: 100})
	for range 5 {
		var ids, lengths []int
		for range 10 {
			l := 2 + rng.IntN(6)
			lengths = append(lengths, l)
			for range l {
				ids = append(ids, rng.IntN(20))
			}
		}
		ws.Add(ids, lengths)
	}
	if err := ws.Check(); err != nil {
		t.Fatalf("healthy word statistics: %v", err)
	}
	first := -1
	for i := range ws.tab {
		if ws.tab[i].key != 0 {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("no pair stored")
	}
	corrupt := func(f func(c *WordStats)) func() error {
		return func() error {
			c := ws.Clone()
			f(c)
			return c.Check()
		}
	}
	runCheckCases(t, "word stats", []checkCase{
		{"Inf forgetting factor", corrupt(func(c *WordStats) { c.g = math.Inf(1) }), "weights", -1, ErrNonFinite},
		{"negative token weight", corrupt(func(c *WordStats) { c.w = -3 }), "weights", -1, ErrNegative},
		{"NaN count", corrupt(func(c *WordStats) { c.vd[7] = math.NaN() }), "V", 7, ErrNonFinite},
		{"negative count", corrupt(func(c *WordStats) { c.vd[8] = -1 }), "V", 8, ErrNegative},
		{"NaN pair", corrupt(func(c *WordStats) { c.tab[first].w = math.NaN() }), "pairs", first, ErrNonFinite},
		{"negative pair", corrupt(func(c *WordStats) { c.tab[first].w = -2 }), "pairs", first, ErrNegative},
	})
}

func TestWordVectorsCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const dim, n = 3, 6
	p := mat.NewDense(dim, n, nil)
	for l := range dim {
		for a := range n - 1 { // slot n−1 unused
			p.Set(l, a, rng.NormFloat64())
		}
	}
	if err := NewWordVectors(p).Check(); err != nil {
		t.Fatalf("healthy vectors: %v", err)
	}
	corrupt := func(f func(c *mat.Dense)) func() error {
		return func() error {
			c := mat.DenseCopyOf(p)
			f(c)
			return NewWordVectors(c).Check()
		}
	}
	runCheckCases(t, "word vectors", []checkCase{
		{"NaN vector", corrupt(func(c *mat.Dense) { c.Set(1, 2, math.NaN()) }), "vectors", 2, ErrNonFinite},
		{"collapsed", corrupt(func(c *mat.Dense) {
			for a := range n - 1 {
				for l := range dim {
					c.Set(l, a, float64(a+1)*float64(l+1))
				}
			}
		}), "vectors", -1, ErrCollapsed},
	})
	// A column whose squares underflow is stored but unused: its row
	// must stay zero up to them.
	tiny := mat.DenseCopyOf(p)
	tiny.Set(0, n-1, 1e-200)
	wv := NewWordVectors(tiny)
	if wv.Used(n - 1) {
		t.Fatal("a column of norm 1e-200 is used")
	}
	wv.unit.Set(n-1, 0, 0.5)
	if err := wv.Check(); !errors.Is(err, ErrNotUnit) {
		t.Errorf("unused slot with a vector: Check = %v, want ErrNotUnit", err)
	}
	wv = NewWordVectors(p)
	wv.unit.Set(0, 0, wv.unit.At(0, 0)+0.1)
	if err := wv.Check(); !errors.Is(err, ErrNotUnit) {
		t.Errorf("vector off the sphere: Check = %v, want ErrNotUnit", err)
	}
	// With one dimension every vector is ±1: parallel by nature.
	if err := NewWordVectors(mat.NewDense(1, 3, []float64{1, 2, 3})).Check(); err != nil {
		t.Errorf("one-dimensional vectors: %v", err)
	}
}

func TestADMMCheck(t *testing.T) {
	const n, k = 7, 5
	a := NewADMM(ADMMSettings{K: k}, n, rand.NewPCG(4, 5))
	if err := a.Check(); err != nil {
		t.Fatalf("fresh learner: %v", err)
	}
	for _, x := range admmBatches(4, 9, n, 3) {
		if err := a.Step(x); err != nil {
			t.Fatal(err)
		}
		if err := a.Check(); err != nil {
			t.Fatalf("after step %d: %v", a.Steps(), err)
		}
	}
	corrupt := func(f func(c *ADMM)) func() error {
		return func() error {
			c := a.Clone()
			f(c)
			return c.Check()
		}
	}
	runCheckCases(t, "ADMM", []checkCase{
		{"NaN in W", corrupt(func(c *ADMM) { c.w.Set(3, 1, math.NaN()) }), "W", 3, ErrNonFinite},
		{"zero W", corrupt(func(c *ADMM) { c.w.Zero() }), "W", -1, ErrCollapsed},
		{"Inf in G", corrupt(func(c *ADMM) { c.g.Set(0, 1, math.Inf(1)) }), "G", 1, ErrNonFinite},
		{"NaN step bound", corrupt(func(c *ADMM) { c.lip = math.NaN() }), "G", -1, ErrNonFinite},
		{"NaN Σ z xᵀ", corrupt(func(c *ADMM) { c.szx.Set(0, 0, math.NaN()) }), "sums", 0, ErrNonFinite},
		{"Inf Σ z", corrupt(func(c *ADMM) { c.sz[2] = math.Inf(-1) }), "sums", 2, ErrNonFinite},
		{"negative count", corrupt(func(c *ADMM) { c.n = -1 }), "sums", -1, ErrNegative},
		{"negative Σ‖x − x̂‖²", corrupt(func(c *ADMM) { c.rse = -1 }), "sums", -1, ErrNegative},
		{"negative Σ z_i²", corrupt(func(c *ADMM) { c.szz.Set(4, 4, -1) }), "sums", 4, ErrNegative},
		{"zero dictionary", corrupt(func(c *ADMM) { c.szx.Zero() }), "dictionary", -1, ErrCollapsed},
	})
	if !a.Finite() {
		t.Error("Finite no longer holds")
	}
}
