package pacing

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// backgroundNice is the nice value of the background threads (results
// parts, long prompts): the lowest priority, so the kernel runs the sends
// and reads first whenever both want the CPU.
const backgroundNice = 19

// BackgroundThread runs functions, one at a time, on one OS thread at
// backgroundNice that it keeps for its life. Its goroutine never unlocks
// the thread, so the thread ends with it and the priority goes with the
// thread. With one Go processor it still holds that processor while a
// function runs.
type BackgroundThread struct {
	jobs chan func()
}

// NewBackgroundThread starts the thread; Close ends it.
func NewBackgroundThread() *BackgroundThread {
	t := &BackgroundThread{jobs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		// Raising one's own nice value needs no privilege; should it fail,
		// the functions run at the normal priority.
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), backgroundNice)
		for f := range t.jobs {
			f()
		}
	}()
	return t
}

// run runs f on the thread and returns when f has.
func (t *BackgroundThread) Run(f func()) {
	done := make(chan struct{})
	t.jobs <- func() { f(); close(done) }
	<-done
}

// close ends the thread once it has run what it was given.
func (t *BackgroundThread) Close() { close(t.jobs) }
