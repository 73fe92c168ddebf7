package synth

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/optimize"
)

// PrefixModel describes prefix reuse: how often a request reuses a prefix
// seen before, how deep, and how far back in the cache's terms: the LRU
// stack distance of the reused prefix, jointly with its depth. The
// generator copies prefixes from its own past by those laws, so popularity
// and recency come out together and an LRU cache of any size hits as often
// as on the trace; the Zipf exponent of group popularity is reported to
// check that.
type PrefixModel struct {
	// BlockSize is the tokens per prefix block.
	BlockSize int `json:"block_size"`
	// Requests is the number of requests with prefix blocks seen by the fit.
	Requests int64 `json:"requests"`
	// ReuseShare is the share of requests whose first block was seen before.
	ReuseShare float64 `json:"reuse_share"`
	// ReuseByInputBin is ReuseShare per log-spaced input-length bin (upper
	// edges in tokens): long prompts are reused more often.
	ReuseByInputBin []ShareBin `json:"reuse_by_input_bin,omitempty"`
	// Depth is the reused share of a reusing request's blocks (0, 1].
	Depth Marginal `json:"depth_share"`
	// DepthBlocks is the number of blocks a reusing request reuses. Only its
	// atoms are drawn: a shared system prompt is a fixed number of blocks
	// whatever the prompt's length, which a share of a length that varies
	// threefold within a bin spreads over two and three blocks.
	DepthBlocks *Marginal `json:"depth_blocks,omitempty"`
	// AgeS is the time since the deepest shared block was last used, in
	// seconds, for reusing requests.
	AgeS Marginal `json:"reuse_age_s"`
	// ByInputBin holds Depth, DepthBlocks and AgeS per log-spaced
	// input-length bin, for
	// bins with at least minBinRequests reusing requests (the pooled laws
	// serve the rest): how deep and how recent a reuse is depends on the
	// prompt's length. A long conversation turn reuses all but its last
	// block or two while a short prompt may share only a system prompt;
	// pooled, every length got the same depth share and short prompts were
	// repeated whole three times too often (Mooncake: 15% of requests
	// against the trace's 5.3%).
	ByInputBin []ReuseBin `json:"laws_by_input_bin,omitempty"`
	// NewGroupsPerS is the rate at which never-seen first blocks appear.
	NewGroupsPerS float64 `json:"new_groups_per_s"`
	// Groups is the number of distinct first blocks (prefix groups).
	Groups int64 `json:"groups"`
	// GroupLifetimeS is the time from a group's first to its last request,
	// for groups used more than once.
	GroupLifetimeS Marginal `json:"group_lifetime_s"`
	// ZipfAlpha is the maximum-likelihood exponent of a discrete power law
	// fitted to group sizes (requests per group), with its 95% interval;
	// ZipfS = 1/(alpha−1) is the equivalent rank-frequency (Zipf) exponent.
	ZipfAlpha     float64    `json:"zipf_alpha"`
	ZipfAlphaCI95 [2]float64 `json:"zipf_alpha_ci95"`
	ZipfS         float64    `json:"zipf_s"`
	// Distance is the LRU stack distance, in blocks, of a reusing request's
	// deepest shared block just before the request: the distinct blocks
	// used since that block's last use. An LRU cache of C blocks still holds
	// the reused prefix when the distance is below C, so this, not the age
	// in seconds, is what a cache sees. Nil in models fitted before it; the
	// generator then copies by age.
	Distance *Marginal `json:"reuse_distance_blocks,omitempty"`
	// DistanceByDepth is Distance per class of reused blocks (1, 2, …, 8,
	// 9–16, 17–32, …), for classes with at least minBinRequests reuses; the nearest
	// fitted class serves the others. A one-block system prompt comes back
	// within a few requests while a conversation's history comes back after
	// the user's think time: drawn apart from the depth, deep reuses took the
	// shallow ones' recency and small caches hit 4–5× too often.
	DistanceByDepth []DepthDistance `json:"distance_by_depth,omitempty"`
	// DepthByPrompt is the reuse depth law per class of the prompt's
	// length in blocks (DepthLaw), for classes with at least
	// minBinRequests reuses; the nearest fitted class serves the others.
	// The generator draws depths from it by distance; models fitted before
	// it draw by ByInputBin.
	DepthByPrompt []DepthLaw `json:"depth_by_prompt_blocks,omitempty"`
	// ReuseByFill is the reuse share by how full the cache was: the number
	// of distinct blocks used before the request, in quarter-octave bins
	// (FillHigh). Early in a trace, little can be reused yet: a long reuse
	// needs as many blocks used before it, and a corpus of documents is
	// only partly seen. The generator scales the input bin's share by the
	// share at its own fill over ReuseShare (capped at 1), so a workload
	// has the trace's cold start as well as its steady state. Absent in
	// models fitted before it.
	ReuseByFill []FillBin `json:"reuse_by_fill,omitempty"`
	// WindowNote says when the fit's bounded memory of blocks forgot some
	// (reuse older than the memory counts as new).
	WindowNote string `json:"window_note,omitempty"`
}

// ShareBin is a share for inputs up to InputHigh tokens.
type ShareBin struct {
	InputHigh float64 `json:"input_high"`
	Share     float64 `json:"share"`
	N         int64   `json:"n"`
}

// FillBin is the reuse share of requests that came when at most FillHigh
// distinct blocks had been used before (and more than the previous bin's
// FillHigh): quarter-octave bins, merged until each holds minFillRequests.
type FillBin struct {
	FillHigh int64   `json:"fill_high"`
	Share    float64 `json:"share"`
	N        int64   `json:"n"`
}

// fillBin returns the bin of a fill of n distinct blocks: a quarter of an
// octave wide, since a short trace's share can climb within one octave.
func fillBin(n int) int { return min(fillBins-1, int(4*math.Log2(float64(n)+1))) }

// fillHigh is the largest fill of bin k.
func fillHigh(k int) int64 { return int64(math.Ceil(math.Exp2(float64(k+1)/4))) - 2 }

// fillBins bounds the fill bins (2^24 blocks and more share the last).
const fillBins = 97

// reuseObs is one reusing request as the fit keeps it: the reused share and
// count of its blocks, the age and the largest stack distance possible
// when it came, and the depth class of its reuse.
type reuseObs struct {
	share, blocks, age, limit float64
	class                     int
	prompt                    float64 // the request's blocks
}

// minFeasible bounds the Horvitz–Thompson weight of a reuse at 1/minFeasible:
// a reuse that was very unlikely to be possible is one observation, not a
// hundred.
const minFeasible = 0.1

// reuseMarginals are the depth and age laws of a sample of reuses.
type reuseMarginals struct {
	share, shareSmall Marginal
	blocks            *Marginal
	age, ageSmall     Marginal
}

// reuseLaws fits the depth laws of reuses, each weighted by weight(o), and
// the (unweighted) age law.
func reuseLaws(r *reservoir[reuseObs], weight func(reuseObs) float64) reuseMarginals {
	n := len(r.items)
	if n == 0 {
		return reuseMarginals{}
	}
	share, blocks, ages, ws := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i, o := range r.items {
		share[i], blocks[i], ages[i], ws[i] = o.share, o.blocks, o.age, weight(o)
	}
	seen := int64(r.seen)
	b := weightedMarginal(blocks, ws, 33, seen)
	return reuseMarginals{share: weightedMarginal(share, ws, 129, seen), shareSmall: weightedMarginal(share, ws, 33, seen), blocks: &b,
		age: marginalOf(ages, 257, seen), ageSmall: marginalOf(ages, 65, seen)}
}

// weightedMarginal builds a Marginal of up to k knots from values with
// weights (scaled to integer counts for marginalFromCounts); N is n.
func weightedMarginal(vals, weights []float64, k int, n int64) Marginal {
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(vals[a], vals[b]) })
	var vs []float64
	var cs []int64
	for _, i := range idx {
		c := int64(math.Round(weights[i] * weightScale))
		if l := len(vs); l > 0 && vs[l-1] == vals[i] {
			cs[l-1] += c
			continue
		}
		vs = append(vs, vals[i])
		cs = append(cs, c)
	}
	m := marginalFromCounts(vs, cs, k)
	m.N = n
	return m
}

// weightScale turns weights into counts: a weight's thousandths survive.
const weightScale = 1e3

// ReuseBin is the reuse depth and age laws of reusing requests with inputs
// below InputHigh tokens (and above the previous bin's edge).
type ReuseBin struct {
	InputHigh   float64   `json:"input_high"`
	Depth       Marginal  `json:"depth_share"`
	DepthBlocks *Marginal `json:"depth_blocks,omitempty"`
	AgeS        Marginal  `json:"reuse_age_s"`
}

// headBlocks is the largest reuse depth of input bin b drawn as an absolute
// count (a shared head such as a system prompt): half the bin's shortest
// prompt.
func headBlocks(b, blockSize int) float64 {
	return float64(int64(binLow(b))/int64(blockSize)) / 2
}

// DepthDistance is the stack-distance law of reuses of Low ≤ d < High
// blocks.
type DepthDistance struct {
	Low      int      `json:"blocks_low"`
	High     int      `json:"blocks_high"`
	Distance Marginal `json:"distance_blocks"`
	// Excess is the share of the parent's blocks beyond the reuse, (L − d)/L,
	// where L is the length in blocks of the request that last used the
	// deepest shared block: near 0 when a turn extends its whole history or
	// a prompt repeats a document, near 1 when a system prompt heads a long
	// one. A parent much longer than the reuse leaves its deep blocks
	// untouched, and they come back later than the shallow ones.
	Excess *Marginal `json:"parent_excess_share,omitempty"`
}

// depthClass returns the class of a reuse of d ≥ 1 blocks: one class per
// count up to 8 blocks, then octaves (9–16, 17–32, ...). A system prompt is
// a few blocks whose reuse comes back within a few requests, while a
// two-block conversation history comes back after the user's think time:
// pooled as 2–3 blocks, a chat fixture's two-block reuses (median 44
// blocks back, mostly system prompts) were generated at the pool's median,
// 774; apart, at 49.
func depthClass(d int) int {
	if d <= 8 {
		return max(d, 1) - 1
	}
	return min(depthClasses-1, 7+bits.Len(uint((d-1)/8)))
}

// depthClassBounds returns the reuse depths of class c: low ≤ d < high.
func depthClassBounds(c int) (low, high int) {
	if c < 8 {
		return c + 1, c + 2
	}
	return 8<<(c-8) + 1, 8<<(c-7) + 1
}

// depthClasses bounds the depth classes (maxPrefixBlocks caps a request's
// blocks at 2^16, in the last).
const depthClasses = 21

// minBinRequests is the fewest requests a per-bin law or share is taken
// from; a bin with fewer uses the pooled one.
const minBinRequests = 30

// binPairs bounds the samples kept per input bin for its laws.
const binPairs = 20_000

// maxTrackedBlocks bounds the block ids the prefix fit remembers; older ones
// are forgotten two generations at a time.
const maxTrackedBlocks = 4 << 20

// prefixFitter accumulates prefix statistics over requests in time order.
type prefixFitter struct {
	blockSize     int
	stack         *lruStack
	groups        map[int64]*groupStat
	requests      int64
	reused        int64
	binN, binHits [16]int64
	byFill        fillCounts
	// reuses holds the reusing requests, pooled and per input bin.
	reuses    *reservoir[reuseObs]
	binReuses [16]*reservoir[reuseObs]
	// promptReuses are the reuses per class of the prompt's blocks.
	promptReuses  [depthClasses]*reservoir[reuseObs]
	dist          *reservoir[truncatedSample]
	distByDepth   [depthClasses]*reservoir[truncatedSample]
	excessByDepth [depthClasses]*reservoir[float64]
	first, last   float64
	// forgot is set when the block memory forgot blocks (the stack's
	// flag, kept when the slice ends and the stack is dropped).
	forgot bool
}

type groupStat struct {
	first, last float64
	n           int64
}

func newPrefixFitter(blockSize int) *prefixFitter {
	return &prefixFitter{blockSize: blockSize, stack: newLRUStack(maxTrackedBlocks), groups: map[int64]*groupStat{}, first: math.NaN(),
		reuses: newReservoir[reuseObs](maxPairs, 7), dist: newReservoir[truncatedSample](maxPairs, 12)}
}

// binHigh is the upper edge in tokens of input bin b.
func binHigh(b int) float64 { return math.Pow(2, 1.5*float64(b+1)) }

// binLow is the lower edge in tokens of input bin b.
func binLow(b int) float64 {
	if b == 0 {
		return 0
	}
	return binHigh(b - 1)
}

// inputBin returns the log-spaced bin (1.5 octaves wide) of an input length.
func inputBin(in int64) int { return min(15, max(0, int(math.Log2(float64(max(in, 1)))/1.5))) }

// touch records the blocks of a request whose reuse the laws do not model
// (a session's later turn): they still fill the cache in between.
func (f *prefixFitter) touch(t float64, blocks []int64) {
	for _, id := range blocks {
		f.stack.useTagged(id, t, int32(min(len(blocks), math.MaxInt32)))
	}
}

func (f *prefixFitter) add(t float64, in int64, blocks []int64) {
	if len(blocks) == 0 {
		return
	}
	if math.IsNaN(f.first) {
		f.first = t
	}
	f.last = t
	f.requests++
	d := 0
	for d < len(blocks) {
		if _, _, ok := f.stack.distance(blocks[d]); !ok {
			break
		}
		d++
	}
	b, fb := inputBin(in), fillBin(f.stack.live)
	f.binN[b]++
	f.byFill.add(fb, d > 0)
	if d > 0 {
		f.reused++
		f.binHits[b]++
		dist, last, _ := f.stack.distance(blocks[d-1])
		// A distance is at most the blocks used before, less one.
		obs := truncatedSample{x: float64(dist), limit: float64(f.stack.live - 1)}
		c := depthClass(d)
		r := reuseObs{share: float64(d) / float64(len(blocks)), blocks: float64(d), age: max(t-last, 0), limit: obs.limit, class: c, prompt: float64(len(blocks))}
		pc := depthClass(len(blocks))
		if f.promptReuses[pc] == nil {
			f.promptReuses[pc] = newReservoir[reuseObs](binPairs, 112+uint64(pc))
		}
		f.promptReuses[pc].add(r)
		f.reuses.add(r)
		f.dist.add(obs)
		if f.distByDepth[c] == nil {
			f.distByDepth[c] = newReservoir[truncatedSample](binPairs, 48+uint64(c))
			f.excessByDepth[c] = newReservoir[float64](binPairs, 80+uint64(c))
		}
		f.distByDepth[c].add(obs)
		if l := int(f.stack.tag(blocks[d-1])); l >= d {
			f.excessByDepth[c].add(float64(l-d) / float64(l))
		}
		if f.binReuses[b] == nil {
			f.binReuses[b] = newReservoir[reuseObs](binPairs, 16+uint64(b))
		}
		f.binReuses[b].add(r)
	}
	g := f.groups[blocks[0]]
	if g == nil {
		g = &groupStat{first: t}
		f.groups[blocks[0]] = g
	}
	g.last, g.n = t, g.n+1
	f.touch(t, blocks)
}

// endSlice drops the block memory at the end of the rows, keeping whether
// it forgot any: what is fitted needs only the statistics.
func (f *prefixFitter) endSlice() {
	if f.stack != nil {
		f.forgot = f.forgot || f.stack.forgot
		f.stack = nil
	}
}

// merge adds the statistics of o, fitted over the slice after f's, to f's
// (both ended: endSlice). Groups (first blocks) join by id, so their
// counts, sizes and lifetimes are exact; every reuse is as each slice saw
// it: a request whose reused blocks were last used before its own slice
// began reuses less, or nothing, and its distance and fill count only its
// slice's blocks.
func (f *prefixFitter) merge(o *prefixFitter, rng *rand.Rand) {
	switch {
	case o.requests == 0:
	case f.requests == 0: // f's first and last are NaN
		f.first, f.last = o.first, o.last
	default:
		f.first, f.last = min(f.first, o.first), max(f.last, o.last)
	}
	f.requests += o.requests
	f.reused += o.reused
	for b := range f.binN {
		f.binN[b] += o.binN[b]
		f.binHits[b] += o.binHits[b]
	}
	for k := range f.byFill.n {
		f.byFill.n[k] += o.byFill.n[k]
		f.byFill.hits[k] += o.byFill.hits[k]
	}
	f.reuses.merge(o.reuses, rng)
	f.dist.merge(o.dist, rng)
	mergeOptional(f.binReuses[:], o.binReuses[:], rng)
	mergeOptional(f.promptReuses[:], o.promptReuses[:], rng)
	mergeOptional(f.distByDepth[:], o.distByDepth[:], rng)
	mergeOptional(f.excessByDepth[:], o.excessByDepth[:], rng)
	for id, g := range o.groups {
		if h := f.groups[id]; h != nil {
			h.first, h.last, h.n = min(h.first, g.first), max(h.last, g.last), h.n+g.n
		} else {
			f.groups[id] = g
		}
	}
	f.forgot = f.forgot || o.forgot
}

// mergeOptional merges reservoirs made on first use (nil until then) pairwise.
func mergeOptional[T any](into, from []*reservoir[T], rng *rand.Rand) {
	for i, o := range from {
		switch {
		case o == nil:
		case into[i] == nil:
			into[i] = o
		default:
			into[i].merge(o, rng)
		}
	}
}

func (f *prefixFitter) fit(ctx context.Context) (*PrefixModel, error) {
	f.endSlice() // the rows are in: forgot holds the stack's flag
	if f.requests == 0 {
		return nil, nil
	}
	m := &PrefixModel{BlockSize: f.blockSize, Requests: f.requests, ReuseShare: float64(f.reused) / float64(f.requests), Groups: int64(len(f.groups))}
	// Stack-distance laws first: the depth laws and shares are weighted by
	// how likely each reuse was to be possible when it happened.
	weight := func(reuseObs) float64 { return 1 }
	if f.reused > 0 {
		d := truncatedMarginal(f.dist, 129)
		m.Distance = &d
		var byClass [depthClasses]*quantileCDF
		for c, r := range f.distByDepth {
			if r == nil || r.seen < minBinRequests {
				continue
			}
			low, high := depthClassBounds(c)
			dd := DepthDistance{Low: low, High: high, Distance: truncatedMarginal(r, 33)}
			if e := f.excessByDepth[c]; e.seen >= minBinRequests {
				x := floatMarginal(e, 33)
				dd.Excess = &x
			}
			m.DistanceByDepth = append(m.DistanceByDepth, dd)
		}
		for i := range m.DistanceByDepth {
			byClass[depthClass(m.DistanceByDepth[i].Low)] = newQuantileCDF(&m.DistanceByDepth[i].Distance)
		}
		pooled := newQuantileCDF(m.Distance)
		weight = func(o reuseObs) float64 {
			law := byClass[o.class]
			if law == nil {
				law = pooled
			}
			return 1 / math.Max(law.at(o.limit), minFeasible)
		}
	}
	if m.Distance != nil {
		for c, r := range f.promptReuses {
			if r != nil && r.seen >= minBinRequests {
				m.DepthByPrompt = append(m.DepthByPrompt, fitDepthLaw(c, r, weight))
			}
		}
	}
	pooled := reuseLaws(f.reuses, weight)
	m.Depth, m.DepthBlocks, m.AgeS = pooled.share, pooled.blocks, pooled.age
	for b := range f.binN {
		if f.binN[b] == 0 {
			continue
		}
		m.ReuseByInputBin = append(m.ReuseByInputBin, ShareBin{InputHigh: binHigh(b), Share: float64(f.binHits[b]) / float64(f.binN[b]), N: f.binN[b]})
		if f.binHits[b] >= minBinRequests {
			l := reuseLaws(f.binReuses[b], weight)
			rb := ReuseBin{InputHigh: binHigh(b), Depth: l.shareSmall, DepthBlocks: l.blocks, AgeS: l.ageSmall}
			m.ByInputBin = append(m.ByInputBin, rb)
		}
	}
	m.ReuseByFill = f.byFill.bins()
	if span := f.last - f.first; span > 0 {
		m.NewGroupsPerS = float64(len(f.groups)) / span
	}
	// Groups in the order of their first block's id: the sample and the
	// sums below must not follow the map's order, or two fits of the same
	// rows (one, or merged shards) would differ in the last digits.
	ids := slices.Sorted(maps.Keys(f.groups))
	life := newReservoir[float64](maxPairs, 9)
	sizes := make([]float64, 0, len(f.groups))
	for _, id := range ids {
		g := f.groups[id]
		sizes = append(sizes, float64(g.n))
		if g.n > 1 {
			life.add(g.last - g.first)
		}
	}
	m.GroupLifetimeS = floatMarginal(life, 65)
	alpha, ci, err := fitPowerLaw(ctx, sizes)
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	if err == nil {
		m.ZipfAlpha, m.ZipfAlphaCI95 = alpha, ci
		m.ZipfS = 1 / (alpha - 1)
	}
	if f.forgot {
		m.WindowNote = fmt.Sprintf("the fit remembers at most %d blocks; reuse of older blocks counted as new", maxTrackedBlocks)
	}
	return m, nil
}

// fitPowerLaw fits P(x) = x^-α / ζ(α) for integer sizes x ≥ 1 by maximum
// likelihood and returns α with its 95% interval from the Fisher
// information n·Var_α[log x] = n·(ζ”/ζ − (ζ'/ζ)²).
func fitPowerLaw(ctx context.Context, sizes []float64) (float64, [2]float64, error) {
	n := float64(len(sizes))
	if n < 10 {
		return 0, [2]float64{}, fmt.Errorf("%d groups; a power-law fit needs at least 10", len(sizes))
	}
	sumLog := 0.0
	for _, x := range sizes {
		sumLog += math.Log(x)
	}
	if sumLog == 0 {
		return 0, [2]float64{}, fmt.Errorf("every group has one request: no popularity to fit")
	}
	nll := func(p []float64) float64 {
		a := 1 + math.Exp(p[0])
		z, _, _ := hurwitzZeta(a, 1)
		return a*sumLog + n*math.Log(z)
	}
	res, err := optimize.Minimize(optimize.Problem{Func: nll}, []float64{0}, &optimize.Settings{Converger: &optimize.FunctionConverge{Absolute: 1e-10, Iterations: 100}, Recorder: ctxRecorder{ctx}}, &optimize.NelderMead{})
	if res == nil || ctx.Err() != nil {
		return 0, [2]float64{}, fmt.Errorf("power-law fit: %w", cmp.Or(ctx.Err(), err))
	}
	a := 1 + math.Exp(res.X[0])
	if !(a > 1) || math.IsInf(a, 0) || math.IsInf(res.F, 0) || math.IsNaN(res.F) {
		return 0, [2]float64{}, fmt.Errorf("power-law fit: no finite exponent (alpha %v)", a)
	}
	z, dz, d2z := hurwitzZeta(a, 1)
	info := n * (d2z/z - (dz/z)*(dz/z))
	if !(info > 0) || math.IsInf(info, 0) {
		return a, [2]float64{a, a}, nil // no curvature to set an interval by
	}
	se := 1 / math.Sqrt(info)
	return a, [2]float64{a - 1.96*se, a + 1.96*se}, nil
}
