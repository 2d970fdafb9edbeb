//go:build unix

package disk

import "golang.org/x/sys/unix"

// Free is the space available to unprivileged writers in dir's file
// system, in bytes; 0 if it cannot be told.
func Free(dir string) uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return uint64(st.Bavail) * uint64(st.Bsize)
}
