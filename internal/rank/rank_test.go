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
