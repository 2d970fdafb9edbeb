package bench

import "testing"

// TestADMMMoonsCodesUseTwoAnchors runs the half-moons benchmark at a
// tenth of its iterations and checks the paper's Fig. 3: most codes on
// the simplex mix two anchors (a piecewise-linear curve), and the
// anchors reconstruct the points.
func TestADMMMoonsCodesUseTwoAnchors(t *testing.T) {
	got := figures(t, ADMMMoons, "-iters", "500")
	if got["admm_moons_l0_mode"] != 2 || got["admm_moons_l0_2"] < 0.6 {
		t.Errorf("‖z‖₀ mode %v with %v of the points at 2, want 2 and >= 0.6", got["admm_moons_l0_mode"], got["admm_moons_l0_2"])
	}
	if got["admm_moons_r2"] < 0.99 {
		t.Errorf("R² %v, want >= 0.99", got["admm_moons_r2"])
	}
}
