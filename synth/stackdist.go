package synth

import (
	"context"
	"math"
	"math/bits"
	"slices"
)

// lruStack tracks the LRU stack distance of block ids: the number of
// distinct other blocks used since a block's last use. An LRU cache of C
// blocks hits exactly the uses whose distance is below C, so a workload with
// the trace's distances has the trace's hit rate at every cache size. Each
// use takes the next stamp; a Fenwick tree over stamps marks the stamps that
// are some block's latest use, so a distance is a count of marks after a
// stamp, in O(log n).
type lruStack struct {
	last  map[int64]int32 // block id -> stamp of its latest use
	ids   []int64         // stamp -> block id, or -1 once superseded
	times []float64       // stamp -> time of the use (seconds)
	tags  []int32         // stamp -> the user's tag (the fit: its request's blocks)
	tree  []int32         // Fenwick tree (1-based) over stamps of latest uses
	live  int
	// maxLive bounds the blocks remembered; the least recently used beyond
	// it are forgotten (their next use counts as a first use).
	maxLive int
	forgot  bool
}

// minStackStamps is the stamp capacity a stack starts with.
const minStackStamps = 1 << 12

func newLRUStack(maxLive int) *lruStack {
	s := &lruStack{last: map[int64]int32{}, maxLive: max(maxLive, 1)}
	s.rebuild(nil, nil, nil, minStackStamps)
	return s
}

// rebuild lays ids (latest uses in stamp order) and their times on fresh
// stamps 0..len(ids)−1 in arrays of capacity c.
func (s *lruStack) rebuild(ids []int64, times []float64, tags []int32, c int) {
	s.ids = append(make([]int64, 0, c), ids...)
	s.times = append(make([]float64, 0, c), times...)
	s.tags = append(make([]int32, 0, c), tags...)
	s.tree = make([]int32, c+1)
	clear(s.last)
	for i, id := range ids {
		s.last[id] = int32(i)
		s.tree[i+1] = 1
	}
	for i := 1; i <= c; i++ { // linear-time Fenwick build
		if j := i + i&-i; j <= c {
			s.tree[j] += s.tree[i]
		}
	}
	s.live = len(ids)
}

// compact renumbers the latest uses from 0, forgetting the least recent
// beyond maxLive, so stamps stay below twice the blocks remembered.
func (s *lruStack) compact() {
	ids := make([]int64, 0, s.live)
	times := make([]float64, 0, s.live)
	tags := make([]int32, 0, s.live)
	for i, id := range s.ids {
		if id >= 0 {
			ids = append(ids, id)
			times = append(times, s.times[i])
			tags = append(tags, s.tags[i])
		}
	}
	if len(ids) > s.maxLive {
		// Forget a quarter at once, so that a full stack compacts once per
		// maxLive/4 uses rather than on every use.
		drop := len(ids) - (s.maxLive - s.maxLive/4)
		ids, times, tags = ids[drop:], times[drop:], tags[drop:]
		s.forgot = true
	}
	s.rebuild(ids, times, tags, max(minStackStamps, 2*len(ids)))
}

func (s *lruStack) add(i, v int32) {
	for i++; int(i) < len(s.tree); i += i & -i {
		s.tree[i] += v
	}
}

// prefix returns the marks at stamps 0..i.
func (s *lruStack) prefix(i int32) int {
	n := 0
	for i++; i > 0; i -= i & -i {
		n += int(s.tree[i])
	}
	return n
}

// distance returns the stack distance of id before its next use, and the
// time of its last use; ok is false for a block never used (or forgotten).
func (s *lruStack) distance(id int64) (d int, t float64, ok bool) {
	st, ok := s.last[id]
	if !ok {
		return 0, 0, false
	}
	return s.live - s.prefix(st), s.times[st], true
}

// distanceOfStamp returns the number of blocks used since stamp st.
func (s *lruStack) distanceOfStamp(st int32) int { return s.live - s.prefix(st) }

// stampAt returns the stamp of the block at stack distance d (0: the most
// recent), or of the least recent block when d ≥ the blocks remembered; −1
// when the stack is empty.
func (s *lruStack) stampAt(d int) int32 {
	if s.live == 0 {
		return -1
	}
	k := s.live - min(max(d, 0), s.live-1) // the k-th mark, 1-based
	pos := 0
	for step := 1 << (bits.Len(uint(len(s.tree)-1)) - 1); step > 0; step >>= 1 {
		if next := pos + step; next < len(s.tree) && int(s.tree[next]) < k {
			pos = next
			k -= int(s.tree[next])
		}
	}
	return int32(pos) // tree index pos+1 is stamp pos
}

// tag returns the tag of id's last use (0 when unknown).
func (s *lruStack) tag(id int64) int32 {
	if st, ok := s.last[id]; ok {
		return s.tags[st]
	}
	return 0
}

// use records that id was used at t.
func (s *lruStack) use(id int64, t float64) { s.useTagged(id, t, 0) }

// useTagged records that id was used at t by a user tagged tag.
func (s *lruStack) useTagged(id int64, t float64, tag int32) {
	if len(s.ids) == cap(s.ids) {
		s.compact()
	}
	if st, ok := s.last[id]; ok {
		s.add(st, -1)
		s.ids[st] = -1
	} else {
		s.live++
	}
	st := int32(len(s.ids))
	s.ids = append(s.ids, id)
	s.times = append(s.times, t)
	s.tags = append(s.tags, tag)
	s.add(st, 1)
	s.last[id] = st
	if s.live > s.maxLive {
		s.compact()
	}
}

// StackDistances returns the LRU stack distance of every block use of
// requests taken in order (blocks within a request in order): the number of
// distinct other blocks used since that block's last use, +Inf for a first
// use. An LRU cache of C blocks hits exactly the uses below C.
func StackDistances(ctx context.Context, blocks [][]int64) ([]float64, error) {
	n := 0
	for _, bs := range blocks {
		n += len(bs)
	}
	s := newLRUStack(math.MaxInt32 / 4)
	out := make([]float64, 0, n)
	for j, bs := range blocks {
		if j&4095 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for _, b := range bs {
			if d, _, ok := s.distance(b); ok {
				out = append(out, float64(d))
			} else {
				out = append(out, math.Inf(1))
			}
			s.use(b, 0)
		}
	}
	return out, nil
}

// HitCurve returns, for each capacity in blocks, the share of uses whose
// stack distance is below it: the block hit rate of an LRU cache of that
// size. dist must be sorted.
func HitCurve(dist []float64, capacities []float64) []float64 {
	out := make([]float64, len(capacities))
	if len(dist) == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	for i, c := range capacities {
		k, _ := slices.BinarySearch(dist, c)
		out[i] = float64(k) / float64(len(dist))
	}
	return out
}
