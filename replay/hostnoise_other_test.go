//go:build !linux

package replay

import (
	"runtime"
	"time"
)

// probeCPUs lists a thread for each CPU: where affinity cannot be read,
// the probe's threads are not pinned and may miss a stall of one CPU.
func probeCPUs() ([]int, error) {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus, nil
}

// pinThreadTo leaves the thread where the kernel puts it.
func pinThreadTo(int) error { return nil }

// probeSleep sleeps d on a Go timer, which may wake up to a millisecond
// late: off Linux the probe can report stalls that were not.
func probeSleep(d time.Duration) { time.Sleep(d) }
