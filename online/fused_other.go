//go:build !amd64 || purego

package online

func bestKernel() *kernel { return generic }

// kernels returns every kernel this build runs.
func kernels() []*kernel { return []*kernel{generic} }
