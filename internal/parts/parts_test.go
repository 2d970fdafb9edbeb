package parts

import (
	"sync/atomic"
	"testing"
)

// Every index is visited once, by the part whose range holds it, and
// the ranges are contiguous and in order.
func TestRunCoversEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 100} {
		for _, k := range []int{1, 2, 3, 8} {
			seen := make([]atomic.Int32, n)
			owner := make([]int, n)
			Run(n, k, func(part, lo, hi int) {
				if lo != part*n/k || hi != (part+1)*n/k {
					t.Errorf("n=%d parts=%d: part %d got [%d, %d)", n, k, part, lo, hi)
				}
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
					owner[i] = part
				}
			})
			for i := range seen {
				if seen[i].Load() != 1 {
					t.Errorf("n=%d parts=%d: index %d visited %d times", n, k, i, seen[i].Load())
				}
				if i > 0 && owner[i] < owner[i-1] {
					t.Errorf("n=%d parts=%d: index %d in part %d after part %d", n, k, i, owner[i], owner[i-1])
				}
			}
		}
	}
}

// Every index is visited once, in ranges of chunk indices that start at
// multiples of chunk, by workers numbered below workers.
func TestShareCoversEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 100} {
		for _, workers := range []int{1, 2, 3, 8} {
			for _, chunk := range []int{1, 3, 64} {
				seen := make([]atomic.Int32, n)
				Share(n, workers, chunk, func(worker, lo, hi int) {
					if lo%chunk != 0 || hi != min(n, lo+chunk) || worker < 0 || worker >= workers {
						t.Errorf("n=%d workers=%d chunk=%d: worker %d got [%d, %d)", n, workers, chunk, worker, lo, hi)
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
				})
				for i := range seen {
					if seen[i].Load() != 1 {
						t.Errorf("n=%d workers=%d chunk=%d: index %d visited %d times", n, workers, chunk, i, seen[i].Load())
					}
				}
			}
		}
	}
}
