package bench

import (
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// StartCPUProfile writes a CPU profile (go tool pprof) to path until the
// returned stop is called; with an empty path it does nothing. The
// benchmarks' -cpuprofile and smtd run's --cpuprofile use it.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// StartTrace writes an execution trace (go tool trace) to path until the
// returned stop is called; with an empty path it does nothing. The trace
// shows what a slow query or a learner waited for: a P, the garbage
// collector, the network or its input. bench throughput's -trace and smtd
// run's --trace use it.
func StartTrace(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}
