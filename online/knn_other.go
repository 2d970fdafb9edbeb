//go:build !amd64 || purego

package online

func bestKNNKernel() *knnKernel { return knnGeneric }

// knnKernels returns every KNN kernel this build runs.
func knnKernels() []*knnKernel { return []*knnKernel{knnGeneric} }
