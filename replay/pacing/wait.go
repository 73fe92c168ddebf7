package pacing

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Waiting stages of WaitUntil: Go timers round up to about a millisecond
// on Linux, so a timer takes the wait to coarseWait before the due time, a
// precise sleep (nanosleep) to the wake margin before it, and yielding in
// a loop the rest. The margin (wakeLate) is the median of how late recent
// precise sleeps woke, starting at initialMargin: half the wake-ups then
// spin a little and half are a few microseconds late, where a margin
// covering every wake-up would spin most of it away on every wait
// (docs/measurements.md, "The scheduler's wait"). Only long sleeps teach
// the margin: with one processor, or with the slack refused, it stays at
// initialMargin. Each wake-up costs the
// client CPU, so the precise sleep is one long sleep where that leaves a
// processor to run the requests meanwhile (a sleeping thread holds its
// own): at most GOMAXPROCS−1 threads sleep long at once. The other waits,
// for example session turns while the scheduler sleeps, or every wait with
// a single processor, sleep in slices of sleepSlice, yielding between
// them; so do all waits when the kernel refuses the timer slack, since one
// sleep would then wake past the margin.
const (
	coarseWait    = int64(time.Millisecond)
	initialMargin = int64(50 * time.Microsecond)
	sleepSlice    = int64(100 * time.Microsecond)
)

// preciseSleep is sleepPrecise; tests count its calls.
var preciseSleep = sleepPrecise

// slackRefused is set when the kernel refuses sleepPrecise's timer slack.
var slackRefused atomic.Bool

// wakeLate sets how long before its due time a long precise sleep ends.
var wakeLate = newWakeMargin(initialMargin)

// longSleepers counts the threads in a long precise sleep now, across
// runners: processors are the process's.
var longSleepers atomic.Int32

// WaitUntil blocks until clock (nanoseconds on the caller's run clock)
// reaches ns, or ctx ends (checked at least every coarseWait); it reports
// whether ns was reached.
func WaitUntil(ctx context.Context, clock func() int64, ns int64) bool {
	procs := int32(runtime.GOMAXPROCS(0))
	margin := wakeLate.get()
	for {
		if ctx.Err() != nil {
			return false
		}
		left := ns - clock()
		switch {
		case left <= 0:
			return true
		case left > coarseWait+margin:
			t := time.NewTimer(time.Duration(left - coarseWait - margin))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
		case left > margin:
			// A sleeping thread holds its processor: the requests just
			// launched wait in its run queue. Yield to them first, and
			// measure again after, since the yield can take a while.
			runtime.Gosched()
			now := clock()
			left = ns - now
			if left <= margin {
				continue
			}
			d := left - margin
			if !slackRefused.Load() {
				if longSleepers.Add(1) < procs {
					preciseSleep(time.Duration(d))
					longSleepers.Add(-1)
					wakeLate.woke(clock() - now - d)
					margin = wakeLate.get()
					continue
				}
				longSleepers.Add(-1)
			}
			preciseSleep(time.Duration(min(d, sleepSlice)))
		default:
			runtime.Gosched()
		}
	}
}
