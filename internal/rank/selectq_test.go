package rank

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestPercentilesMatchSorted compares selection with Percentile of sorted
// data, bit for bit, on inputs with ties, runs, sorted and reversed orders.
func TestPercentilesMatchSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ps := []float64{0, 0.001, 0.1, 0.5, 0.5, 0.9, 0.99, 0.999, 1}
	inputs := map[string][]float64{"one": {3}, "two": {2, 1}}
	for _, n := range []int{3, 10, 1000, 100_000} {
		uniform := make([]float64, n)
		ties := make([]float64, n)
		for i := range uniform {
			uniform[i] = rng.ExpFloat64()
			ties[i] = float64(rng.IntN(4))
		}
		sorted := slices.Sorted(slices.Values(uniform))
		reversed := slices.Clone(sorted)
		slices.Reverse(reversed)
		inputs["uniform"+strconv.Itoa(n)] = uniform
		inputs["ties"+strconv.Itoa(n)] = ties
		inputs["sorted"+strconv.Itoa(n)] = sorted
		inputs["reversed"+strconv.Itoa(n)] = reversed
		inputs["constant"+strconv.Itoa(n)] = make([]float64, n)
	}
	for name, in := range inputs {
		sorted := slices.Sorted(slices.Values(in))
		got := Percentiles(slices.Clone(in), ps)
		for i, p := range ps {
			if want := Percentile(sorted, p); got[i] != want {
				t.Errorf("%s p%g: selection %v, sorted %v", name, p, got[i], want)
			}
		}
	}
}
