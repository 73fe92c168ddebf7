package hashmix

import (
	"math/bits"
	"testing"
)

// TestFinalize: the published SplitMix64 outputs for seed 0 (the
// generator adds 0x9e3779b97f4a7c15 before each finalizing), and every
// input bit flipping about half the output bits.
func TestFinalize(t *testing.T) {
	const gamma = 0x9e3779b97f4a7c15
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := Finalize(uint64(i+1) * gamma); got != want {
			t.Errorf("output %d: %#x, want %#x", i, got, want)
		}
	}
	for b := range 64 {
		flipped := 0
		for x := uint64(1); x <= 1000; x++ {
			flipped += bits.OnesCount64(Finalize(x) ^ Finalize(x^1<<b))
		}
		if mean := float64(flipped) / 1000; mean < 28 || mean > 36 {
			t.Errorf("flipping bit %d flips %.1f output bits on average; want about 32", b, mean)
		}
	}
}
