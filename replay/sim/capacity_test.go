package sim

import (
	"math"
	"testing"
	"time"
)

// TestCapacityByHand: a request's work worked by hand from the cost
// model's terms, and the capacity of a mix the reciprocal of its mean.
func TestCapacityByHand(t *testing.T) {
	o := EngineOptions{Cost: CostModel{IterBase: 4800 * time.Microsecond, PerPrefillToken: 40 * time.Microsecond, PerDecodeSeq: 20 * time.Microsecond,
		PerKVToken: 40 * time.Nanosecond}, MaxNumBatchedTokens: 8192}
	// 2,000 prompt tokens and 28 output: 27 decode steps reading 2,001 to
	// 2,027 tokens of KV; 2,027 tokens of 8,192 a full iteration.
	want := 2000*40e-6 + 27*20e-6 + float64(27*2000+27*28/2)*40e-9 + 4.8e-3*2027/8192
	if got := o.RequestWork(2000, 28).Seconds(); math.Abs(got-want) > 1e-9 {
		t.Errorf("work %g s, want %g", got, want)
	}
	token := EngineOptions{Cost: CostModel{PerPrefillToken: 150 * time.Microsecond, PerDecodeSeq: 600 * time.Microsecond}, MaxNumBatchedTokens: 8192}
	if got, want := token.Capacity([]int64{100, 100}, []int64{20, 20}), 1/(100*150e-6+19*600e-6); math.Abs(got-want) > 1e-9 {
		t.Errorf("capacity %g req/s, want %g", got, want)
	}
	if c := token.Capacity(nil, nil); c != 0 {
		t.Errorf("capacity of no requests %g", c)
	}
}
