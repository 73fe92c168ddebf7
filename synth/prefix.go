package synth

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/optimize"
)

// PrefixModel describes prefix reuse: how often a request reuses a prefix
// seen before, how deep, and how long after that prefix was last used. The
// generator copies prefixes from its own recent past by those laws (a
// Simon-style preferential copying with time locality), so popularity and
// recency come out together; the Zipf exponent of group popularity is
// reported to check that.
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
	// AgeS is the time since the deepest shared block was last used, in
	// seconds, for reusing requests.
	AgeS Marginal `json:"reuse_age_s"`
	// ByInputBin holds Depth and AgeS per log-spaced input-length bin, for
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

// ReuseBin is the reuse depth and age laws of reusing requests with inputs
// below InputHigh tokens (and above the previous bin's edge).
type ReuseBin struct {
	InputHigh float64  `json:"input_high"`
	Depth     Marginal `json:"depth_share"`
	AgeS      Marginal `json:"reuse_age_s"`
}

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
	cur, old      map[int64]float64 // block id -> last use (s)
	forgot        bool
	groups        map[int64]*groupStat
	requests      int64
	reused        int64
	depth, age    *reservoir[float64]
	binN, binHits [16]int64
	binDepth      [16]*reservoir[float64]
	binAge        [16]*reservoir[float64]
	first, last   float64
}

type groupStat struct {
	first, last float64
	n           int64
}

func newPrefixFitter(blockSize int) *prefixFitter {
	return &prefixFitter{blockSize: blockSize, cur: map[int64]float64{}, old: map[int64]float64{}, groups: map[int64]*groupStat{}, first: math.NaN(),
		depth: newReservoir[float64](maxPairs, 7), age: newReservoir[float64](maxPairs, 8)}
}

// binHigh is the upper edge in tokens of input bin b.
func binHigh(b int) float64 { return math.Pow(2, 1.5*float64(b+1)) }

// inputBin returns the log-spaced bin (1.5 octaves wide) of an input length.
func inputBin(in int64) int { return min(15, max(0, int(math.Log2(float64(max(in, 1)))/1.5))) }

func (f *prefixFitter) lastUse(id int64) (float64, bool) {
	if t, ok := f.cur[id]; ok {
		return t, true
	}
	t, ok := f.old[id]
	return t, ok
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
		if _, ok := f.lastUse(blocks[d]); !ok {
			break
		}
		d++
	}
	b := inputBin(in)
	f.binN[b]++
	if d > 0 {
		f.reused++
		f.binHits[b]++
		last, _ := f.lastUse(blocks[d-1])
		depth, age := float64(d)/float64(len(blocks)), max(t-last, 0)
		f.depth.add(depth)
		f.age.add(age)
		if f.binDepth[b] == nil {
			f.binDepth[b] = newReservoir[float64](binPairs, 16+uint64(b))
			f.binAge[b] = newReservoir[float64](binPairs, 32+uint64(b))
		}
		f.binDepth[b].add(depth)
		f.binAge[b].add(age)
	}
	g := f.groups[blocks[0]]
	if g == nil {
		g = &groupStat{first: t}
		f.groups[blocks[0]] = g
	}
	g.last, g.n = t, g.n+1
	for _, id := range blocks {
		f.cur[id] = t
	}
	if len(f.cur) > maxTrackedBlocks {
		f.old, f.cur = f.cur, map[int64]float64{}
		f.forgot = true
	}
}

func (f *prefixFitter) fit(ctx context.Context) (*PrefixModel, error) {
	if f.requests == 0 {
		return nil, nil
	}
	m := &PrefixModel{BlockSize: f.blockSize, Requests: f.requests, ReuseShare: float64(f.reused) / float64(f.requests),
		Depth: floatMarginal(f.depth, 129), AgeS: floatMarginal(f.age, 257), Groups: int64(len(f.groups))}
	for b := range f.binN {
		if f.binN[b] > 0 {
			m.ReuseByInputBin = append(m.ReuseByInputBin, ShareBin{InputHigh: binHigh(b), Share: float64(f.binHits[b]) / float64(f.binN[b]), N: f.binN[b]})
		}
		if f.binHits[b] >= minBinRequests {
			m.ByInputBin = append(m.ByInputBin, ReuseBin{InputHigh: binHigh(b), Depth: floatMarginal(f.binDepth[b], 33), AgeS: floatMarginal(f.binAge[b], 65)})
		}
	}
	if span := f.last - f.first; span > 0 {
		m.NewGroupsPerS = float64(len(f.groups)) / span
	}
	life := newReservoir[float64](maxPairs, 9)
	sizes := make([]float64, 0, len(f.groups))
	for _, g := range f.groups {
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

// maxPrefixBlocks bounds the prefix blocks of one generated request: with
// small blocks a 10-million-token prompt would carry 80 MB of ids.
const maxPrefixBlocks = 1 << 16

// prefixGen assigns prefix blocks to generated requests by copying from its
// own recent history with the fitted laws.
type prefixGen struct {
	m       *PrefixModel
	rng     *rand.Rand
	salt    uint64
	counter uint64
	hist    []histEntry // prefix contexts in order of last use
	offset  int64       // absolute position of hist[0]
	live    map[int64]int64
	// blockLast is when each block in the history was last used.
	blockLast map[int64]float64
	nextID    int64
	maxAge    float64
	// cold, when true, disables reuse; shiftAt drops the history older than
	// that time once (hot-prefix-shift).
	cold    func(t float64) bool
	shiftAt float64
	shifted bool
}

// histEntry is one prefix context in the generator's history, at the time
// it was last used. A context used again is appended anew and its older
// entry goes stale, so the history stays ordered by last use, as the fit's
// ages are measured.
type histEntry struct {
	t      float64
	id     int64
	blocks []int64
}

func newPrefixGen(m *PrefixModel, seed uint64) *prefixGen {
	g := &prefixGen{m: m, rng: rand.New(rand.NewPCG(seed, 0xb10c)), salt: seed*0x9e3779b97f4a7c15 + 1, shiftAt: math.Inf(1), live: map[int64]int64{}, blockLast: map[int64]float64{}}
	if k := m.AgeS.Knots; len(k) > 0 {
		g.maxAge = k[len(k)-1]
	}
	return g
}

// freshID returns a new block id no earlier request used.
func (g *prefixGen) freshID() int64 {
	g.counter++
	x := g.counter + g.salt
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return int64(x & (1<<62 - 1))
}

func (g *prefixGen) reuseShare(in int64) float64 {
	hi := float64(in)
	for _, b := range g.m.ReuseByInputBin {
		if hi < b.InputHigh {
			if b.N >= minBinRequests {
				return b.Share
			}
			break
		}
	}
	return g.m.ReuseShare
}

// laws returns the reuse depth and age laws for a request with in input
// tokens: its bin's where the fit had enough of them, else the pooled ones.
func (g *prefixGen) laws(in int64) (depth, age *Marginal) {
	edge := binHigh(inputBin(in))
	for i := range g.m.ByInputBin {
		if b := &g.m.ByInputBin[i]; b.InputHigh == edge {
			return &b.Depth, &b.AgeS
		}
	}
	return &g.m.Depth, &g.m.AgeS
}

// blocks returns the prefix blocks of a request at t (seconds) with in
// input tokens.
func (g *prefixGen) blocks(t float64, in int64) []int64 {
	nb := min(int((in+int64(g.m.BlockSize)-1)/int64(g.m.BlockSize)), maxPrefixBlocks)
	out := make([]int64, 0, nb)
	if t >= g.shiftAt && !g.shifted {
		g.offset += int64(len(g.hist))
		g.hist, g.shifted = nil, true
		clear(g.live)
		clear(g.blockLast)
	}
	// Forget contexts not used within the oldest age ever reused.
	cut := 0
	for cut < len(g.hist) && t-g.hist[cut].t > g.maxAge {
		if e := g.hist[cut]; g.live[e.id] == g.offset+int64(cut) {
			delete(g.live, e.id)
			for _, id := range e.blocks {
				if g.blockLast[id] <= e.t {
					delete(g.blockLast, id)
				}
			}
		}
		cut++
	}
	// Re-slicing, not copying: a long history would make every request pay
	// for moving it; append reclaims the dropped head when it reallocates.
	g.hist = g.hist[cut:]
	g.offset += int64(cut)
	cold := g.cold != nil && g.cold(t)
	if !cold && len(g.live) > 0 && g.rng.Float64() < g.reuseShare(in) {
		depthLaw, ageLaw := g.laws(in)
		age := ageLaw.Quantile(g.rng.Float64())
		// The context last used at or before t − age.
		i, _ := slices.BinarySearchFunc(g.hist, t-age, func(e histEntry, x float64) int { return cmp.Compare(e.t, x) })
		if i == len(g.hist) || g.hist[i].t > t-age {
			i--
		}
		i = max(i, 0)
		d := int(math.Round(depthLaw.Quantile(g.rng.Float64()) * float64(nb)))
		d = min(max(d, 1), nb)
		if j := g.parent(i, d, t-age); j >= 0 {
			parent := g.hist[j]
			d = min(d, len(parent.blocks))
			out = append(out, parent.blocks[:d]...)
			g.touch(parent.id, t, parent.blocks)
		}
	}
	for len(out) < nb {
		out = append(out, g.freshID())
	}
	for _, id := range out {
		g.blockLast[id] = t
	}
	g.nextID++
	g.touch(g.nextID, t, out)
	return out
}

// touch records that context id was used at t.
func (g *prefixGen) touch(id int64, t float64, blocks []int64) {
	g.live[id] = g.offset + int64(len(g.hist))
	g.hist = append(g.hist, histEntry{t: t, id: id, blocks: blocks})
}

func (g *prefixGen) isLive(j int) bool { return g.live[g.hist[j].id] == g.offset+int64(j) }

// parentScan bounds how far parent looks around the chosen age.
const parentScan = 256

// parent returns the history index of a live context for a reuse of d
// blocks drawn to be as old as target (seconds). Among the parentScan live
// contexts at or before index i it takes, of those with at least d blocks,
// the one whose d-th block was last used nearest to target: ages are judged
// per block, as the fit measures them, because a shared prefix was used
// more recently than any one context's entry says. When none in reach is
// long enough it takes the longest and the reuse is cut short. Only when no
// live context is that old does it look at newer ones, the nearest first:
// a newer parent would make the reuse younger than drawn
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
