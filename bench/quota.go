package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// minQuotaMicros is the kernel's smallest CFS quota. A group runs at most
// its quota in every period; the period of a cap is the shortest that
// gives it that quota, so that a capped process waits as little as
// possible at a time (at most 31 ms for a 1/32 cap) and its pace, not its
// latency, is what the cap measures.
const minQuotaMicros = 1000

// cpuQuota is a Linux control group that caps the CPU time of the
// processes in it to a fraction of one core (the CFS bandwidth
// controller). Creating one needs root and the cpu controller, of cgroup
// v2 (/sys/fs/cgroup/cgroup.controllers lists it; the root group's
// subtree_control is left with +cpu) or of v1 (/sys/fs/cgroup/cpu).
type cpuQuota struct{ dir string }

// newCPUQuota creates the group name, capped at fraction of a core.
func newCPUQuota(name string, fraction float64) (*cpuQuota, error) {
	if fraction <= 0 || fraction > 1 {
		return nil, fmt.Errorf("bench: a CPU quota of %g of a core", fraction)
	}
	period := max(int(math.Ceil(minQuotaMicros/fraction)), 10_000)
	quota := int(fraction * float64(period))
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(" "+string(ctl)+" ", " cpu ") {
		// cgroup v2: the root must hand the cpu controller to its children.
		if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu"), 0); err != nil {
			return nil, fmt.Errorf("bench: enabling the cpu controller: %w", err)
		}
		q := &cpuQuota{dir: filepath.Join("/sys/fs/cgroup", name)}
		return q, q.create(map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, period)})
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil { // cgroup v1
		q := &cpuQuota{dir: filepath.Join("/sys/fs/cgroup/cpu", name)}
		return q, q.create(map[string]string{
			"cpu.cfs_period_us": strconv.Itoa(period),
			"cpu.cfs_quota_us":  strconv.Itoa(quota),
		})
	}
	return nil, errors.New("bench: no cgroup cpu controller (v2 or v1) under /sys/fs/cgroup")
}

// create makes the group's directory and writes its settings, v1's
// period before its quota.
func (q *cpuQuota) create(settings map[string]string) error {
	if err := os.Mkdir(q.dir, 0o755); err != nil {
		return fmt.Errorf("bench: creating the control group: %w", err)
	}
	for _, k := range []string{"cpu.max", "cpu.cfs_period_us", "cpu.cfs_quota_us"} {
		if v, ok := settings[k]; ok {
			if err := os.WriteFile(filepath.Join(q.dir, k), []byte(v), 0); err != nil {
				q.remove()
				return fmt.Errorf("bench: %s: %w", k, err)
			}
		}
	}
	return nil
}

// add moves process pid, all its threads, into the group.
func (q *cpuQuota) add(pid int) error {
	return os.WriteFile(filepath.Join(q.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// remove deletes the group, which must have no process left.
func (q *cpuQuota) remove() error { return os.Remove(q.dir) }
