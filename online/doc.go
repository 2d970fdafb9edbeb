// Package online holds the streaming building blocks of the image
// pipeline: patch extraction, mean removal, running moments and whitening,
// row normalisation, and the online spherical k-means dictionary with its
// sparse features f_vq and f_gq. It also holds the online vocabulary that
// gives word streams their 1-hot feature (Vocabulary) and the soft
// K-nearest-neighbour evaluation of smt-minimalistic, App. J (KNN).
//
// Everything here is a plain synchronous library on gonum: no goroutines of
// its own (gonum's parallel dgemm may use some), no I/O, no logging, no
// globals. A minibatch is a *mat.Dense with one sample per row. Randomness
// comes only from a math/rand/v2 rand.Source that the caller passes in and
// owns, so that a caller can checkpoint it. Learner state serialises
// bit-exactly (MarshalBinary/UnmarshalBinary with a leading format version
// byte) so that a resumed stream continues exactly where it stopped.
//
// # The image pipeline
//
// The preprocessing follows Chen, Yun, Ma, Olshausen and LeCun,
// "Minimalistic Unsupervised Representation Learning with the Sparse
// Manifold Transform" (ICLR 2023), called smt-minimalistic below:
//
//  1. Every T×T patch of an image is a vector of T·T·C values
//     (ExtractPatches, PatchGrid; section 3, Figure 3).
//
//  2. The contextual mean, the average of the patches within grid range d,
//     is subtracted from each patch (RemoveMean with MeanContextual; App. C):
//
//     x̄_i = x_i − μ_i,   μ_i = (1/|N_i|) Σ_{j∈N_i} x_j,
//     N_i = {lm : |i−l| ≤ d and |j−m| ≤ d}.
//
//  3. The mean-removed patches are whitened with the operator of App. C,
//     estimated from running moments of the stream (Whitener):
//
//     x = (λI + Σ)^(−1/2) x̄.
//
//     A stream nobody controls can carry one image of absurd values; its
//     patches would dominate Σ and shrink W until every later patch
//     looks blank. Whitener.Observe therefore bounds each patch's
//     distance from the running mean before it enters Σ, and leaves out
//     patches holding NaN or ±Inf.
//
//  4. Each whitened patch is L2-normalised (NormalizeRows; App. D,
//     Algorithm 1 lines 2-6). Patches whose norm is below a threshold are
//     blank: they are set to zero, left out of learning, and get an
//     all-zero code. On MNIST 31.7% of the raw 6×6 patches are pure
//     background and about 21-23% are still blank after contextual mean
//     removal and whitening (see NormalizeRows); learning from them would
//     spend atoms on noise.
//
//  5. A dictionary Φ of K unit-norm atoms is learned by online spherical
//     k-means (KMeans; App. D, Algorithm 1), and each patch is coded by
//     f_vq, the atom of largest cosine (KMeans.Assign), or f_gq, every atom
//     whose cosine is at least a threshold t (KMeans.CodesGQ; section 3).
//
// Lloyd and Distortion are the batch reference the online dictionary is
// measured against.
//
// # Checks
//
// Whitener.Check and KMeans.Check tell a caller, after each minibatch,
// whether the learner is finite and not degenerate (a collapsed W, atoms
// off the sphere or all in one direction), with a *CheckError naming the
// part, so that a daemon can roll back to a good snapshot. They cost
// O(parameters), a small fraction of a minibatch step.
//
// # Performance
//
// The hot path of KMeans is the score matrix X·Φᵀ of a minibatch against
// the dictionary followed by a row-wise argmax (or threshold). It is
// computed with blas64.Gemm in row blocks sized so that the block of scores
// stays in cache while it is scanned; blas64 dispatches to gonum's pure-Go
// parallel dgemm unless the program installs another implementation with
// blas64.Use, which then speeds up every dictionary in the process.
package online
