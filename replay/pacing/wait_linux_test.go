package pacing

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitSleepsOncePerWaitWithProcessorsToSpare: with two processors a
// wait under a millisecond is one precise sleep to the wake margin before
// the due time (each wake-up costs CPU); with one processor, or with
// another thread already in a long sleep, every sleep is a slice of at
// most sleepSlice, so that the requests are not held up behind sleeping
// threads.
func TestWaitSleepsOncePerWaitWithProcessorsToSpare(t *testing.T) {
	var asked []time.Duration
	orig := preciseSleep
	preciseSleep = func(d time.Duration) bool { asked = append(asked, d); return orig(d) }
	defer func() { preciseSleep = orig }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const wait = 900 * time.Microsecond
	wait900 := func(procs int) {
		runtime.GOMAXPROCS(procs)
		start := time.Now()
		clock := func() int64 { return int64(time.Since(start)) }
		asked = asked[:0]
		WaitUntil(context.Background(), clock, clock()+int64(wait))
		if late := time.Since(start) - wait; late < 0 {
			t.Errorf("GOMAXPROCS %d: woke %v early", procs, -late)
		}
	}
	// Slices would ask for sleepSlice at most; the one sleep asks for the
	// wait less the margin, 700–895 µs, less only if the test stalled
	// that long before it (a loaded machine can stall a thread for a
	// millisecond): three tries.
	for try := 1; ; try++ {
		wait900(2)
		if len(asked) == 1 && asked[0] > time.Duration(sleepSlice) {
			break
		}
		if try == 3 {
			t.Errorf("GOMAXPROCS 2: sleeps %v in a %v wait, want one longer than a %v slice", asked, wait, time.Duration(sleepSlice))
			break
		}
	}
	wait900(1)
	if len(asked) > 0 && slices.Max(asked) > time.Duration(sleepSlice) {
		t.Errorf("GOMAXPROCS 1: sleeps %v, want slices of at most %v", asked, time.Duration(sleepSlice))
	}
	// Another thread in a long sleep already: with two processors a
	// second would leave none for the requests.
	longSleepers.Add(1)
	wait900(2)
	longSleepers.Add(-1)
	if len(asked) > 0 && slices.Max(asked) > time.Duration(sleepSlice) {
		t.Errorf("GOMAXPROCS 2, one thread asleep long: sleeps %v, want slices of at most %v", asked, time.Duration(sleepSlice))
	}
	if n := longSleepers.Load(); n != 0 {
		t.Errorf("%d long sleepers counted after the waits", n)
	}
}

// TestPreciseSleepSetsTimerSlack: the kernel reports the sleeping thread's
// timer slack as timerSlack after a precise sleep (Linux's default, 50
// µs, would add to every wake-up's delay).
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
