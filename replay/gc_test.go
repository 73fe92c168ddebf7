package replay

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestHeapBoundLiftsWhenItSqueezesTheGoal: the bound boundHeap sets stays
// through collections while the live heap is small, and is lifted at the
// first collections after the live heap grows to most of it (as thousands
// of open streams do when a server falls behind), with the reason kept for
// client.jsonl; the CPU-share valve would wait five seconds.
func TestHeapBoundLiftsWhenItSqueezesTheGoal(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: replay sets no heap bound")
	}
	defer TuneProcess()()
	boundHeap()
	limit := heapBound.Load()
	if limit == 0 {
		t.Fatal("boundHeap set no bound")
	}
	for range 3 {
		runtime.GC()
		waitForCleanups()
	}
	if heapBound.Load() != limit {
		t.Fatalf("bound %d MB after three collections of a small live heap, want %d MB kept", heapBound.Load()>>20, limit>>20)
	}

	keep := make([][]byte, 0, limit>>20)
	for int64(len(keep))<<20 < limit*3/4 {
		keep = append(keep, make([]byte, 1<<20))
	}
	for i := 0; i < 5 && heapBound.Load() != 0; i++ {
		runtime.GC()
		waitForCleanups()
	}
	runtime.KeepAlive(keep)
	if heapBound.Load() != 0 {
		t.Fatalf("bound of %d MB still in force with %d MB live, after five collections", limit>>20, len(keep))
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit %d after the lift, want none", got)
	}
	if lift := takeLiftNote(); lift == nil || !strings.Contains(lift.why, "goal") || !strings.Contains(lift.why, "bound lifted") {
		t.Errorf("lift note %+v, want the heap goal named and the bound said lifted", lift)
	}
}

// waitForCleanups returns once the cleanups queued by the last collection
// have run: a cleanup queued after them has.
func waitForCleanups() {
	done := make(chan struct{})
	runtime.AddCleanup(new(gcSentinel), func(ch chan struct{}) { close(ch) }, done)
	runtime.GC()
	<-done
}
