//go:build !linux

package daemon

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// threadPriorities says whether a thread has a nice value of its own: on
// Linux only.
const threadPriorities = false

// lowerLearnerPriority is only implemented on Linux, where a thread has a
// nice value of its own.
func lowerLearnerPriority(int) error {
	return fmt.Errorf("service.learn_nice on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// threadCPU is only implemented on Linux: ok is always false.
func threadCPU() (tid int, cpu time.Duration, ok bool) { return 0, 0, false }
