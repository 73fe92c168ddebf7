package pacing

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// GCPercent is the GOGC a replay process runs with: fewer, larger
// collections keep GC work (results parts are encoded mid-run) from showing
// up as send lateness.
const GCPercent = 400

// tunedGC is set while TuneProcess's setting is in force.
var tunedGC atomic.Bool

// heapHeadroom is what BoundHeap allows above GCPercent's goal.
const heapHeadroom = 128 << 20

// HeapCeiling caps BoundHeap's limit while the live heap is under a third
// of it, so that a steady replay's RSS (the heap, stacks and the runtime's
// own memory) stays within 300 MB however long it runs; a larger live
// state keeps GCPercent's goal plus heapHeadroom. The limit jumps there
// (224 MiB to about 500 MiB at a 75 MiB live heap) on purpose: a live
// state that large is no steady replay's, and squeezing it would only
// make the collector run.
const HeapCeiling = 224 << 20

// BoundHeap, under TuneProcess and unless the user set GOMEMLIMIT, collects once
// before the schedule starts, with the stream's look-ahead full (the
// workload check's garbage would otherwise be collected mid-run) and gives
// the freed memory back to the system, and sets a soft memory limit of
// (1 + GCPercent/100) times what is then live, plus heapHeadroom, at most
// HeapCeiling for a live heap under a third of it. At
// GOGC 400 the collector counts what is allocated while it marks as live,
// so its heap goal drifts up run after run while the live heap stays flat;
// the limit holds RSS where the first cycles put it (docs/measurements.md,
// "Replay heap bound"). Should the live state really grow past it, the
// bound is lifted (LiftHeapBound): by its watcher (watchHeapGoal) or by
// the health sampler's CPU-share valve.
func BoundHeap() (gen int64) {
	// A new generation first: before the collection below, which would
	// otherwise run the previous bound's watcher against this one, and
	// before the check that TuneProcess is in force, which its restore
	// may end meanwhile.
	gen = boundGen.Add(1)
	if !tunedGC.Load() || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	debug.FreeOSMemory()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	live := int64(sample[0].Value.Uint64())
	limit := live*(1+GCPercent/100) + heapHeadroom
	if 3*live <= HeapCeiling {
		limit = min(limit, HeapCeiling)
	}
	boundMu.Lock()
	defer boundMu.Unlock()
	if boundGen.Load() != gen {
		return 0 // restored meanwhile
	}
	heapBound.Store(limit)
	debug.SetMemoryLimit(limit)
	liftNote.Store(nil)
	watchHeapGoal(goalWatch{gen: gen})
	return gen
}

// EndHeapBound ends bound gen when its run ends, and its watcher: no
// limit is left, as before a run sets one. A later bound, or none (gen
// 0), is left as it is.
func EndHeapBound(gen int64) {
	boundMu.Lock()
	defer boundMu.Unlock()
	if gen != 0 && boundGen.Load() == gen {
		clearHeapBound(math.MaxInt64)
	}
}

// clearHeapBound ends the bound in force, if any, and its watcher, and
// sets the memory limit to limit. boundMu is held.
func clearHeapBound(limit int64) {
	boundGen.Add(1)
	heapBound.Store(0)
	debug.SetMemoryLimit(limit)
}

// boundMu orders what changes the bound: BoundHeap setting it,
// LiftHeapBound lifting it and dropHeapBound ending it. The watcher's
// checks run on the runtime's cleanup goroutines, in no order with them.
var boundMu sync.Mutex

// dropHeapBound ends any bound and its watcher and sets the memory limit
// back to limit (TuneProcess's restore).
func dropHeapBound(limit int64) {
	boundMu.Lock()
	defer boundMu.Unlock()
	clearHeapBound(limit)
	liftNote.Store(nil)
}

// heapBound is the memory limit BoundHeap set, 0 when none is in force.
var heapBound atomic.Int64

// HeapBound is the memory limit of the bound in force, 0 when none is.
func HeapBound() int64 { return heapBound.Load() }

// SetHeapBound puts a bound of limit bytes in force now, replacing any,
// without BoundHeap's collection and watcher (its valve, GCValve, still
// lifts it), and returns its generation: for a caller that knows the
// limit it wants.
func SetHeapBound(limit int64) (gen int64) {
	boundMu.Lock()
	defer boundMu.Unlock()
	gen = boundGen.Add(1)
	heapBound.Store(limit)
	debug.SetMemoryLimit(limit)
	liftNote.Store(nil)
	return gen
}

// LiftHeapBound removes bound gen's limit, once, keeping why for
// client.jsonl (TakeLift); it reports whether it did. A bound set
// after gen, or none, is left as it is.
func LiftHeapBound(gen int64, why string) bool {
	boundMu.Lock()
	defer boundMu.Unlock()
	if boundGen.Load() != gen || heapBound.Load() == 0 {
		return false
	}
	heapBound.Store(0)
	debug.SetMemoryLimit(math.MaxInt64)
	liftNote.Store(&Lift{Gen: gen, Why: why, At: time.Now()})
	return true
}

// Lift is which bound was lifted, why and when.
type Lift struct {
	Gen int64
	Why string
	At  time.Time
}

// liftNote is the bound's lift, until the health sampler takes it.
var liftNote atomic.Pointer[Lift]

// TakeLift returns the bound's lift since the last call, nil if there
// was none.
func TakeLift() *Lift { return liftNote.Swap(nil) }

// boundGen counts BoundHeap's bounds: a watcher armed for one stops once
// another replaces it.
var boundGen atomic.Int64

// MinGoalRatio is the least heap goal, as a multiple of the live heap, the
// bound may leave the collector: below it, the collector runs each time
// the process allocates half its live heap, twice as often as at Go's
// default GOGC of 100 (a steady replay at 1,000 req/s keeps it above 2.4).
// A replay whose live state grows (a server that falls behind leaves
// thousands of streams open, each with its buffers and stack) would
// otherwise have its collector run back to back within a second, long
// before the CPU-share valve's window ends, and the client would fall
// behind on its schedule because of the bound (docs/measurements.md,
// "Heap-bound valve").
const MinGoalRatio = 1.5

// goalChecksToLift is how many checks in a row must find the goal under
// MinGoalRatio: the live heap the collector reports counts what was
// allocated while it marked, and one cycle's drift must not lift a steady
// replay's bound.
const goalChecksToLift = 2

// goalWatch is the watcher's state, carried from one check to the next:
// the bound's generation and the checks in a row under the ratio.
type goalWatch struct {
	gen   int64
	under int
}

// goalChecks counts the watcher's checks of a bound in force, for tests.
var goalChecks atomic.Int64

// watchHeapGoal checks the collector's heap goal after collections while
// bound w.gen is in force, and lifts the bound once the goal has fallen
// under MinGoalRatio times the live heap goalChecksToLift checks in a row.
// A cleanup on an unreachable sentinel runs after the collection that
// frees it, at no cost between collections; a sentinel made while the
// collector marks survives that cycle, so with collections back to back
// the checks come every other one.
func watchHeapGoal(w goalWatch) {
	runtime.AddCleanup(new(gcSentinel), checkHeapGoal, w)
}

// gcSentinel holds a pointer, so that it is not one of the tiny allocator's
// objects, whose cleanups may never run.
type gcSentinel struct{ _ *byte }

// checkHeapGoal is watchHeapGoal's check after one collection.
func checkHeapGoal(w goalWatch) {
	if boundGen.Load() != w.gen || heapBound.Load() == 0 {
		return
	}
	goalChecks.Add(1)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	metrics.Read(sample)
	live, goal := sample[0].Value.Uint64(), sample[1].Value.Uint64()
	if live > 0 && float64(goal) < MinGoalRatio*float64(live) {
		w.under++
	} else {
		w.under = 0
	}
	if w.under >= goalChecksToLift {
		LiftHeapBound(w.gen, fmt.Sprintf("the heap bound left the collector a goal of %d MB for a live heap of %d MB (under %g times, %d checks in a row): bound lifted",
			goal>>20, live>>20, MinGoalRatio, goalChecksToLift))
		return
	}
	watchHeapGoal(w)
}
