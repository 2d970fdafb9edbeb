package sgd

import (
	"math/rand/v2"
	"testing"
)

// TestWordStatsGrow adds random pairs until the pair table has doubled
// from 1,024 to 131,072 slots, through doublings in place and into new
// arrays, and checks after each minibatch that every pair is where find
// looks for it, with the count of a reference map, and that no other
// pair is stored.
func TestWordStatsGrow(t *testing.T) {
	const words = 4000
	rng := rand.New(rand.NewPCG(5, 6))
	ws := NewWordStats(WordSettings{Words: words, Window: 1})
	ref := map[uint64]float64{}
	inPlace, moved := 0, 0
	for len(ws.tab) < 1<<17 {
		before, array := len(ws.tab), &ws.tab
		var first *wordPair
		if before > 0 {
			first = &(*array)[0]
		}
		ids := make([]int, 2000)
		for i := range ids {
			// A skewed choice: clusters of frequent words, long probes.
			ids[i] = int(float64(words) * rng.Float64() * rng.Float64())
		}
		ws.Add(ids, []int{len(ids)})
		for i := 0; i+1 < len(ids); i++ {
			if ids[i] != ids[i+1] {
				ref[pairKey(ids[i], ids[i+1])]++
			}
		}
		if before > 0 && len(ws.tab) > before {
			if &ws.tab[0] == first {
				inPlace++
			} else {
				moved++
			}
		}
		if ws.used != len(ref) {
			t.Fatalf("%d pairs stored, want %d", ws.used, len(ref))
		}
		for i, p := range ws.tab {
			if p.key == 0 {
				continue
			}
			if j, ok := ws.find(p.key); !ok || j != i {
				a, b := pairSlots(p.key)
				t.Fatalf("table of %d slots: pair (%d, %d) in slot %d, find gives %d", len(ws.tab), a, b, i, j)
			}
			if p.w != ref[p.key] {
				a, b := pairSlots(p.key)
				t.Fatalf("C_%d,%d = %v, want %v", a, b, p.w, ref[p.key])
			}
		}
	}
	if inPlace == 0 || moved == 0 {
		t.Errorf("%d doublings in place, %d into a new array: want both", inPlace, moved)
	}
}
