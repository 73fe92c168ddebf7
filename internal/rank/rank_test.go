package rank

import (
	"math"
	"slices"
	"testing"
)

func TestAverageRanksHandComputed(t *testing.T) {
	// 10, 30, 20, 30, 5: ranks 2, 4.5, 3, 4.5, 1.
	if got, want := Average([]float64{10, 30, 20, 30, 5}), []float64{2, 4.5, 3, 4.5, 1}; !slices.Equal(got, want) {
		t.Errorf("ranks %v, want %v", got, want)
	}
}

func TestSpearman(t *testing.T) {
	cases := []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 400}, 1},    // monotone, not linear
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},        // reversed
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 1, 4, 3, 5}, 0.8}, // 1 - 6·4/(5·24)
		{[]float64{1, 1, 1}, []float64{1, 2, 3}, 0},               // undefined: 0
	}
	for _, c := range cases {
		if got := Spearman(c.x, c.y); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Spearman(%v, %v) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}

func TestKSHandComputed(t *testing.T) {
	cases := []struct {
		a, b []int64
		want float64
	}{
		{[]int64{1, 2, 3, 4}, []int64{1, 2, 3, 4}, 0},
		{[]int64{1, 2, 3, 4}, []int64{5, 6, 7, 8}, 1},
		{[]int64{1, 2, 3, 4}, []int64{3, 4, 5, 6}, 0.5}, // at 2: 0.5 vs 0
		{[]int64{1, 1, 2}, []int64{1, 2, 2}, 1.0 / 3},   // ties: at 1, 2/3 vs 1/3
		{[]int64{1, 2, 3, 5}, []int64{2, 4}, 0.25},      // at 3: 3/4 vs 1/2
		{nil, []int64{1}, 0},                            // empty: 0
	}
	for _, c := range cases {
		orig := slices.Clone(c.a)
		if got := KS(c.a, c.b); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("KS(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
		if !slices.Equal(orig, c.a) {
			t.Errorf("KS sorted its input %v in place", orig)
		}
	}
}

func TestPercentileType7(t *testing.T) {
	x := []float64{1, 2, 3, 4}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {0.5, 2.5}, {0.25, 1.75}, {1, 4}} {
		if got := Percentile(x, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("Percentile of no data is not NaN")
	}
}
