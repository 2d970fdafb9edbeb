//go:build !unix && !windows

package disk

// Free is 0: this system's free space cannot be told.
func Free(dir string) uint64 { return 0 }
