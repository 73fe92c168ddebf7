package pacing

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestHeapBoundLiftsWhenItSqueezesTheGoal: the bound BoundHeap sets stays
// through the watcher's checks while the live heap is small, and is lifted
// within a few collections after the live heap grows to most of it (as
// thousands of open streams do when a server falls behind), with the
// reason kept for client.jsonl; the CPU-share valve would wait five
// seconds.
func TestHeapBoundLiftsWhenItSqueezesTheGoal(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: replay sets no heap bound")
	}
	defer TuneProcess()()
	BoundHeap()
	limit := heapBound.Load()
	if limit == 0 {
		t.Fatal("BoundHeap set no bound")
	}
	// Cleanups run after their collection, in no order: collect until the
	// watcher has checked three times.
	checks := goalChecks.Load()
	collectUntil(t, func() bool { return goalChecks.Load() >= checks+3 }, "three checks of a small live heap")
	if heapBound.Load() != limit || TakeLift() != nil {
		t.Fatalf("bound %d MB after three checks of a small live heap, want %d MB kept", heapBound.Load()>>20, limit>>20)
	}

	keep := make([][]byte, 0, limit>>20)
	for int64(len(keep))<<20 < limit*3/4 {
		keep = append(keep, make([]byte, 1<<20))
	}
	var lift *Lift
	collectUntil(t, func() bool { lift = TakeLift(); return lift != nil }, "the bound lifted")
	runtime.KeepAlive(keep)
	if heapBound.Load() != 0 {
		t.Errorf("bound %d MB still recorded after the lift", heapBound.Load()>>20)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit %d after the lift, want none", got)
	}
	if !strings.Contains(lift.Why, "goal") || !strings.Contains(lift.Why, "bound lifted") {
		t.Errorf("lift note %q, want the heap goal named and the bound said lifted", lift.Why)
	}
}

// TestHeapBoundRestoredIsNotLifted: TuneProcess's restore ends the bound
// and its watcher; a later collection must not lift the limit restore set
// back, nor leave a note behind.
func TestHeapBoundRestoredIsNotLifted(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: replay sets no heap bound")
	}
	old := debug.SetMemoryLimit(-1)
	restore := TuneProcess()
	BoundHeap()
	limit := heapBound.Load()
	restore()
	keep := make([][]byte, 0, limit>>20)
	for int64(len(keep))<<20 < limit*3/4 {
		keep = append(keep, make([]byte, 1<<20))
	}
	checks := goalChecks.Load()
	for range 3 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond) // the cleanups queued by those collections
	runtime.KeepAlive(keep)
	if got := debug.SetMemoryLimit(-1); got != old {
		t.Errorf("memory limit %d after restore and collections, want %d", got, old)
	}
	if n := goalChecks.Load() - checks; n != 0 || TakeLift() != nil {
		t.Errorf("the watcher checked %d times after restore (note %v), want none", n, TakeLift())
	}
}

// collectUntil collects, and gives the cleanups a moment, until done
// holds; it fails the test after 10 s.
func collectUntil(t *testing.T, done func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 10 s of collections", what)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeapBoundEndsWithItsRun: a run's end takes its bound off (no limit
// is left between runs), and ending an earlier run's bound leaves a later
// one in force.
func TestHeapBoundEndsWithItsRun(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: replay sets no heap bound")
	}
	defer TuneProcess()()
	first := BoundHeap()
	EndHeapBound(first)
	if heapBound.Load() != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("bound %d, memory limit %d after its run ended, want none", heapBound.Load(), debug.SetMemoryLimit(-1))
	}
	second := BoundHeap()
	limit := heapBound.Load()
	EndHeapBound(first)
	if heapBound.Load() != limit || debug.SetMemoryLimit(-1) != limit {
		t.Errorf("ending the first run's bound changed the second's: bound %d, limit %d, want %d", heapBound.Load(), debug.SetMemoryLimit(-1), limit)
	}
	EndHeapBound(second)
}
