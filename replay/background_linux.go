package replay

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// backgroundNice is the nice value of the threads that encode results
// parts: the lowest priority, so the kernel runs the sends and reads
// first whenever both want the CPU.
const backgroundNice = 19

// inBackground runs f on an OS thread of its own at backgroundNice and
// returns when f has. Encoding a part of results takes tens of
// milliseconds of CPU; at the normal priority its thread takes its share
// of a core the sends need, and the lateness of the requests sent
// meanwhile shows it (docs/measurements.md, "Results encoded in the
// background"). The goroutine never unlocks its thread, so the thread
// ends with it and the priority goes with the thread. With one Go
// processor it still holds that processor while it runs.
func inBackground(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// Raising one's own nice value needs no privilege; should it fail,
		// f runs at the normal priority, as before.
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), backgroundNice)
		f()
	}()
	<-done
}
