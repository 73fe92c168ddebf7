package pacing

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// TestGCValveLiftsOnlyAFullWindowOverTheShare: the valve lifts the bound
// it watches once the collector's share of the used CPU over a full window
// passes gcShareToLift, and not before the window is full, nor for a
// share at it, nor for a bound that is no longer the one in force.
func TestGCValveLiftsOnlyAFullWindowOverTheShare(t *testing.T) {
	type sample struct{ gc, used float64 }
	steady := func(gc float64, n int) []sample {
		out := make([]sample, n)
		for i := range out {
			out[i] = sample{gc, 1}
		}
		return out
	}
	cases := []struct {
		name     string
		samples  []sample
		replaced bool // another bound replaced the watched one first
		lifted   bool
	}{
		{"window not full", steady(0.9, gcWindow-1), false, false},
		{"full window over the share", steady(0.5, gcWindow), false, true},
		{"at the share exactly", steady(gcShareToLift, 3*gcWindow), false, false},
		{"one busy second in a quiet window", append(steady(0.01, gcWindow-1), sample{0.6, 1}), false, false},
		// 4 × 0.01 + 0.75 = 0.79 of 5 used seconds: 15.8%, over 15%.
		{"busy enough to tip the window", append(steady(0.01, gcWindow-1), sample{0.75, 1}), false, true},
		{"nothing used", steady(0, 2*gcWindow), false, false},
		{"another bound in force", steady(0.9, gcWindow), true, false},
	}
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gen := SetHeapBound(1 << 40)
			defer EndHeapBound(gen)
			TakeLift()
			if c.replaced {
				defer EndHeapBound(SetHeapBound(1 << 40))
			}
			var v GCValve
			for _, s := range c.samples {
				v.Observe(gen, s.gc, s.used)
			}
			lift := TakeLift()
			if got := lift != nil; got != c.lifted {
				t.Fatalf("lifted %v, want %v", got, c.lifted)
			}
			if !c.lifted {
				return
			}
			if lift.Gen != gen || !strings.Contains(lift.Why, "bound lifted") || HeapBound() != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
				t.Errorf("lift %+v, bound %d, limit %d: want gen %d's lift noted, no bound, no limit", lift, HeapBound(), debug.SetMemoryLimit(-1), gen)
			}
		})
	}
}

// TestGCValveStartsAnewWithABound: samples under an earlier bound do not
// count toward a new one's window.
func TestGCValveStartsAnewWithABound(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	var v GCValve
	first := SetHeapBound(1 << 40)
	for range gcWindow - 1 {
		v.Observe(first, 0.9, 1)
	}
	second := SetHeapBound(1 << 40)
	defer EndHeapBound(second)
	TakeLift()
	for range gcWindow - 1 {
		v.Observe(second, 0.9, 1)
	}
	if lift := TakeLift(); lift != nil {
		t.Fatalf("lifted after %d samples under the new bound: %+v", gcWindow-1, lift)
	}
	v.Observe(second, 0.9, 1)
	if lift := TakeLift(); lift == nil || lift.Gen != second {
		t.Fatalf("not lifted after a full window under the new bound: %+v", lift)
	}
}
