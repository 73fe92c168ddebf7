package pacing

import "fmt"

// gcShareToLift is the share of the CPU the process used, over the last
// gcWindow seconds, that the collector may take before the heap bound is
// lifted: a run whose live state really grows (long histories, many large
// prompts in flight) must not have its collector run flat out, or the
// client's own lateness would be the GC's. It lies between what a binding
// bound and a steady replay cost (docs/measurements.md, "Heap-bound
// valve").
const gcShareToLift = 0.15

// gcWindow is the valve's window in seconds (health samples).
const gcWindow = 5

// GCValve lifts a heap bound under which the collector takes more than
// gcShareToLift of the CPU the process used over the last gcWindow
// samples: the bound must never make the client late on its schedule.
// Its zero value is ready; one goroutine feeds it.
type GCValve struct {
	gc, used [gcWindow]float64
	tick     int
	gen      int64
}

// Observe adds one second's sample of the collector's and the process's
// used CPU seconds under bound gen (BoundHeap's generation, 0 for none);
// a new bound starts a new window.
func (v *GCValve) Observe(gen int64, gcSeconds, usedSeconds float64) {
	if gen != v.gen {
		*v = GCValve{gen: gen}
	}
	v.tick++
	v.gc[v.tick%gcWindow], v.used[v.tick%gcWindow] = gcSeconds, usedSeconds
	if v.gen == 0 || v.tick < gcWindow {
		return
	}
	var sumGC, sumUsed float64
	for i := range gcWindow {
		sumGC += v.gc[i]
		sumUsed += v.used[i]
	}
	if sumUsed > 0 && sumGC/sumUsed > gcShareToLift {
		LiftHeapBound(v.gen, fmt.Sprintf("the collector used %.0f%% of the CPU over %d s under the heap bound: bound lifted", 100*sumGC/sumUsed, gcWindow))
	}
}
