// Package hebbian learns kernel similarity matching online with a
// one-layer recurrent network of Hebbian and anti-Hebbian synapses.
//
// The paper: "Kernel Similarity Matching with Hebbian Neural Networks"
// (anonymous, under review), called kernel-similarity-matching-hebbian
// below: sections 2-3 (the bound and the network), 4.1-4.2 (half moons,
// MNIST) and appendix A.1-A.8.
//
// # The problem
//
// Given inputs x_t and a positive semi-definite kernel f, find responses
// y_t ∈ R^n whose inner products match the input similarities,
//
//	min_{y} (1/T²) Σ_{s,t} [f(x_s, x_t) − y_s·y_t]²          (eq. 1)
//
// whose optimum is kernel PCA, without ever forming the T×T kernel
// matrix. The paper bounds the cross term with one landmark w_i and
// scale q_i per neuron (Theorem 1, eq. 3), removes the square of the
// response correlation with a Legendre transform (lateral weights L,
// eq. 7), and arrives at the min-max problem of eq. 9 over the
// per-sample energy of eq. 8. Network implements it: responses
// y = (L + λI)⁻¹(q∘f(W, x)) (eq. 12) and stochastic gradient
// descent-ascent on W, q, L with two time scales (eqs. 10, 13-15).
//
// # Kernels
//
// A Kernel is any positive semi-definite f(u, v) = φ(u·v, ‖u‖², ‖v‖²):
// Gaussian (section 4.1), PowerCosine ‖u‖‖v‖(û·v̂)^α (section 4.2),
// Linear (linear similarity matching) and Polynomial. One matrix product
// X Wᵀ per minibatch gives every value and gradient. Homogeneous kernels
// (power-cosine, linear, polynomial without offset) keep q = 1 (A.3).
//
// # Beyond the paper: Mixing
//
// The paper's network matches the Gaussian kernel less well than
// Nyström with its own learned landmarks, and stops improving beyond
// about 16 neurons on half moons (Fig. 3c). The cause is the bound: each
// neuron replaces the kernel matrix by a rank-1 Nyström approximation
// with its own landmark (A.1). Settings.Mixing lets every neuron read
// every kernel unit through a learned matrix Q (Hebbian, with a
// preconditioned step), which turns the bound into the full rank-n
// Nyström approximation: the responses then approach Nyström with the
// learned landmarks. The paper's network is the diagonal case. Measured
// with `smtd bench moons` (1600 points, σ = 0.3, minibatches of 64;
// normalised errors ‖K − YYᵀ‖_F/‖K‖_F averaged over 3 seeds):
//
//	n                                           8      16      32      64
//	paper's network (N(0,1) init, A.6)        0.473   0.216   0.163   0.212
//	Mixing (W = first n points, η_w,q = 0.03) 0.420   0.112   0.107   0.141
//	Nyström, k-means landmarks                0.425   0.119   0.046   0.004
//	Nyström, uniform landmarks                0.640   0.370   0.176   0.023
//	kernel PCA (optimal)                      0.323   0.100   0.019   0.001
//
// Larger networks want smaller rates than 0.03 (see BENCHMARKS.md).
//
// # Baselines
//
// The comparisons of section 4 and A.5 use the same kernel code:
// KernelMatrix, NormalizedError ‖K − YYᵀ‖_F/‖K‖_F, KernelPCA (optimal
// rank n), Nystrom with UniformLandmarks, KMeansLandmarks (Euclidean
// k-means) or the network's Weights, and RandomFourier features for the
// Gaussian kernel.
//
// # Use
//
// The package is a plain synchronous library: no goroutines, no I/O, no
// global state. A minibatch is a *mat.Dense with one sample per row.
// Randomness comes only from the rand.Source given to New (initial W)
// and to the randomised baselines. A learner's state serialises
// bit-exactly (MarshalBinary), and a step that would diverge is refused
// with a *StepError, leaving the network as it was, so that a caller can
// skip the minibatch or roll back:
//
//	net := hebbian.New(hebbian.Settings{Neurons: 16, Dim: 2, Kernel: hebbian.Gaussian{Sigma: 0.3}}, src)
//	for x := range minibatches {
//		if err := net.Step(nil, x); err != nil { ... } // ErrNonFinite or *StepError
//	}
//	net.Transform(&y, x) // responses, read-only
//
// Network.Check reports, with a *CheckError, a state that is not finite
// or no longer usable (L + λI not positive definite, a zero regulatory
// term), for a caller that checks its snapshots before keeping them.
package hebbian

// Gonum's float64 matrix products run on internal/gemm, which installs
// itself (blas64.Use) when imported.
import _ "github.com/smtd/smtd/internal/gemm"
