// Package pacing sets a replaying process's runtime up and paces it: the
// collector and processors (TuneProcess), the heap bound and the valves
// that lift it, background threads at the lowest priority, and waits that
// end within microseconds of a due time. Its state is the process's, as
// the runtime's is.
package pacing

import (
	"os"
	"runtime"
	"runtime/debug"
)

// TuneProcess sets the runtime up for a process that replays and returns
// a function that restores the previous settings: GOGC to GCPercent, and
// at least minProcs processors (tuneProcs). It changes process-wide
// runtime state: call it where the process is owned (a command, a test).
// While it is in force, Run also bounds the heap once the workload is
// loaded (BoundHeap).
func TuneProcess() (restore func()) {
	old := debug.SetGCPercent(GCPercent)
	oldLimit := debug.SetMemoryLimit(-1)
	tunedGC.Store(true)
	restoreProcs := tuneProcs()
	return func() {
		restoreProcs()
		tunedGC.Store(false)
		dropHeapBound(oldLimit)
		debug.SetGCPercent(old)
	}
}

// minProcs is the fewest Go processors a replay runs with. With one, the
// scheduler's wait and the reads of the responses share one run queue: an
// engine step hands a token to every stream at once, and the send waits
// behind all their reads; nor can the wait sleep precisely without
// stopping the reads. With a second, the scheduler sleeps in nanosleep on
// a thread of its own and the kernel wakes it ahead of the reads. On one
// CPU (taskset, a container's quota of one) the two threads share it, and
// the sleeping one takes next to nothing (docs/measurements.md, "One
// CPU, two processors").
const minProcs = 2

// tuneProcs raises GOMAXPROCS to minProcs unless the user set GOMAXPROCS,
// and returns a function that restores it.
func tuneProcs() (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) >= minProcs {
		return func() {}
	}
	old := runtime.GOMAXPROCS(minProcs)
	return func() { runtime.GOMAXPROCS(old) }
}
