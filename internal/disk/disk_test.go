package disk

import "testing"

// An existing directory's file system has room; a missing directory's
// cannot be told.
func TestFree(t *testing.T) {
	dir := t.TempDir()
	if Free(dir) == 0 {
		t.Errorf("Free(%s) = 0", dir)
	}
	if n := Free(dir + "/missing/deeper"); n != 0 {
		t.Errorf("Free of a missing directory = %d, want 0", n)
	}
}
