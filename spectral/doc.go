// Package spectral holds the closed-form (spectral) solutions of the
// embedding problems smtd learns, and the matrix-free eigensolver they
// need.
//
// # The sparse manifold transform
//
// SolveSMT solves the embedding problem of the sparse manifold transform,
// Chen, Paiton and Olshausen, "The Sparse Manifold Transform" (NeurIPS
// 2018), eq. 8, restated as eq. 3 of Chen, Yun, Ma, Olshausen and LeCun,
// "Minimalistic Unsupervised Representation Learning with the Sparse
// Manifold Transform" (ICLR 2023):
//
//	min_P ‖P A D‖²_F   s.t.  P V P^T = I,
//
// whose solution is P = U^T V^(−1/2), U the eigenvectors of
// V^(−1/2) (A D D^T A^T) V^(−1/2) with the smallest eigenvalues. The
// matrices come from a Pencil, which package sgd's Stats implements from a
// stream of sparse codes; the online SGD solution of the same problem
// (sparse-manifold-transform, Supp. C) is sgd.SMT, and Objective and
// ConstraintError measure either against the statistics.
//
// # Eigensolver
//
// With 1-hot codes V is diagonal and V^(−1/2) L V^(−1/2) (L = ADDᵀAᵀ
// normalised) can be applied with one product against L's packed storage,
// so Smallest, a thick-restart Lanczos method with full
// reorthogonalisation, finds the few eigenvectors needed without any
// dense n×n factorisation: at K = 4096 and Dim = 32 a solve takes a few
// hundred products. A deflation check after convergence finds the copies
// of a repeated eigenvalue (a co-occurrence graph in several components)
// that a single Krylov space misses. The Dense method (gonum's EigenSym,
// O(n³)) is the reference for small problems and the path for
// non-diagonal V (f_gq codes).
//
// # Non-redundant spectral embeddings
//
// Blau and Michaeli, "Non-Redundant Spectral Dimensionality Reduction"
// (ECML PKDD 2017), called non-redundant-spectral-dimensionality-reduction
// in the docs: a spectral embedding's later coordinates are often
// functions of its first ones (the 2nd Laplacian eigenmap of a long strip
// is a harmonic of the 1st), so a few coordinates carry less than they
// seem to. NonRedundant (Alg. 1) computes coordinates one at a time, each
// the top eigenvector of (I − V_i V_iᵀ) K (I − V_i V_iᵀ), V_i the dominant
// right singular vectors of a kNN-sparsified Nadaraya-Watson smoother over
// the coordinates before it, by Lanczos on an operator that never forms
// that matrix. LEM and NonRedundantLEM apply it to Laplacian eigenmaps of
// a point set (kNN Gaussian affinity; the minimisation turned into a
// maximisation, Alg. 1 step 2); SolveSMTNonRedundant chooses the rows of
// the closed-form SMT P that way, the functions living on the dictionary
// atoms weighted by their usage. Redundancy measures, for any embedding,
// how far each coordinate is predictable from the ones before it (the
// paper's Fig. 3). `smtd bench strip`, `smtd bench lem-mnist` and `smtd
// bench mnist --nonredundant` measure them (BENCHMARKS.md).
//
// Like every learning package of smtd, spectral is a plain synchronous
// library: no goroutines of its own, no I/O, no globals; randomness only
// from a rand.Source the caller passes.
package spectral

// Gonum's float64 matrix products run on internal/gemm, which installs
// itself (blas64.Use) when imported.
import _ "github.com/smtd/smtd/internal/gemm"
