package replay

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitSleepsOncePerWaitWithProcessorsToSpare: with two processors a
// wait under a millisecond starts with one precise sleep to spinWait
// before the due time (each wake-up costs CPU); with one processor every
// sleep is a slice of at most sleepSlice, so that the requests are not
// held up behind a sleeping thread.
func TestWaitSleepsOncePerWaitWithProcessorsToSpare(t *testing.T) {
	var asked []time.Duration
	orig := preciseSleep
	preciseSleep = func(d time.Duration) bool { asked = append(asked, d); return orig(d) }
	defer func() { preciseSleep = orig }()
	const wait = 900 * time.Microsecond
	for _, procs := range []int{2, 1} {
		prev := runtime.GOMAXPROCS(procs)
		start := time.Now()
		r := &Runner{start: start, clock: monotonicClock(start)}
		asked = asked[:0]
		r.waitUntil(context.Background(), r.clock()+int64(wait))
		late := time.Since(start) - wait
		runtime.GOMAXPROCS(prev)
		if late < 0 {
			t.Errorf("GOMAXPROCS %d: woke %v early", procs, -late)
		}
		if len(asked) == 0 {
			t.Errorf("GOMAXPROCS %d: no precise sleep in a %v wait", procs, wait)
			continue
		}
		// Slices would ask for sleepSlice at most; the one sleep asks for
		// about 850 µs, less only if the test was stalled that long
		// between setting the due time and sleeping.
		switch {
		case procs > 1 && asked[0] <= time.Duration(sleepSlice):
			t.Errorf("GOMAXPROCS %d: first sleep %v of a %v wait, want one sleep longer than a %v slice", procs, asked[0], wait, time.Duration(sleepSlice))
		case procs == 1 && slices.Max(asked) > time.Duration(sleepSlice):
			t.Errorf("GOMAXPROCS 1: sleeps %v, want slices of at most %v", asked, time.Duration(sleepSlice))
		}
	}
}

// TestPreciseSleepSetsTimerSlack: the kernel reports the sleeping thread's
// timer slack as timerSlack after a precise sleep (Linux's default is
// 50 µs, which would wake the one sleep past the spin).
func TestPreciseSleepSetsTimerSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sleepPrecise(time.Microsecond)
	got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatalf("PR_GET_TIMERSLACK: %v", err)
	}
	if time.Duration(got) != timerSlack {
		t.Errorf("timer slack after a precise sleep: %d ns, want %v", got, timerSlack)
	}
}
