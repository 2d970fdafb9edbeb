// Package sgd learns the embedding of the sparse manifold transform (SMT)
// online, by stochastic gradient descent, and turns sparse codes into
// image vectors with it; it also holds the word co-occurrence statistics
// of SMT word embeddings (WordStats) and dictionary learning by kernel
// matching with ADMM (ADMM), whose W-step is minibatch gradient descent.
//
// The papers: Chen, Paiton and Olshausen, "The Sparse Manifold Transform"
// (NeurIPS 2018), called sparse-manifold-transform below, section 3 and
// Supplement C; and Chen, Yun, Ma, Olshausen and LeCun, "Minimalistic
// Unsupervised Representation Learning with the Sparse Manifold
// Transform" (ICLR 2023), called smt-minimalistic, sections 2-3 and
// App. C, D, G, J.
//
// # The problem
//
// Sparse codes α (package online's f_vq or f_gq of whitened patches) are
// embedded linearly, β = Pα, so that neighbouring patches (within context
// range d on the patch grid of one image, smt-minimalistic App. G), tokens
// (within a window) or frames (t−1, t, t+1) get nearby embeddings:
//
//	min_P ‖P A D‖²_F   s.t.  P V P^T = I      (smt-minimalistic eq. 3)
//
// Stats accumulates V = E[ααᵀ] and L = ADDᵀAᵀ (normalised per column of
// D) from a stream of minibatches, exploiting sparsity (1-hot codes need
// no dense product: V is diagonal and L a co-occurrence Laplacian), with
// optional exponential forgetting. Package spectral solves the problem in
// closed form from a Stats; SMT solves it online by the whitened-gradient
// SGD of sparse-manifold-transform Supp. C (gradient step, shrinkage,
// parallel orthogonalisation), and its fixed point is the closed-form
// optimum.
//
// # From codes to image vectors
//
// The embedding of a patch is β = Pα/‖Pα‖; the patch embeddings of an
// image are average-pooled (kernel 4, stride 2) and normalised per
// position (smt-minimalistic section 3, Figure 3): SMT.EmbedImagesVQ.
// online.KNN, the soft-KNN classifier of App. J, evaluates the vectors.
//
// # Blank patches
//
// About 31% of MNIST's 6×6 patches are pure background, and after
// contextual mean removal and whitening online.NormalizeRows still flags
// about 10% (contextual mean d = 3, threshold 0.1) to 24% (d = 1) as blank
// (code −1; `smtd bench kmeans -context D` prints the share). How they
// enter the statistics and the embedding is a setting, BlankMode, shared
// by Stats and SMT: BlankAtom (the default) makes them one more atom,
// learned and embedded like the others, so the image vector records where
// the background is; BlankSkip leaves them out (no V, no pairs, zero
// embedding). Measured through the daemon on MNIST (5,000 training and
// 1,000 test digits, K = 1024, Dim = 32, closed form, soft-KNN top-1;
// BENCHMARKS.md has the command):
//
//	contextual mean d   context range   BlankAtom   BlankSkip
//	3                   3               97.6%       96.6%
//	3                   whole image     96.8%       96.8%
//	1                   3               96.9%       96.9%
//	1                   whole image     95.8%       94.5%
//
// The blank atom never loses and is worth a point with d = 3 and a
// 3-position context, and 1.3 points with d = 1 and the whole image.
// (1,000 test digits give a standard error of about 0.5 point.)
//
// # Time and text
//
// The second-order temporal term of sparse-manifold-transform eq. 8 links
// the codes of the same patch in frames t−1, t, t+1 of one video:
// Stats.AddTemporalVQ for 1-hot codes, AddTemporalGQ for weighted codes
// (the unit disc's interpolation codes; soft-thresholded f_gq), with the
// matching SMT steps (temporal.go). A linear map of a 1-hot code jumps
// from atom to atom, so only weighted codes straighten video better than
// PCA (`smtd bench video`).
//
// Words are 1-hot codes over a vocabulary of tens of thousands of slots,
// too many for Stats' dense K×K triangle: WordStats keeps the
// co-occurrences of tokens within a window (smt-minimalistic App. B) in a
// bounded hash table, implements spectral.Pencil, and Embed solves P in
// closed form; the columns of P are the word embeddings (WordVectors
// answers nearest-neighbour queries). Pairs are weighted by PPMI by
// default: with the paper's raw counts the neighbour lists on the Brown
// corpus are mostly noise (BENCHMARKS.md).
//
// # Dictionary learning by kernel matching
//
// ADMM implements dictionary-learning-kernel-matching-admm (sections 2-4,
// appendix 6.3-6.4): sparse codes (R₁, proximal Z-step, eq. 9) or codes on
// the simplex (R₂, projected Z-step, eq. 13), P-, M- and W-steps in the
// three schedules of section 4.1, the per-sample variables only for the
// minibatch in flight, and the implicit dictionary A = (1/T) X Zᵀ H⁻¹
// from decayed running sums. The ADMM type's comment maps the code to the
// equations.
//
// # Use
//
// A pipeline adds each minibatch of codes to a Stats, then either steps
// an SMT on it (online) or, from time to time, solves for P with package
// spectral and loads it with SMT.SetP (closed form); embedding requests
// go to a Clone. All state serialises bit-exactly (MarshalBinary with a
// leading format version byte) for exact resume. After each minibatch a
// caller may ask every learner's Check whether it is finite and not
// degenerate (a zero or rank-collapsed P, negative counts, an ADMM whose
// codes are all zero); a *CheckError names the part, at O(parameters)
// cost.
//
// Like every learning package of smtd, sgd is a plain synchronous library
// on gonum: no goroutines of its own, no I/O, no logging, no globals;
// randomness only from a rand.Source the caller passes and owns.
package sgd
