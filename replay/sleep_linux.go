package replay

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// timerSlack is how late Linux may wake a sleeping thread so as to batch
// wake-ups: 50 µs by default, a twentieth of a request's interval at 1,000
// requests a second.
const timerSlack = time.Microsecond

// sleepPrecise blocks the calling thread in nanosleep for d: Linux's high
// resolution timers wake it within about the thread's timer slack (50 µs
// by default), where a Go timer waits for the next millisecond tick of the
// netpoller. The runtime hands the goroutine's processor to others while
// it sleeps only when they have work queued behind it (the sysmon thread
// retakes it), so callers sleep in short slices.
func sleepPrecise(d time.Duration) bool {
	// The slack is the thread's own and the goroutine may have moved to
	// another thread since its last sleep, so it is set before each.
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(timerSlack), 0, 0, 0)
	ts := unix.NsecToTimespec(int64(d))
	for {
		var left unix.Timespec
		err := unix.Nanosleep(&ts, &left)
		if !errors.Is(err, unix.EINTR) {
			return true
		}
		ts = left // a signal (the runtime's preemption) cut it short
	}
}
