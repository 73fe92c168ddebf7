package tokenize

import (
	"container/heap"
	"math"
)

// longPiece is the length past which a piece is merged through a heap:
// the scan for the lowest pair costs a pass over the piece per join, so a
// piece of n bytes costs n² (a megabyte-long word, seconds to minutes),
// where the heap costs n log n; below it the scan is the faster.
const longPiece = 512

// mergeLong is merge for long pieces, with the same result: the pair of
// the lowest rank, the leftmost of equals, is joined first. Parts are a
// linked list over the piece's byte offsets; the heap holds each pair as
// it was ranked, and a pair since changed is skipped when it comes up.
// Offsets are int32: a piece reaches it no longer than maxMergePiece.
func (m *merger) mergeLong(ranks map[string]int, piece string) []int {
	n := int32(len(piece))
	next := make([]int32, n+1) // next[i]: the start of the part after the one at i; n at the end
	prev := make([]int32, n+1)
	alive := make([]bool, n+1)
	for i := range n + 1 {
		next[i], prev[i], alive[i] = min(i+1, n), i-1, true
	}
	rankAt := func(i int32) int32 { // the rank of the part at i joined with the next
		if i >= n || next[i] >= n {
			return noRank32
		}
		if r, ok := ranks[piece[i:next[next[i]]]]; ok {
			return int32(r)
		}
		return noRank32
	}
	pairRank := make([]int32, n)
	h := make(pairHeap, 0, n)
	for i := range n {
		pairRank[i] = rankAt(i)
		if pairRank[i] != noRank32 {
			h = append(h, rankedPair{pairRank[i], i})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		p := heap.Pop(&h).(rankedPair)
		i := p.start
		if !alive[i] || pairRank[i] != p.rank {
			continue // joined since, or ranked again
		}
		// The part at i swallows the one after it; its pairs either side
		// are ranked again.
		j := next[i]
		alive[j] = false
		next[i] = next[j]
		if next[j] <= n {
			prev[next[j]] = i
		}
		if pairRank[i] = rankAt(i); pairRank[i] != noRank32 {
			heap.Push(&h, rankedPair{pairRank[i], i})
		}
		if k := prev[i]; k >= 0 {
			if pairRank[k] = rankAt(k); pairRank[k] != noRank32 {
				heap.Push(&h, rankedPair{pairRank[k], k})
			}
		}
	}
	m.starts = m.starts[:0]
	for i := int32(0); i < n; i = next[i] {
		m.starts = append(m.starts, int(i))
	}
	return append(m.starts, int(n))
}

// noRank32 is noRank for mergeLong's int32 ranks (ranks are below 2^31:
// the largest vocabularies hold a few hundred thousand).
const noRank32 = math.MaxInt32

// rankedPair is a pair of neighbouring parts as ranked: the start of the
// left one, and the rank of the two joined.
type rankedPair struct{ rank, start int32 }

// pairHeap orders pairs by rank, then leftmost first, the order merge
// joins them in.
type pairHeap []rankedPair

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(a, b int) bool {
	return h[a].rank < h[b].rank || (h[a].rank == h[b].rank && h[a].start < h[b].start)
}
func (h pairHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(rankedPair)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
