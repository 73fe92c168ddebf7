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

// backgroundThread runs functions, one at a time, on one OS thread at
// backgroundNice that it keeps for its life: for work that comes often
// enough that a thread for each would cost more than the work.
type backgroundThread struct {
	jobs chan func()
}

func newBackgroundThread() *backgroundThread {
	t := &backgroundThread{jobs: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), backgroundNice)
		for f := range t.jobs {
			f()
		}
	}()
	return t
}

// run runs f on the thread and returns when f has.
func (t *backgroundThread) run(f func()) {
	done := make(chan struct{})
	t.jobs <- func() { f(); close(done) }
	<-done
}

// close ends the thread once it has run what it was given.
func (t *backgroundThread) close() { close(t.jobs) }
