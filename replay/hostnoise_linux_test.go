package replay

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// probeCPUs lists the CPUs the process may run on.
func probeCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pinThreadTo pins the calling (locked) thread to CPU c.
func pinThreadTo(c int) error {
	var one unix.CPUSet
	one.Set(c)
	return unix.SchedSetaffinity(0, &one)
}

// probeSleep sleeps d with nanosleep, a high-resolution kernel timer.
func probeSleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Nanosleep(&ts, nil)
}
