//go:build !amd64 || purego

package gemm

// bestKernel returns nil: without the assembly kernels gonum's Dgemm does
// the product. The portable kernel, a 4×4 tile of math.FMA chains, ran at
// 4.5 GFLOP/s against gonum's 8 on amd64 with the purego tag (gonum keeps
// its vector assembly there, and Go has too few float registers for a
// larger tile); it is kept as the reference the tests hold the assembly
// to.
func bestKernel() *kernel { return nil }

// kernels returns every kernel this build runs.
func kernels() []*kernel { return []*kernel{generic} }
