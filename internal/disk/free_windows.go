package disk

import "golang.org/x/sys/windows"

// Free is the space available to the calling user in dir's volume, in
// bytes; 0 if it cannot be told.
func Free(dir string) uint64 {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0
	}
	var free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, nil, nil); err != nil {
		return 0
	}
	return free
}
