package daemon

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// threadPriorities says whether a thread has a nice value of its own.
const threadPriorities = true

// lowerLearnerPriority moves the calling goroutine, a learnerThread's,
// onto an OS thread of its own and raises that thread's nice value to nice
// (service.learn_nice). The goroutine never unlocks the thread, so the
// thread ends with it and no other goroutine ever runs at the lowered
// priority; goroutines started from it run on other threads, at the
// daemon's priority.
func lowerLearnerPriority(nice int) error {
	runtime.LockOSThread()
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}

// threadCPU returns the calling thread's id and the CPU time it has run
// (CLOCK_THREAD_CPUTIME_ID); ok is false if the clock cannot be read, or
// if the goroutine moved to another thread while it was read (it may at
// the return of any system call).
func threadCPU() (tid int, cpu time.Duration, ok bool) {
	var ts unix.Timespec
	tid = unix.Gettid()
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil || unix.Gettid() != tid {
		return 0, 0, false
	}
	return tid, time.Duration(ts.Nano()), true
}
