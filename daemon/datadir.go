package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DataDirError says why the configured data_dir cannot hold the
// JetStream store and the checkpoints.
type DataDirError struct {
	Dir     string // data_dir as configured
	Problem string // what is wrong, e.g. "is not a directory"
	Err     error  // the underlying error, if any
}

func (e *DataDirError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("smtd: data_dir %s %s", e.Dir, e.Problem)
	}
	return fmt.Sprintf("smtd: data_dir %s %s: %v", e.Dir, e.Problem, e.Err)
}

func (e *DataDirError) Unwrap() error { return e.Err }

// checkDataDir creates dir if needed and checks that it is a directory
// the daemon can write, by creating and removing a file in it. Without
// it an unusable data_dir surfaces only as an embedded server that never
// comes up, or as the first checkpoint failing.
func checkDataDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return &DataDirError{Dir: dir, Problem: "cannot be created", Err: err}
		}
	case errors.Is(err, syscall.ENOTDIR):
		if f := fileAbove(dir); f != "" {
			return &DataDirError{Dir: dir, Problem: "is under " + f + ", which is not a directory"}
		}
		return &DataDirError{Dir: dir, Problem: "cannot be read", Err: err}
	case err != nil:
		return &DataDirError{Dir: dir, Problem: "cannot be read", Err: err}
	case !fi.IsDir():
		return &DataDirError{Dir: dir, Problem: fmt.Sprintf("is not a directory (a %s)", fileKind(fi.Mode()))}
	}
	f, err := os.CreateTemp(dir, ".smtd-write-check-*")
	if err != nil {
		return &DataDirError{Dir: dir, Problem: "is not writable", Err: err}
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		os.Remove(name)
		return &DataDirError{Dir: dir, Problem: "is not writable", Err: err}
	}
	if err := os.Remove(name); err != nil {
		return &DataDirError{Dir: dir, Problem: "does not allow removing files", Err: err}
	}
	return nil
}

// fileAbove returns the nearest parent of dir that exists and is not a
// directory, or "".
func fileAbove(dir string) string {
	for p := filepath.Dir(dir); p != filepath.Dir(p); p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "non-directory file"
}
