package analyze

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
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

// sample holds one metric's values in time order and sorted, with each
// time-ordered value's rank in the sorted order, so a bootstrap replicate is
// a vector of counts over the sorted values: sort once, never re-sort.
type sample struct {
	sorted []float64
	rank   []int32 // rank[i] = position of the i-th (time-ordered) value in sorted
}

func newSample(timeOrdered []float64) *sample {
	n := len(timeOrdered)
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int {
		switch x, y := timeOrdered[a], timeOrdered[b]; {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	s := &sample{sorted: make([]float64, n), rank: make([]int32, n)}
	for r, i := range idx {
		s.sorted[r] = timeOrdered[i]
		s.rank[i] = int32(r)
	}
	return s
}

// quantilesOfCounts fills out[j] with the type-7 ps[j]-quantile of the
// resample in one pass; ps must be ascending.
func quantilesOfCounts(sorted []float64, counts []int32, n int, ps []float64, out []float64) {
	j := 0
	seen := 0
	r := 0
	// advance r to the value holding expanded position pos.
	valueAt := func(pos int) float64 {
		for r < len(counts) && seen+int(counts[r]) <= pos {
			seen += int(counts[r])
			r++
		}
		return sorted[min(r, len(sorted)-1)]
	}
	for ; j < len(ps); j++ {
		h := ps[j] * float64(n-1)
		lo := int(math.Floor(h))
		at := valueAt(lo)
		if lo+1 >= n {
			out[j] = at
			continue
		}
		// The next position may sit in this value or a later one; peek
		// without moving the shared cursor past lo.
		saveR, saveSeen := r, seen
		next := valueAt(lo + 1)
		r, seen = saveR, saveSeen
		out[j] = at + (h-float64(lo))*(next-at)
	}
}

// autoBlock chooses a moving-block length from the series' autocorrelation:
// twice the first lag at which it is no longer significant (|acf| < 2/√n),
// at least 1 and at most n/10.
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
	for k := 1; k <= maxLag; k++ {
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

// BootstrapQuantile returns a percentile-bootstrap interval at level conf
// for the p-quantile of timeOrdered (values in the order they happened) and
// the block length used. Replicates are drawn by moving blocks of that
// length (1: independent draws), seeded per replicate, on all cores.
func BootstrapQuantile(timeOrdered []float64, p, conf float64, o BootstrapOptions) (lo, hi float64, block int) {
	if len(timeOrdered) < 2 {
		return math.NaN(), math.NaN(), 1
	}
	o.Block = blockFor(timeOrdered, o.Block)
	est, _ := newSample(timeOrdered).replicates(timeOrdered, []float64{p}, o)
	lo, hi = interval(est[0], conf)
	return lo, hi, o.Block
}

// blockFor resolves a requested block length (BlockAuto: from the data).
func blockFor(x []float64, b int) int {
	if b == BlockAuto {
		b = autoBlock(x)
	}
	return max(1, min(b, len(x)))
}

// interval sorts replicate estimates and returns their percentile interval
// at level conf.
func interval(est []float64, conf float64) (lo, hi float64) {
	slices.Sort(est)
	alpha := (1 - conf) / 2
	return Percentile(est, alpha), Percentile(est, 1-alpha)
}

// replicates returns, for each of the ascending quantile levels ps, the
// bootstrap replicates of that quantile, and the block length used. One
// resample (a vector of counts) serves every level.
func (s *sample) replicates(timeOrdered []float64, ps []float64, o BootstrapOptions) ([][]float64, int) {
	n := len(s.sorted)
	if o.Resamples <= 0 {
		o.Resamples = 2000
	}
	block := blockFor(timeOrdered, o.Block)
	est := make([][]float64, len(ps))
	for j := range est {
		est[j] = make([]float64, o.Resamples)
	}
	workers := min(runtime.GOMAXPROCS(0), o.Resamples)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			counts := make([]int32, n)
			out := make([]float64, len(ps))
			for rep := w; rep < o.Resamples; rep += workers {
				clear(counts)
				rng := rand.New(rand.NewPCG(o.Seed, uint64(rep)))
				if block == 1 {
					for range n {
						counts[rng.IntN(n)]++
					}
				} else {
					// Moving blocks: start anywhere, wrap around the end.
					for drawn := 0; drawn < n; {
						start := rng.IntN(n)
						for k := 0; k < block && drawn < n; k++ {
							counts[s.rank[(start+k)%n]]++
							drawn++
						}
					}
				}
				quantilesOfCounts(s.sorted, counts, n, ps, out)
				for j := range ps {
					est[j][rep] = out[j]
				}
			}
		})
	}
	wg.Wait()
	return est, block
}
