package bench

import (
	"strings"
	"testing"
)

// The bench's cost lines follow from the run's readings: the CPU per
// 1,000 images beyond what each daemon spends idle over the timed
// window, and the workers one owner core feeds when each codes as fast
// as its core allows.
func TestClusterReportAtSaturation(t *testing.T) {
	r := &workerRun{workers: 2, secs: 10, ownerCPU: 1, workersCPU: 30, ownerIdle: 0.02, workerIdle: 0.01, ownerBytes: 5e7}
	var b strings.Builder
	r.report(&b, 5000)
	// Per 1,000 images: owner (1 − 0.02·10)/5 = 0.16, workers
	// (30 − 2·0.01·10)/5 = 5.96; (0.98/0.16)/(0.99/5.96) = 36.87. The
	// owner merges 0.98/0.16 = 6.125 thousand images a second at 10,000
	// bytes each: 490 Mbit/s.
	for _, want := range []string{
		"cluster_owner_cpu_seconds_per_1000_images: 0.200\n",
		"cluster_workers_per_owner: 30.0\n",
		"cluster_owner_idle_cpu_fraction: 0.0200\n",
		"cluster_workers_idle_cpu_fraction: 0.0100\n",
		"cluster_owner_marginal_cpu_seconds_per_1000_images: 0.160\n",
		"cluster_workers_marginal_cpu_seconds_per_1000_images: 5.960\n",
		"cluster_workers_per_owner_at_saturation: 36.9\n",
		"cluster_owner_images_per_s_at_saturation: 6125\n",
		"cluster_owner_mbit_per_s_at_saturation: 490\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
