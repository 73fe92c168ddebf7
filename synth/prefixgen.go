package synth

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/servetrace/servetrace/internal/hashmix"
)

// maxPrefixBlocks bounds the prefix blocks of one generated request: with
// small blocks a 10-million-token prompt would carry 80 MB of ids.
const maxPrefixBlocks = 1 << 16

// prefixGen assigns prefix blocks to generated requests by copying from its
// own recent history with the fitted laws. With a stack-distance law (every
// model fitted since it exists) a reuse's parent is the context whose
// deepest shared block lies at the drawn LRU stack distance, so the
// workload's reuse has the trace's distances and an LRU cache of any size
// hits as often as on the trace; older models copy by age in seconds.
type prefixGen struct {
	m       *PrefixModel
	rng     *rand.Rand
	salt    uint64
	counter uint64
	hist    []histEntry     // prefix contexts in order of last use
	offset  int64           // absolute position of hist[0]
	live    map[int64]int64 // age mode: each context's latest history position
	// byLen lists, per length bucket (lengthBucket of its blocks), the
	// history positions (absolute) of its entries in order of use: distance
	// mode looks for a parent of a given length near a given distance.
	byLen  [lengthBuckets][]int64
	nextID int64
	// Age mode: blockLast is when each block in the history was last used.
	blockLast map[int64]float64
	maxAge    float64
	// Distance mode: stack holds every generated block use, timed by its
	// sequence number seq and tagged with the block's prefix position;
	// blockCtx is the history position of the latest context holding each
	// block;
	// block; maxDist is the largest distance the laws draw.
	stack    *lruStack
	blockCtx map[int64]int64
	cdfs     map[*Marginal]*quantileCDF
	seq      float64
	maxDist  int
	// cold, when true, disables reuse; shiftAt drops the history older than
	// that time once (hot-prefix-shift).
	cold    func(t float64) bool
	shiftAt float64
	shifted bool
}

// histEntry is one prefix context in the generator's history, at its last
// use. In age mode a context used again is appended anew and its older
// entry goes stale, so the history stays ordered by last use, as the fit
// measures ages; in distance mode each block's own last use is in the
// stack and an entry stays where it was made.
type histEntry struct {
	// key is when the context was last used: seconds in age mode, the use
	// sequence number in distance mode.
	key    float64
	id     int64
	blocks []int64
}

func newPrefixGen(m *PrefixModel, seed uint64) *prefixGen {
	g := &prefixGen{m: m, rng: rand.New(rand.NewPCG(seed, 0xb10c)), salt: seed*0x9e3779b97f4a7c15 + 1, shiftAt: math.Inf(1), live: map[int64]int64{}, blockLast: map[int64]float64{}}
	if k := m.AgeS.Knots; len(k) > 0 {
		g.maxAge = k[len(k)-1]
	}
	if m.Distance != nil {
		g.maxDist = int(lastKnot(m.Distance))
		for i := range m.DistanceByDepth {
			g.maxDist = max(g.maxDist, int(lastKnot(&m.DistanceByDepth[i].Distance)))
		}
		g.stack = newLRUStack(g.stackBound())
		g.blockCtx = map[int64]int64{}
	}
	return g
}

// stackBound is the blocks the distance mode remembers: enough that a block
// at the largest drawn distance survives the stack's forgetting a quarter.
func (g *prefixGen) stackBound() int { return min(maxTrackedBlocks, 2*g.maxDist+4096) }

func lastKnot(m *Marginal) float64 {
	if len(m.Knots) == 0 {
		return 0
	}
	return m.Knots[len(m.Knots)-1]
}

// freshID returns a new block id no earlier request used.
func (g *prefixGen) freshID() int64 {
	g.counter++
	return int64(hashmix.Finalize(g.counter+g.salt) & (1<<62 - 1))
}

// reuseShare is the probability that a request with in input tokens
// reuses: its input bin's share (else the pooled one), in distance mode
// scaled by the share at the generator's own fill over the pooled share,
// capped at 1 (see ReuseByFill).
func (g *prefixGen) reuseShare(in int64) float64 {
	share := g.m.ReuseShare
	hi := float64(in)
	for _, b := range g.m.ReuseByInputBin {
		if hi < b.InputHigh {
			if b.N >= minBinRequests {
				share = b.Share
			}
			break
		}
	}
	bins := g.m.ReuseByFill
	if g.stack == nil || len(bins) == 0 || g.m.ReuseShare == 0 {
		return share
	}
	// The fill is the distinct blocks generated so far (every block starts
	// as a fresh id), bounded as the fit's memory is; past the trace's
	// fullest, its fullest bin holds (the steady state).
	fill := int64(min(g.counter, maxTrackedBlocks))
	i, _ := slices.BinarySearchFunc(bins, fill, func(b FillBin, x int64) int { return cmp.Compare(b.FillHigh, x) })
	return min(share*bins[min(i, len(bins)-1)].Share/g.m.ReuseShare, 1)
}

// maxRedraws bounds the draws of a reuse whose distance the history cannot
// hold yet; after them the distance is drawn below what it holds.
const maxRedraws = 8

// laws returns the reuse depth and age laws for a request with in input
// tokens: its bin's where the fit had enough of them, else the pooled ones,
// and the bin's absolute depth law (nil without one).
func (g *prefixGen) laws(in int64) (depth, age, blocks *Marginal) {
	edge := binHigh(inputBin(in))
	for i := range g.m.ByInputBin {
		if b := &g.m.ByInputBin[i]; b.InputHigh == edge {
			return &b.Depth, &b.AgeS, b.DepthBlocks
		}
	}
	return &g.m.Depth, &g.m.AgeS, g.m.DepthBlocks
}

// depthBlocks draws the blocks a reuse by a request of nb blocks with in
// input tokens takes: an atom of the absolute law where the draw falls in
// one (a shared system prompt's fixed size), else the share law's quantile
// at the same draw, so the two laws stay in rank order.
func (g *prefixGen) depthBlocks(in int64, nb int) int {
	share, _, blocks := g.laws(in)
	u := g.rng.Float64()
	for _, a := range headAtoms(blocks, headBlocks(inputBin(in), g.m.BlockSize)) {
		if u < a.PHigh {
			return min(max(int(a.Value), 1), nb)
		}
	}
	return min(max(int(math.Round(share.Quantile(u)*float64(nb))), 1), nb)
}

// depth draws the blocks a reuse by a request of nb blocks takes: from
// its prompt class's depth law (the nearest fitted class's), or, in a
// model without them, by its input bin (depthBlocks).
func (g *prefixGen) depth(in int64, nb int) int {
	laws := g.m.DepthByPrompt
	if len(laws) == 0 {
		return g.depthBlocks(in, nb)
	}
	c, best, gap := depthClass(nb), 0, depthClasses
	for i := range laws {
		if k := abs(depthClass(laws[i].Low) - c); k < gap {
			best, gap = i, k
		}
	}
	return laws[best].draw(g.rng, nb)
}

// distanceLaws returns the stack-distance and parent-excess laws of a reuse
// of d blocks: its depth class's, else the nearest fitted class's, else the
// pooled distance and no excess preference.
func (g *prefixGen) distanceLaws(d int) (dist, excess *Marginal) {
	c := depthClass(d)
	dist, gap := g.m.Distance, depthClasses
	for i := range g.m.DistanceByDepth {
		b := &g.m.DistanceByDepth[i]
		if k := depthClass(b.Low); abs(k-c) < gap {
			dist, excess, gap = &b.Distance, b.Excess, abs(k-c)
		}
	}
	return dist, excess
}

func abs(x int) int { return max(x, -x) }

// cdfOf returns law's tabulated CDF, made on first use.
func (g *prefixGen) cdfOf(law *Marginal) *quantileCDF {
	if g.cdfs == nil {
		g.cdfs = map[*Marginal]*quantileCDF{}
	}
	c := g.cdfs[law]
	if c == nil {
		c = newQuantileCDF(law)
		g.cdfs[law] = c
	}
	return c
}

// now is the key of a use happening now: t in age mode, the next sequence
// number in distance mode.
func (g *prefixGen) now(t float64) float64 {
	if g.stack != nil {
		return g.seq
	}
	return t
}

// record notes that blocks were used at t, in order: every generated
// request's, a session's later turns included, since they all fill the
// cache in between.
func (g *prefixGen) record(t float64, blocks []int64) {
	for i, id := range blocks {
		if g.stack != nil {
			g.seq++
			g.stack.useTagged(id, g.seq, int32(min(i+1, math.MaxInt32)))
		} else {
			g.blockLast[id] = t
		}
	}
}

// forget drops the contexts no drawn reuse can reach: not used within the
// oldest age ever reused, or beyond the largest stack distance.
func (g *prefixGen) forget(t float64) {
	cut := 0
	if g.stack != nil {
		if st := g.stack.stampAt(g.maxDist); st >= 0 {
			oldest := g.stack.times[st]
			for cut < len(g.hist) && g.hist[cut].key < oldest {
				e, pos := g.hist[cut], g.offset+int64(cut)
				for _, id := range e.blocks {
					if g.blockCtx[id] == pos {
						delete(g.blockCtx, id)
					}
				}
				cut++
			}
		}
	} else {
		for cut < len(g.hist) && t-g.hist[cut].key > g.maxAge {
			if e := g.hist[cut]; g.live[e.id] == g.offset+int64(cut) {
				delete(g.live, e.id)
				for _, id := range e.blocks {
					if g.blockLast[id] <= e.key {
						delete(g.blockLast, id)
					}
				}
			}
			cut++
		}
	}
	// Re-slicing, not copying: a long history would make every request pay
	// for moving it; append reclaims the dropped head when it reallocates.
	g.hist = g.hist[cut:]
	g.offset += int64(cut)
}

// reset forgets the whole history (hot-prefix-shift).
func (g *prefixGen) reset() {
	g.offset += int64(len(g.hist))
	g.hist = nil
	clear(g.live)
	clear(g.blockLast)
	g.byLen = [lengthBuckets][]int64{}
	if g.stack != nil {
		g.stack = newLRUStack(g.stackBound())
		clear(g.blockCtx)
	}
}

// blocks returns the prefix blocks of a request at t (seconds) with in
// input tokens.
func (g *prefixGen) blocks(t float64, in int64) []int64 {
	nb := min(int((in+int64(g.m.BlockSize)-1)/int64(g.m.BlockSize)), maxPrefixBlocks)
	out := make([]int64, 0, nb)
	if t >= g.shiftAt && !g.shifted {
		g.reset()
		g.shifted = true
	}
	g.forget(t)
	cold := g.cold != nil && g.cold(t)
	var parent *histEntry
	if !cold && len(g.hist) > 0 && g.rng.Float64() < g.reuseShare(in) {
		var d, j int
		if g.stack != nil {
			// A reuse whose distance the history cannot hold yet is drawn
			// again, depth and all: early on the deep reuses of long
			// conversations cannot happen yet while a system prompt's can.
			// The depth laws are weighted for it (see fit).
			var w want
			held := float64(g.stack.live - 1)
			for try := 0; ; try++ {
				d = g.depth(in, nb)
				distLaw, excessLaw := g.distanceLaws(d)
				u := g.rng.Float64()
				if try == maxRedraws {
					u *= g.cdfOf(distLaw).at(held)
				}
				w = want{dist: distLaw.Quantile(u)}
				if excessLaw != nil {
					w.length = float64(d) / math.Max(1-excessLaw.Quantile(g.rng.Float64()), 1e-3)
				}
				if w.dist <= held || try == maxRedraws {
					break
				}
			}
			var depth int
			if j, depth = g.blockParent(d, w, nb); j >= 0 {
				d = depth
			} else {
				j = g.nearestParent(d, w.dist, w.length)
			}
		} else {
			depthLaw, ageLaw, _ := g.laws(in)
			target := t - ageLaw.Quantile(g.rng.Float64())
			d = min(max(int(math.Round(depthLaw.Quantile(g.rng.Float64())*float64(nb))), 1), nb)
			// The context last used at or before target.
			i, _ := slices.BinarySearchFunc(g.hist, target, func(e histEntry, x float64) int { return cmp.Compare(e.key, x) })
			if i == len(g.hist) || g.hist[i].key > target {
				i--
			}
			j = g.parent(max(i, 0), d, target)
		}
		if j >= 0 {
			parent = &histEntry{id: g.hist[j].id, blocks: g.hist[j].blocks}
			out = append(out, parent.blocks[:min(d, len(parent.blocks))]...)
		}
	}
	for len(out) < nb {
		out = append(out, g.freshID())
	}
	g.record(t, out)
	if parent != nil && g.stack == nil {
		g.touch(parent.id, g.now(t), parent.blocks)
	}
	g.nextID++
	g.touch(g.nextID, g.now(t), out)
	return out
}

// touch records that context id was used with key k.
func (g *prefixGen) touch(id int64, k float64, blocks []int64) {
	pos := g.offset + int64(len(g.hist))
	g.hist = append(g.hist, histEntry{key: k, id: id, blocks: blocks})
	if g.stack == nil {
		g.live[id] = pos
	} else if len(blocks) > 0 {
		b := lengthBucket(len(blocks))
		g.byLen[b] = append(g.byLen[b], pos)
		for _, id := range blocks {
			g.blockCtx[id] = pos
		}
	}
}

// Distance mode's block search: stampScan is how many block uses either
// side of the drawn distance blockParent weighs, depthSlack how far (as a
// share of the drawn depth, whole blocks only) the reuse may be moved to
// take a better one.
const (
	stampScan  = 1024
	depthSlack = 0.1
)

// want is the reuse the laws drew: the stack distance of its deepest block
// and the parent's length (0: no preference).
type want struct{ dist, length float64 }

// blockParent looks for the reuse among the blocks last used around stack
// distance w.dist: a block at prefix position p within depthSlack of d,
// whose latest context is live, weighed by |log((distance+1)/(w.dist+1))| +
// |log(p/d)| + |log(length/w.length)| (the last only when wanted). It
// returns the context's history index and the depth p, or −1. The stack
// holds each block's own last use, so a block re-used through another
// context since its own context's entry is judged by when it was really
// used: searched by entries, the reuses came out 20% nearer than drawn on
// the bundled Mooncake sample.
func (g *prefixGen) blockParent(d int, w want, nb int) (int, int) {
	st0 := g.stack.stampAt(int(math.Round(w.dist)))
	if st0 < 0 {
		return -1, 0
	}
	slack := int(float64(d) * depthSlack)
	lo, hi := d-slack, min(d+slack, nb)
	if d < nb {
		hi = min(hi, nb-1) // moved, a reuse is no whole repeat, whose share the depth law holds
	}
	d0 := g.stack.distanceOfStamp(st0)
	best, bestDepth, bestCost := -1, 0, math.Inf(1)
	for _, dir := range [2]int{-1, 1} {
		st, dd := st0, d0
		if dir > 0 {
			st++
		}
		for n := 0; st >= 0 && int(st) < len(g.stack.ids) && n < stampScan; st += int32(dir) {
			id := g.stack.ids[st]
			if id < 0 {
				continue
			}
			if n++; st != st0 {
				dd -= dir
			}
			p := int(g.stack.tags[st])
			if p < lo || p > hi {
				continue
			}
			pos, ok := g.blockCtx[id]
			j := int(pos - g.offset)
			if !ok || j < 0 || j >= len(g.hist) || len(g.hist[j].blocks) < p {
				continue
			}
			cost := math.Abs(math.Log(float64(dd+1)/(w.dist+1))) + math.Abs(math.Log(float64(p)/float64(d)))
			if w.length > 0 {
				cost += math.Abs(math.Log(float64(len(g.hist[j].blocks)) / w.length))
			}
			if cost < bestCost {
				best, bestDepth, bestCost = j, p, cost
			}
		}
	}
	return best, bestDepth
}

// isLive reports whether hist[j] is its context's latest entry: in
// distance mode every entry is (a reuse does not re-append its parent).
func (g *prefixGen) isLive(j int) bool {
	return g.stack != nil || g.live[g.hist[j].id] == g.offset+int64(j)
}

// lengthBuckets and lengthRatio lay context lengths on buckets 5% apart,
// from 1 block to maxPrefixBlocks.
const (
	lengthRatio   = 1.05
	lengthBuckets = 230 // ⌈log(maxPrefixBlocks)/log(lengthRatio)⌉ + 2
)

// lengthBucket returns the bucket of a context of n ≥ 1 blocks.
func lengthBucket(n int) int {
	return min(lengthBuckets-1, int(math.Log(float64(n))/math.Log(lengthRatio)))
}

// Distance mode's search: lengthSpan is how far from the wanted length
// (as a factor) nearestParent looks, bucketScan how many live contexts per
// bucket and side of the target it weighs.
const (
	lengthSpan = 1.5
	bucketScan = 3
)

// nearestParent returns the history index of the live context with at
// least d blocks that best matches a reuse at stack distance dist of a
// parent wantLen blocks long (0: any length): the one with the smallest
// |log((distance+1)/(dist+1))| + |log(length/wantLen)|, the distance being
// that of its d-th block now. A real reuse repeats a parent of a
// particular length as well as at a particular distance (a document asked
// again is as long as before; a system prompt heads prompts of any length),
// and a parent much longer than the reuse leaves its deep blocks to come
// back later than its shallow ones. It looks, in each length bucket within
// lengthSpan of wantLen (every bucket of d blocks or more when wantLen is
// 0), at the bucketScan live contexts either side of the target. When no
// live context has d blocks it returns the longest, and the reuse is cut
// short; −1 when the history is empty.
func (g *prefixGen) nearestParent(d int, dist, wantLen float64) int {
	target := g.keyAt(dist)
	lo, hi := lengthBucket(d), lengthBuckets-1
	if wantLen > 0 {
		lo = max(lo, lengthBucket(max(1, int(wantLen/lengthSpan))))
		hi = min(hi, lengthBucket(int(math.Ceil(wantLen*lengthSpan))))
	}
	best, bestCost := -1, math.Inf(1)
	for pass := 0; pass < 2 && best < 0; pass++ {
		if pass == 1 { // nothing near the wanted length: any long enough
			lo, hi = lengthBucket(d), lengthBuckets-1
		}
		for b := lo; b <= hi; b++ {
			list := g.byLen[b]
			// Positions before the history's head are forgotten: drop them.
			head, _ := slices.BinarySearch(list, g.offset)
			list = list[head:]
			g.byLen[b] = list
			if len(list) == 0 {
				continue
			}
			at, _ := slices.BinarySearchFunc(list, target, func(pos int64, x float64) int { return cmp.Compare(g.hist[pos-g.offset].key, x) })
			for _, dir := range [2]int{-1, 1} {
				i := at
				if dir < 0 {
					i--
				}
				for k := 0; i >= 0 && i < len(list) && k < bucketScan; i += dir {
					j := int(list[i] - g.offset)
					e := &g.hist[j]
					if !g.isLive(j) || len(e.blocks) < d {
						continue
					}
					k++
					st, ok := g.stack.last[e.blocks[d-1]]
					if !ok {
						continue
					}
					cost := math.Abs(math.Log(float64(g.stack.distanceOfStamp(st)+1) / (dist + 1)))
					if wantLen > 0 {
						cost += math.Abs(math.Log(float64(len(e.blocks)) / wantLen))
					}
					if cost < bestCost {
						best, bestCost = j, cost
					}
				}
			}
		}
	}
	if best < 0 {
		// No context is d blocks long: the longest, and the reuse is cut
		// short.
		for b := lengthBucket(d); b >= 0 && best < 0; b-- {
			for _, pos := range g.byLen[b] {
				if j := int(pos - g.offset); j >= 0 && g.isLive(j) && (best < 0 || len(g.hist[j].blocks) > len(g.hist[best].blocks)) {
					best = j
				}
			}
		}
	}
	return best
}

// parentScan bounds how far parent looks around the chosen age.
const parentScan = 256

// parent returns, in age mode, the history index of a live context for a
// reuse of d blocks drawn to be as old as target (seconds). Among the
// parentScan live contexts at or before index i it takes, of those with at
// least d blocks, the one whose d-th block was last used nearest to target:
// ages are judged per block, as the fit measures them, because a shared
// prefix was used more recently than any one context's entry says. When
// none in reach is long enough it takes the longest and the reuse is cut
// short. Only when no live context is that old does it look at newer ones,
// the nearest first: a newer parent would make the reuse younger than drawn
// (docs/measurements.md).
func (g *prefixGen) parent(i, d int, target float64) int {
	longest, deep := -1, -1
	deepMiss := math.Inf(1)
	for j, k := i, 0; k < parentScan && j >= 0; j-- {
		if !g.isLive(j) {
			continue
		}
		k++
		e := &g.hist[j]
		if len(e.blocks) >= d {
			if miss := math.Abs(g.blockLast[e.blocks[d-1]] - target); miss < deepMiss {
				deep, deepMiss = j, miss
			}
			continue
		}
		if longest < 0 || len(e.blocks) > len(g.hist[longest].blocks) {
			longest = j
		}
	}
	if deep >= 0 {
		return deep
	}
	if longest >= 0 {
		return longest
	}
	for j := i + 1; j < len(g.hist); j++ {
		if g.isLive(j) {
			return j
		}
	}
	return -1
}

// keyAt returns the history key of the use at stack distance dist.
func (g *prefixGen) keyAt(dist float64) float64 {
	return g.stack.times[g.stack.stampAt(int(math.Round(dist)))]
}
