package synth

import (
	"context"
	"math"
	"slices"
)

// DispersionIndex returns the index of dispersion of counts (variance over
// mean of the number of arrivals per window) for windows of w seconds laid
// from t0 over [t0, t1). ts are arrival times in seconds. It returns NaN when
// fewer than two whole windows fit or no arrival falls in them. Memory is
// bounded by the arrivals, not the number of windows.
func DispersionIndex(ts []float64, t0, t1, w float64) float64 {
	nw := math.Floor((t1 - t0) / w)
	if !(nw >= 2) {
		return math.NaN()
	}
	if nw <= max(1<<20, 4*float64(len(ts))) {
		return denseDispersion(ts, t0, w, int(nw))
	}
	// Many more windows than arrivals: Σc and Σc² over the windows that
	// hold arrivals (the rest add 0).
	var sum, sq float64
	if slices.IsSorted(ts) {
		cur, c := -1.0, 0.0
		for _, t := range ts {
			k := math.Floor((t - t0) / w)
			if k < 0 || k >= nw {
				continue
			}
			if k != cur {
				sq += c * c
				cur, c = k, 0
			}
			c++
			sum++
		}
		sq += c * c
	} else {
		counts := map[float64]float64{}
		for _, t := range ts {
			if k := math.Floor((t - t0) / w); k >= 0 && k < nw {
				counts[k]++
				sum++
			}
		}
		for _, c := range counts {
			sq += c * c
		}
	}
	mean := sum / nw
	if mean == 0 {
		return math.NaN()
	}
	return (sq - nw*mean*mean) / (nw - 1) / mean
}

// denseDispersion is DispersionIndex with one counter per window.
func denseDispersion(ts []float64, t0, w float64, n int) float64 {
	counts := make([]float64, n)
	for _, t := range ts {
		k := int(math.Floor((t - t0) / w))
		if k >= 0 && k < n {
			counts[k]++
		}
	}
	var sum, sq float64
	for _, c := range counts {
		sum += c
	}
	mean := sum / float64(n)
	if mean == 0 {
		return math.NaN()
	}
	for _, c := range counts {
		sq += (c - mean) * (c - mean)
	}
	return sq / float64(n-1) / mean
}

// lruCache is a block-level LRU cache that counts hits, the way a prefix
// cache with LRU eviction sees a trace: every block of every request is
// looked up in order; a hit refreshes it, a miss inserts it.
type lruCache struct {
	capacity   int
	index      map[int64]int32 // block id -> node
	prev, next []int32
	keys       []int64
	head, tail int32 // head = most recent
	free       []int32
	hits, refs int64
}

func newLRU(capacityBlocks int) *lruCache {
	return &lruCache{capacity: max(1, capacityBlocks), index: map[int64]int32{}, head: -1, tail: -1}
}

func (c *lruCache) unlink(n int32) {
	p, x := c.prev[n], c.next[n]
	if p >= 0 {
		c.next[p] = x
	} else {
		c.head = x
	}
	if x >= 0 {
		c.prev[x] = p
	} else {
		c.tail = p
	}
}

func (c *lruCache) pushFront(n int32) {
	c.prev[n], c.next[n] = -1, c.head
	if c.head >= 0 {
		c.prev[c.head] = n
	}
	c.head = n
	if c.tail < 0 {
		c.tail = n
	}
}

// access looks up one block.
func (c *lruCache) access(id int64) {
	c.refs++
	if n, ok := c.index[id]; ok {
		c.hits++
		c.unlink(n)
		c.pushFront(n)
		return
	}
	var n int32
	if len(c.index) >= c.capacity {
		n = c.tail
		c.unlink(n)
		delete(c.index, c.keys[n])
	} else if k := len(c.free); k > 0 {
		n = c.free[k-1]
		c.free = c.free[:k-1]
	} else {
		n = int32(len(c.keys))
		c.keys = append(c.keys, 0)
		c.prev = append(c.prev, -1)
		c.next = append(c.next, -1)
	}
	c.keys[n] = id
	c.index[id] = n
	c.pushFront(n)
}

// HitRate returns the share of block lookups that hit.
func (c *lruCache) HitRate() float64 {
	if c.refs == 0 {
		return math.NaN()
	}
	return float64(c.hits) / float64(c.refs)
}

// LRUHitRates replays the prefix blocks of requests (in order) through
// block-level LRU caches of the given capacities in tokens, and returns each
// cache's block hit rate.
func LRUHitRates(blocks [][]int64, blockSize int, capacitiesTokens []float64) []float64 {
	out, _ := lruHitRates(context.Background(), blocks, blockSize, capacitiesTokens)
	return out
}

// lruHitRates is LRUHitRates, checking ctx every 4096 requests.
func lruHitRates(ctx context.Context, blocks [][]int64, blockSize int, capacitiesTokens []float64) ([]float64, error) {
	out := make([]float64, len(capacitiesTokens))
	for i, capTokens := range capacitiesTokens {
		c := newLRU(int(capTokens / float64(blockSize)))
		for j, bs := range blocks {
			if j&4095 == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			for _, b := range bs {
				c.access(b)
			}
		}
		out[i] = c.HitRate()
	}
	return out, nil
}

// hurwitzZeta returns ζ(s, q) = Σ_{k≥0} (k+q)^-s for s > 1, with its first
// and second derivatives in s, by direct summation of the first terms and
// the Euler–Maclaurin tail.
func hurwitzZeta(s, q float64) (z, dz, d2z float64) {
	const terms = 64
	for k := 0; k < terms; k++ {
		x := float64(k) + q
		l := math.Log(x)
		t := math.Pow(x, -s)
		z += t
		dz -= l * t
		d2z += l * l * t
	}
	// Tail Σ_{x ≥ N} x^-s ≈ ∫_N^∞ x^-s dx + N^-s/2 (N = terms + q), and its
	// derivatives in s.
	n := float64(terms) + q
	l := math.Log(n)
	p := math.Pow(n, 1-s)
	integral := p / (s - 1)
	dIntegral := -l*p/(s-1) - p/((s-1)*(s-1))
	d2Integral := l*l*p/(s-1) + 2*l*p/((s-1)*(s-1)) + 2*p/((s-1)*(s-1)*(s-1))
	half := math.Pow(n, -s) / 2
	// Next Euler–Maclaurin term: s·N^(-s-1)/12.
	em := s * math.Pow(n, -s-1) / 12
	dem := math.Pow(n, -s-1)/12 - l*em
	d2em := -2*l*math.Pow(n, -s-1)/12 + l*l*em
	z += integral + half + em
	dz += dIntegral - l*half + dem
	d2z += d2Integral + l*l*half + d2em
	return z, dz, d2z
}
