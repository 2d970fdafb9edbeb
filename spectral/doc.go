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
// hundred products. The Dense method (gonum's EigenSym, O(n³)) is the
// reference for small problems and the path for non-diagonal V (f_gq
// codes).
//
// Like every learning package of smtd, spectral is a plain synchronous
// library: no goroutines of its own, no I/O, no globals; randomness only
// from a rand.Source the caller passes.
package spectral
