package loghist

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/internal/rank"
)

// TestKthAgainstExactRanks: the histogram's order statistics are within
// RelErr above the exact ones of the same sample, never below.
func TestKthAgainstExactRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Hist
	vals := make([]int64, 20000)
	for i := range vals {
		vals[i] = int64(rng.ExpFloat64() * 2e6) // ms-scale lateness
		if i%10 == 0 {
			vals[i] = int64(rng.IntN(3000)) // and some below the exact range's edge
		}
		h.Add(vals[i])
	}
	slices.Sort(vals)
	for _, k := range []int64{1, 100, 2000, 10000, 19800, 19999, 20000} {
		exact, got := vals[k-1], h.Kth(k)
		if got < exact || float64(got-exact) > RelErr*float64(exact) {
			t.Errorf("k=%d: histogram %d, exact %d", k, got, exact)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.N() != 20000 {
		t.Errorf("max %d n %d, want %d and 20000", h.Max(), h.N(), vals[len(vals)-1])
	}
}

// TestQuantileAgainstSortedSample: type-7 percentiles from the histogram
// agree with internal/rank's on the sorted sample to within RelErr, and
// exactly below the exact range's edge.
func TestQuantileAgainstSortedSample(t *testing.T) {
	for _, tc := range []struct {
		name  string
		draw  func(*rand.Rand) int64
		exact bool
	}{
		{"lognormal ns", func(r *rand.Rand) int64 { return int64(2e8 * (1 + r.ExpFloat64())) }, false},
		{"small counts", func(r *rand.Rand) int64 { return int64(r.IntN(2000)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			var h Hist
			vals := make([]float64, 9999)
			for i := range vals {
				v := tc.draw(rng)
				vals[i] = float64(v)
				h.Add(v)
			}
			slices.Sort(vals)
			for _, p := range []float64{0, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
				want, got := rank.Percentile(vals, p), h.Quantile(p)
				if tc.exact && got != want || got < want || got > want*(1+RelErr) {
					t.Errorf("p=%g: histogram %g, sorted sample %g", p, got, want)
				}
			}
		})
	}
}

// TestMergeEqualsOneHist: two halves merged count as one Hist of all.
func TestMergeEqualsOneHist(t *testing.T) {
	var a, b, all Hist
	for v := int64(0); v < 100000; v += 7 {
		all.Add(v * 31)
		if v%2 == 0 {
			a.Add(v * 31)
		} else {
			b.Add(v * 31)
		}
	}
	a.Merge(&b)
	if a.N() != all.N() || a.Max() != all.Max() || !slices.Equal(a.counts, all.counts) {
		t.Errorf("merged n %d max %d; one hist n %d max %d", a.N(), a.Max(), all.N(), all.Max())
	}
	want := int64(0)
	for v := int64(0); v*31 <= 5000; v += 7 {
		want++ // 5000 is not near a multiple of 217: its bin holds no value above it
	}
	if got := all.AtOrBelow(5000); got != want {
		t.Errorf("AtOrBelow(5000) = %d, want %d", got, want)
	}
}
