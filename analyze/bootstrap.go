package analyze

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"
)

// BootstrapOptions controls bootstrap intervals.
type BootstrapOptions struct {
	// Resamples is the number of bootstrap replicates (default 2,000).
	Resamples int
	// Seed makes the intervals reproducible.
	Seed uint64
	// Block is the moving-block length for series correlated in time:
	// 0 chooses it from the data (BlockAuto), 1 is the plain bootstrap.
	Block int
}

// BlockAuto asks BootstrapQuantile to choose the block length from the
// series' autocorrelation.
const BlockAuto = 0

// The bootstrap intervals for percentiles are Woodruff intervals with a
// bootstrap standard error. The quantity resampled is the empirical CDF at
// the sample's p-quantile, F̂(q̂p): a mean of indicators, which the
// (moving-block) bootstrap estimates well, where the percentile bootstrap of
// an extreme quantile under time correlation covers far less than its
// nominal level (docs/measurements.md). The interval is
// [Q̂(p − z·se), Q̂(p + z·se)], read off the one sorted sample.
//
// Replicates are drawn without expanding any resample: a resample is B =
// n/l blocks of l consecutive observations (circular), and a block
// contributes only its count of observations below each threshold, so the
// n possible blocks collapse to a few distinct count vectors ("types") and a
// replicate is one multinomial draw of B blocks over those types. Sort once,
// resample by multinomial counts: the cost per replicate does not depend on
// n.

// sample holds one metric's values in time order and sorted, with each
// time-ordered value's rank in the sorted order.
type sample struct {
	timeOrdered []float64
	sorted      []float64
	rank        []int32 // rank[i] = position of the i-th (time-ordered) value in sorted
}

func newSample(timeOrdered []float64) *sample {
	n := len(timeOrdered)
	type valueAt struct {
		v float64
		i int32
	}
	pairs := make([]valueAt, n)
	for i, v := range timeOrdered {
		pairs[i] = valueAt{v, int32(i)}
	}
	// Ties keep time order, so ranks are deterministic.
	sortParallel(pairs, func(a, b valueAt) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return int(a.i - b.i)
	})
	s := &sample{timeOrdered: timeOrdered, sorted: make([]float64, n), rank: make([]int32, n)}
	for r, p := range pairs {
		s.sorted[r] = p.v
		s.rank[p.i] = int32(r)
	}
	return s
}

// sortParallel sorts x with cmp on up to GOMAXPROCS cores: chunks sorted
// concurrently, then merged pairwise. Below 1<<16 elements it is
// slices.SortFunc.
func sortParallel[T any](x []T, cmp func(a, b T) int) {
	sortChunksAndMerge(x, func(c []T) { slices.SortFunc(c, cmp) }, cmp)
}

// sortFloatsParallel is sortParallel for float64 with the ordered
// (non-NaN) comparison, whose chunk sort is slices.Sort's specialised one.
func sortFloatsParallel(x []float64) {
	sortChunksAndMerge(x, slices.Sort[[]float64], func(a, b float64) int {
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
}

// sortChunksAndMerge sorts chunks of x concurrently with sortChunk and
// merges them pairwise with cmp.
func sortChunksAndMerge[T any](x []T, sortChunk func([]T), cmp func(a, b T) int) {
	workers := runtime.GOMAXPROCS(0)
	if len(x) < 1<<16 || workers < 2 {
		sortChunk(x)
		return
	}
	workers = min(workers, 8)
	bounds := make([]int, workers+1)
	for w := range bounds {
		bounds[w] = len(x) * w / workers
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { sortChunk(x[bounds[w]:bounds[w+1]]) })
	}
	wg.Wait()
	buf := make([]T, len(x))
	src, dst := x, buf
	for width := 1; width < workers; width *= 2 {
		for w := 0; w < workers; w += 2 * width {
			lo, mid, hi := bounds[w], bounds[min(w+width, workers)], bounds[min(w+2*width, workers)]
			wg.Go(func() { mergeInto(dst[lo:hi], src[lo:mid], src[mid:hi], cmp) })
		}
		wg.Wait()
		src, dst = dst, src
	}
	if &src[0] != &x[0] {
		copy(x, src)
	}
}

// mergeInto merges sorted a and b into dst (len(a)+len(b)), a first on ties.
func mergeInto[T any](dst, a, b []T, cmp func(a, b T) int) {
	i, j, k := 0, 0, 0
	for i < len(a) && j < len(b) {
		if cmp(b[j], a[i]) < 0 {
			dst[k] = b[j]
			j++
		} else {
			dst[k] = a[i]
			i++
		}
		k++
	}
	k += copy(dst[k:], a[i:])
	copy(dst[k:], b[j:])
}

// autoBlock chooses a moving-block length from the series' autocorrelation:
// twice the first lag at which it is no longer significant (|acf| < 2/√n),
// at least 1 and at most n/10. Lags past 64 are probed geometrically, so a
// long series costs O(n log n), not O(n²).
func autoBlock(x []float64) int {
	n := len(x)
	if n < 20 {
		return 1
	}
	mean := 0.0
	for _, v := range x {
		mean += v
	}
	mean /= float64(n)
	var c0 float64
	for _, v := range x {
		c0 += (v - mean) * (v - mean)
	}
	if c0 == 0 {
		return 1
	}
	limit := 2 / math.Sqrt(float64(n))
	maxLag := n / 10
	for k := 1; k <= maxLag; k = nextLag(k) {
		var ck float64
		for i := 0; i+k < n; i++ {
			ck += (x[i] - mean) * (x[i+k] - mean)
		}
		if math.Abs(ck/c0) < limit {
			if k == 1 {
				return 1 // no significant correlation: the plain bootstrap
			}
			return min(2*k, maxLag)
		}
	}
	return max(1, maxLag)
}

func nextLag(k int) int {
	if k < 64 {
		return k + 1
	}
	return k + k/8
}

// blockFor resolves a requested block length (BlockAuto: from the data).
func blockFor(x []float64, b int) int {
	if b == BlockAuto {
		b = autoBlock(x)
	}
	return max(1, min(b, len(x)))
}

// zFor is the two-sided standard normal critical value at level conf.
func zFor(conf float64) float64 { return distuv.UnitNormal.Quantile(1 - (1-conf)/2) }

// BootstrapQuantile returns the bootstrap interval at level conf for the
// p-quantile of timeOrdered (values in the order they happened), and the
// block length used; an end the sample cannot bound is −Inf or +Inf.
func BootstrapQuantile(timeOrdered []float64, p, conf float64, o BootstrapOptions) (lo, hi float64, block int) {
	if len(timeOrdered) < 2 {
		return math.NaN(), math.NaN(), 1
	}
	s := newSample(timeOrdered)
	se, block := s.cdfStandardErrors([]float64{p}, o)
	lo, hi, _, _ = s.woodruff(p, se[0], conf)
	return lo, hi, block
}

// woodruff maps p ± z·se through the sorted sample; an end beyond the
// sample is unbounded (−Inf or +Inf, and loOK or hiOK false).
func (s *sample) woodruff(p, se, conf float64) (lo, hi float64, loOK, hiOK bool) {
	return woodruffAt(sortedQuantile(s.sorted), p, se, zFor(conf))
}

// quantileFunc is a sample's p-quantile (type 7), from the sorted sample
// or from a histogram of it.
type quantileFunc func(p float64) float64

// sortedQuantile is the quantile function of a sorted sample.
func sortedQuantile(sorted []float64) quantileFunc {
	return func(p float64) float64 { return Percentile(sorted, p) }
}

// woodruffAt maps p ± crit·se through the quantile function; an end beyond
// the sample is unbounded (−Inf or +Inf, and loOK or hiOK false).
func woodruffAt(quantile quantileFunc, p, se, crit float64) (lo, hi float64, loOK, hiOK bool) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if pl := p - crit*se; pl >= 0 {
		lo, loOK = quantile(pl), true
	}
	if ph := p + crit*se; ph <= 1 {
		hi, hiOK = quantile(ph), true
	}
	return lo, hi, loOK, hiOK
}

// atOrBelow counts the values of sorted at or below q.
func atOrBelow(sorted []float64, q float64) int {
	return sort.SearchFloat64s(sorted, math.Nextafter(q, math.Inf(1)))
}

// blockTypes is the distribution of the count vectors of all n circular
// blocks: vec[t*m+j] is how many of a type-t block's observations lie below
// threshold j, freq[t] how many blocks have type t.
type blockTypes struct {
	m    int
	vec  []int32
	freq []int64
	cum  []int64 // running sum of freq
}

// blockCounts tallies the circular blocks of length l by their counts
// below each rank threshold.
func (s *sample) blockCounts(thresholds []int32, l int) blockTypes {
	n, m := len(s.rank), len(thresholds)
	bt := blockTypes{m: m}
	if l == 1 {
		// One observation per block: the types are the bins between
		// thresholds (ascending), a bin's vector is 1 from its threshold on.
		prev := int32(0)
		for b := 0; b <= m; b++ {
			upper := int32(n)
			if b < m {
				upper = thresholds[b]
			}
			if upper > prev {
				for j := range m {
					bt.vec = append(bt.vec, int32(b2i(b <= j)))
				}
				bt.freq = append(bt.freq, int64(upper-prev))
			}
			prev = max(prev, upper)
		}
		bt.cumulate()
		return bt
	}
	below := func(t int, j int) int32 {
		if s.rank[t%n] < thresholds[j] {
			return 1
		}
		return 0
	}
	window := make([]int32, m)
	for t := range l {
		for j := range m {
			window[j] += below(t, j)
		}
	}
	index := map[string]int{}
	key := make([]byte, 0, 5*m)
	for start := range n {
		key = key[:0]
		for _, c := range window {
			key = binary.AppendUvarint(key, uint64(c))
		}
		t, ok := index[string(key)]
		if !ok {
			t = len(bt.freq)
			index[string(key)] = t
			bt.vec = append(bt.vec, window...)
			bt.freq = append(bt.freq, 0)
		}
		bt.freq[t]++
		for j := range m { // slide: drop start, add start+l
			window[j] += below(start+l, j) - below(start, j)
		}
	}
	bt.cumulate()
	return bt
}

func (bt *blockTypes) cumulate() {
	var c int64
	for _, f := range bt.freq {
		c += f
		bt.cum = append(bt.cum, c)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cdfStandardErrors returns, for each level ps[j], the bootstrap standard
// error of the empirical CDF at the sample's ps[j]-quantile, and the block
// length used.
func (s *sample) cdfStandardErrors(ps []float64, o BootstrapOptions) ([]float64, int) {
	n, m := len(s.sorted), len(ps)
	if o.Resamples <= 0 {
		o.Resamples = 2000
	}
	l := blockFor(s.timeOrdered, o.Block)
	thresholds := make([]int32, m)
	center := make([]float64, m)
	for j, p := range ps {
		q := Percentile(s.sorted, p)
		thresholds[j] = int32(atOrBelow(s.sorted, q))
		center[j] = float64(thresholds[j]) / float64(n)
	}
	bt := s.blockCounts(thresholds, l)
	full, rest := n/l, n%l
	workers := min(runtime.GOMAXPROCS(0), o.Resamples)
	sums := make([][]float64, workers) // per worker: Σ(F*−F̂)² per level
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			acc := make([]float64, m)
			counts := make([]int64, m)
			for rep := w; rep < o.Resamples; rep += workers {
				rng := rand.New(rand.NewPCG(o.Seed, uint64(rep)))
				clear(counts)
				bt.draw(full, rng, counts)
				if rest > 0 { // the last, partial block
					start := rng.IntN(n)
					for k := range rest {
						r := s.rank[(start+k)%n]
						for j, th := range thresholds {
							if r < th {
								counts[j]++
							}
						}
					}
				}
				for j := range m {
					d := float64(counts[j])/float64(n) - center[j]
					acc[j] += d * d
				}
			}
			sums[w] = acc
		})
	}
	wg.Wait()
	se := make([]float64, m)
	for j := range m {
		var ss float64
		for _, acc := range sums {
			ss += acc[j]
		}
		se[j] = math.Sqrt(ss / float64(o.Resamples))
	}
	return se, l
}

// draw adds to counts the threshold counts of b blocks drawn uniformly
// from the n circular blocks: a multinomial over the block types, drawn
// as successive binomials, or block by block when there are more types
// than blocks to draw.
func (bt blockTypes) draw(b int, rng *rand.Rand, counts []int64) {
	total := bt.cum[len(bt.cum)-1]
	if len(bt.freq) > b {
		// Few blocks, many types: pick b blocks, each a type by frequency.
		for range b {
			u := rng.Int64N(total)
			t := sort.Search(len(bt.cum), func(i int) bool { return bt.cum[i] > u })
			for j := range bt.m {
				counts[j] += int64(bt.vec[t*bt.m+j])
			}
		}
		return
	}
	left, remaining := b, total
	for t, f := range bt.freq {
		if left == 0 {
			break
		}
		k := left
		if f < remaining {
			k = int(distuv.Binomial{N: float64(left), P: float64(f) / float64(remaining), Src: randSource{rng}}.Rand())
		}
		for j := range bt.m {
			counts[j] += int64(k) * int64(bt.vec[t*bt.m+j])
		}
		left -= k
		remaining -= f
	}
}

// randSource adapts a *rand.Rand to the rand.Source gonum asks for.
type randSource struct{ r *rand.Rand }

func (s randSource) Uint64() uint64 { return s.r.Uint64() }
