package sgd_test

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/smtd/smtd/online"
	"github.com/smtd/smtd/record"
	"github.com/smtd/smtd/sgd"
	"github.com/smtd/smtd/spectral"
	"gonum.org/v1/gonum/mat"
)

// mnistGrid is the 6×6 patch grid of a 28×28 digit (smt-minimalistic,
// section 3): 23×23 patches.
var mnistGrid = online.PatchGrid{Width: 28, Height: 28, Size: 6}

// readDigits decodes the first n PNG digits of a recorded stream, pixels
// scaled to [0, 1], with their labels.
func readDigits(t testing.TB, file string, n int) ([][]float64, []int) {
	t.Helper()
	msgs, err := record.ReadFile(filepath.Join("..", "testdata", "streams", file))
	if err != nil {
		t.Fatal(err)
	}
	var imgs [][]float64
	var labels []int
	for _, m := range msgs[:n] {
		img, err := png.Decode(bytes.NewReader(m.Data))
		if err != nil {
			t.Fatal(err)
		}
		g := img.(*image.Gray)
		px := make([]float64, len(g.Pix))
		for i, v := range g.Pix {
			px[i] = float64(v) / 255
		}
		imgs = append(imgs, px)
		l, err := strconv.Atoi(m.Header.Get("Smtd-Label"))
		if err != nil {
			t.Fatal(err)
		}
		labels = append(labels, l)
	}
	return imgs, labels
}

// digitCodes is the preprocessing of smt-minimalistic on a few hundred
// digits: contextual mean (d = 3), whitening (λ = 0.1), normalisation
// (blank below 0.1) and f_vq codes from an online spherical k-means
// dictionary learned in two passes.
type digitCodes struct {
	train, test             []int // f_vq codes, image after image
	trainLabels, testLabels []int
	nTrain, nTest           int
}

var (
	digitsOnce sync.Once
	digits     digitCodes
)

func mnistCodes(t testing.TB) *digitCodes {
	digitsOnce.Do(func() {
		const k = 64
		tr, trl := readDigits(t, "mnist-train-1000.smtdrec", 300)
		te, tel := readDigits(t, "mnist-test-200.smtdrec", 200)
		p := online.Patcher{Grid: mnistGrid, Mean: online.MeanContextual, Context: 3}
		l, dim := mnistGrid.Len(), mnistGrid.Dim()
		extract := func(imgs [][]float64) *mat.Dense {
			x := mat.NewDense(len(imgs)*l, dim, nil)
			for i, img := range imgs {
				p.Extract(x.Slice(i*l, (i+1)*l, 0, dim).(*mat.Dense), img)
			}
			return x
		}
		xtr, xte := extract(tr), extract(te)
		w := online.NewWhitener(dim, online.WhitenSettings{Lambda: 0.1})
		if err := w.Observe(xtr, nil); err != nil {
			t.Fatal(err)
		}
		var wtr, wte mat.Dense
		w.Whiten(&wtr, xtr)
		w.Whiten(&wte, xte)
		blank := online.NormalizeRows(&wtr, 0.1, nil)
		online.NormalizeRows(&wte, 0.1, nil)
		km := online.NewKMeans(online.KMeansSettings{K: k, Dim: dim}, rand.NewPCG(1, 2))
		for pass := 0; pass < 2; pass++ {
			for i := 0; i < len(tr); i += 20 {
				km.Learn(wtr.Slice(i*l, (i+20)*l, 0, dim), blank[i*l:(i+20)*l])
			}
		}
		digits = digitCodes{
			train: make([]int, len(tr)*l), test: make([]int, len(te)*l),
			trainLabels: trl, testLabels: tel, nTrain: len(tr), nTest: len(te),
		}
		km.Assign(digits.train, nil, &wtr)
		km.Assign(digits.test, nil, &wte)
	})
	if digits.train == nil {
		t.Fatal("preprocessing failed")
	}
	return &digits
}

// TestSGDReachesClosedForm streams 300 recorded MNIST digits through the
// online SGD of Supp. C (the first pass adds each minibatch to the
// statistics before stepping on it, like the daemon; later passes only
// step) and checks that it reaches the closed-form optimum of the final
// statistics: objective within 2%, constraint within 1e-6. With
// DropConstant the optimum is that of the eigenvectors 2 ... dim+1 (Drop
// 1), above the one with the constant, and P V 1 must vanish.
func TestSGDReachesClosedForm(t *testing.T) {
	d := mnistCodes(t)
	const k, dim, batch = 64, 8, 10
	for _, drop := range []int{0, 1} {
		t.Run("drop="+strconv.Itoa(drop), func(t *testing.T) {
			st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 3})
			m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: dim, LearningRate: 0.1, Decay: 0.01, DropConstant: drop == 1}, rand.NewPCG(3, 4))
			learnDigits(t, d, st, m, batch, 8, nil)
			var p mat.Dense
			if _, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: dim, Drop: drop}, nil); err != nil {
				t.Fatal(err)
			}
			closed := spectral.Objective(st, &p)
			got := spectral.Objective(st, m.P())
			c := spectral.ConstraintError(st, m.P())
			t.Logf("objective: SGD %.5g after %d steps, closed form %.5g (%+.2f%%); ‖PVPᵀ − I‖ = %.3g",
				got, m.Steps(), closed, 100*(got/closed-1), c)
			if got > 1.02*closed || got < closed*(1-1e-9) {
				t.Errorf("SGD objective %.5g not within 2%% above the closed-form optimum %.5g", got, closed)
			}
			if c > 1e-6 {
				t.Errorf("‖PVPᵀ − I‖ = %.3g, want <= 1e-6", c)
			}
			if ce := spectral.ConstraintError(st, &p); ce > 1e-9 {
				t.Errorf("closed form: ‖PVPᵀ − I‖ = %.3g", ce)
			}
			if drop == 0 {
				return
			}
			// P V Pᵀ = I (checked above) gives each row p unit V-norm,
			// so p V 1 is compared with 0 absolutely.
			v := st.DiagV(nil)
			for r := 0; r < dim; r++ {
				var pv1 float64
				for a, va := range v {
					pv1 += m.P().At(r, a) * va
				}
				if math.Abs(pv1) > 1e-9 {
					t.Errorf("row %d of P: p V 1 = %.3g, want 0", r, pv1)
				}
			}
		})
	}
}

// learnDigits streams the training digits through st and m in minibatches
// of batch images, as the daemon does: the first pass adds each minibatch
// to the statistics before stepping on it, later passes only step. each,
// if not nil, runs after every step.
func learnDigits(t *testing.T, d *digitCodes, st *sgd.Stats, m *sgd.SMT, batch, passes int, each func(pass, i int)) {
	t.Helper()
	l := mnistGrid.Len()
	for pass := range passes {
		for i := 0; i < d.nTrain; i += batch {
			codes := d.train[i*l : (i+batch)*l]
			if pass == 0 {
				st.AddImagesVQ(codes, batch, mnistGrid)
			}
			if err := m.StepImagesVQ(st, codes, batch, mnistGrid); err != nil {
				t.Fatal(err)
			}
			if each != nil {
				each(pass, i)
			}
		}
	}
}

// TestEmbeddingClassifiesDigits guards the whole image pipeline on the
// recorded slice: the soft-KNN accuracy of the SMT image vectors (closed
// form, 300 training digits, 200 test digits) must beat raw pixels.
func TestEmbeddingClassifiesDigits(t *testing.T) {
	d := mnistCodes(t)
	const k, dim = 64, 8
	st := sgd.NewStats(sgd.StatsSettings{K: k, Range: 3})
	st.AddImagesVQ(d.train, d.nTrain, mnistGrid)
	var p mat.Dense
	if _, err := spectral.SolveSMT(&p, st, spectral.Settings{Dim: dim}, nil); err != nil {
		t.Fatal(err)
	}
	m := sgd.NewSMT(sgd.SMTSettings{K: k, Dim: dim}, rand.NewPCG(5, 6))
	if err := m.SetP(&p); err != nil {
		t.Fatal(err)
	}
	var etr, ete mat.Dense
	m.EmbedImagesVQ(&etr, d.train, d.nTrain, mnistGrid, sgd.PoolSettings{})
	m.EmbedImagesVQ(&ete, d.test, d.nTest, mnistGrid, sgd.PoolSettings{})
	pred := make([]int, d.nTest)
	if err := online.SoftKNN(pred, &etr, d.trainLabels, &ete, online.KNNSettings{}); err != nil {
		t.Fatal(err)
	}
	smt := online.Top1(pred, d.testLabels)

	tr, _ := readDigits(t, "mnist-train-1000.smtdrec", d.nTrain)
	te, _ := readDigits(t, "mnist-test-200.smtdrec", d.nTest)
	raw := func(imgs [][]float64) *mat.Dense {
		x := mat.NewDense(len(imgs), 784, nil)
		for i, img := range imgs {
			x.SetRow(i, img)
		}
		return x
	}
	if err := online.SoftKNN(pred, raw(tr), d.trainLabels, raw(te), online.KNNSettings{}); err != nil {
		t.Fatal(err)
	}
	pixels := online.Top1(pred, d.testLabels)
	t.Logf("soft-KNN top-1 on 200 test digits: SMT %.1f%%, raw pixels %.1f%%", 100*smt, 100*pixels)
	if smt <= pixels {
		t.Errorf("SMT top-1 %.1f%% does not beat raw pixels %.1f%%", 100*smt, 100*pixels)
	}
}
