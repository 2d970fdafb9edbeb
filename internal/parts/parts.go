// Package parts runs the ranges of a loop on several goroutines.
//
// The learners of smtd cut a batch's work (blocks of rows to score, the
// images of a minibatch, the grids of an SMT gradient) into a few
// contiguous ranges, one a core, and compute each range as they would on
// one core: the result is the same bits whatever the number of parts.
package parts

import (
	"sync"
	"sync/atomic"
)

// Run runs f(part, lo, hi) over 0…n−1 cut into parts contiguous ranges,
// numbered from 0 in order, lo = part·n/parts and hi = (part+1)·n/parts,
// each on a goroutine of its own but the first, which runs on the
// caller. It returns when all are done. parts must be at least 1.
//
// f reaches other goroutines, so a closure passed as f is allocated;
// callers on a path that must not allocate call f themselves when one
// part will do.
func Run(n, parts int, f func(part, lo, hi int)) {
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Go(func() { f(p, p*n/parts, (p+1)*n/parts) })
	}
	f(0, 0, n/parts)
	wg.Wait()
}

// Share runs f(worker, lo, hi) over 0…n−1 cut into ranges of chunk
// indices (the last one shorter), which up to workers goroutines, the
// caller worker 0 of them, take in turn as each finishes its last: a
// goroutine the kernel holds up (another thread on its core, a virtual
// CPU the host has not run) delays at most the range it holds, not a
// fixed share of the work that the others then wait for. Which worker
// computes a range is not fixed, so f's result for a range must not
// depend on it: worker is for workspaces of f's own, one a worker.
// workers and chunk must be at least 1. It returns when all ranges are
// done.
func Share(n, workers, chunk int, f func(worker, lo, hi int)) {
	var next atomic.Int64
	take := func(worker int) {
		for {
			hi := int(next.Add(int64(chunk)))
			lo := hi - chunk
			if lo >= n {
				return
			}
			f(worker, lo, min(hi, n))
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < min(workers, (n+chunk-1)/chunk); w++ {
		wg.Go(func() { take(w) })
	}
	take(0)
	wg.Wait()
}
