package pacing

import (
	"errors"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// timerSlack is how late Linux may wake a sleeping thread so as to batch
// wake-ups. Its default, 50 µs, would add to every wake-up's delay and
// so to the margin waitUntil's one sleep leaves before the due time (the
// spin), so sleepPrecise sets 1 µs on its thread. The slack
// stays on that thread, and threads it starts inherit it: their other timed
// waits wake a little more precisely, and nothing else changes.
const timerSlack = time.Microsecond

// sleepPrecise blocks the calling thread in nanosleep for d: Linux's high
// resolution timers wake it within about the thread's timer slack, where a
// Go timer waits for the next millisecond tick of the netpoller. The
// runtime hands the goroutine's processor to others while it sleeps only
// when they have work queued behind it (the sysmon thread retakes it). If
// the kernel refuses the slack, it says so in slackRefused and sleeps with
// the default.
func sleepPrecise(d time.Duration) bool {
	// The slack is the thread's own: set it and sleep on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(timerSlack), 0, 0, 0) != nil {
		slackRefused.Store(true)
	}
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
