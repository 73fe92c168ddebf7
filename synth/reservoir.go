package synth

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// reservoir keeps a uniform sample of at most capacity of the values added
// (Algorithm R), so a fit's memory stays bounded however long the trace.
type reservoir[T any] struct {
	items    []T
	seen     int
	capacity int
	rng      *rand.Rand
}

func newReservoir[T any](capacity int, seed uint64) *reservoir[T] {
	return &reservoir[T]{capacity: capacity, rng: rand.New(rand.NewPCG(seed, 0x5e5e))}
}

func (r *reservoir[T]) add(v T) {
	r.seen++
	if len(r.items) < r.capacity {
		r.items = append(r.items, v)
	} else if j := r.rng.IntN(r.seen); j < r.capacity {
		r.items[j] = v
	}
}

// floatMarginal builds a Marginal of up to k knots from a reservoir of
// values; N is the number of values seen, not kept.
func floatMarginal(r *reservoir[float64], k int) Marginal {
	return marginalOf(r.items, k, int64(r.seen))
}

// marginalOf builds a Marginal of up to k knots from values (not changed);
// N is n.
func marginalOf(values []float64, k int, n int64) Marginal {
	s := slices.Clone(values)
	slices.Sort(s)
	vals, counts := distinctCounts(s)
	m := marginalFromCounts(vals, counts, k)
	m.N = n
	return m
}

// distinctCounts returns the distinct values of sorted values with how
// often each occurs.
func distinctCounts(sorted []float64) ([]float64, []int64) {
	var vals []float64
	var counts []int64
	for _, v := range sorted {
		if n := len(vals); n > 0 && vals[n-1] == v {
			counts[n-1]++
			continue
		}
		vals = append(vals, v)
		counts = append(counts, 1)
	}
	return vals, counts
}

// marginalFromCounts builds a Marginal with up to k knots from distinct
// values in ascending order and their counts: knots are type-1 quantiles
// (every knot an observed value) and every value holding at least AtomShare
// of the mass becomes an atom.
func marginalFromCounts(vals []float64, counts []int64, k int) Marginal {
	var n int64
	sum := 0.0
	for i, c := range counts {
		n += c
		sum += vals[i] * float64(c)
	}
	if n == 0 {
		return Marginal{}
	}
	k = max(2, min(k, int(n)+1))
	m := Marginal{N: n, Mean: sum / float64(n), Knots: make([]float64, k)}
	// Type-1 quantile: the smallest value whose CDF reaches p.
	var cum int64
	j := 0
	for i := range k {
		need := int64(math.Ceil(float64(i)/float64(k-1)*float64(n) - 1e-9))
		for j < len(vals)-1 && cum+counts[j] < need {
			cum += counts[j]
			j++
		}
		m.Knots[i] = vals[j]
	}
	cum = 0
	for i, c := range counts {
		if float64(c)/float64(n) >= AtomShare {
			m.Atoms = append(m.Atoms, Atom{Value: vals[i], PLow: float64(cum) / float64(n), PHigh: float64(cum+c) / float64(n)})
		}
		cum += c
	}
	return m
}

// sortedCounts returns a histogram's values in ascending order with their
// counts.
func (h histogram) sortedCounts() ([]float64, []int64) {
	keys := make([]int64, 0, len(h))
	for v := range h {
		keys = append(keys, v)
	}
	slices.SortFunc(keys, cmp.Compare)
	vals := make([]float64, len(keys))
	counts := make([]int64, len(keys))
	for i, v := range keys {
		vals[i], counts[i] = float64(v), h[v]
	}
	return vals, counts
}

// merge folds o into r, so that r holds a uniform sample of at most its
// capacity of the values both have seen: how many come from each side is
// hypergeometric in their seen counts (a draw of capacity values, without
// replacement, from everything both saw), and each side gives that many of
// its own, chosen uniformly and kept in their order. When both together
// saw no more than the capacity, r keeps its values and then o's, as one
// reservoir fed both streams in turn would. Both must share a capacity.
func (r *reservoir[T]) merge(o *reservoir[T], rng *rand.Rand) {
	total := r.seen + o.seen
	if total <= r.capacity {
		r.items = append(r.items, o.items...)
		r.seen = total
		return
	}
	fromR, leftR, leftO := 0, r.seen, o.seen
	for range r.capacity {
		if rng.IntN(leftR+leftO) < leftR {
			fromR++
			leftR--
		} else {
			leftO--
		}
	}
	items := make([]T, 0, r.capacity)
	items = append(items, pickInOrder(r.items, fromR, rng)...)
	r.items = append(items, pickInOrder(o.items, r.capacity-fromR, rng)...)
	r.seen = total
}

// pickInOrder returns k of items chosen uniformly without replacement, in
// the order items holds them.
func pickInOrder[T any](items []T, k int, rng *rand.Rand) []T {
	if k >= len(items) {
		return items
	}
	idx := rng.Perm(len(items))[:k]
	slices.Sort(idx)
	out := make([]T, k)
	for i, j := range idx {
		out[i] = items[j]
	}
	return out
}
