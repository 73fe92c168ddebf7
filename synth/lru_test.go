package synth

import "math"

// The LRU cache simulation below is the independent truth the stack
// distances are checked against (TestHitCurveEqualsLRUSimulation):
// validate computes hit rates from distances, in one pass for every size.

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

// lruHitRates replays the prefix blocks of requests (in order) through
// block-level LRU caches of the given capacities in tokens, and returns each
// cache's block hit rate.
func lruHitRates(blocks [][]int64, blockSize int, capacitiesTokens []float64) []float64 {
	out := make([]float64, len(capacitiesTokens))
	for i, capTokens := range capacitiesTokens {
		c := newLRU(int(capTokens / float64(blockSize)))
		for _, bs := range blocks {
			for _, b := range bs {
				c.access(b)
			}
		}
		out[i] = c.HitRate()
	}
	return out
}
