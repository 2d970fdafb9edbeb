// Package parts runs the ranges of a loop on several goroutines.
//
// The learners of smtd cut a batch's work (blocks of rows to score, the
// images of a minibatch, the grids of an SMT gradient) into a few
// contiguous ranges, one a core, and compute each range as they would on
// one core: the result is the same bits whatever the number of parts.
package parts

import "sync"

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
