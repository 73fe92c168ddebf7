package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
)

// GapChain is a Markov renewal law for inter-arrival gaps in rescaled time:
// each gap falls in one of len(Quantiles) classes (by size), the class
// follows a Markov chain of order Order over the previous classes, and the
// gap is drawn from its class's quantile table. Real request streams mix
// gap regimes a single Gamma or Weibull law cannot: the Azure code trace has
// a quarter of its gaps under 2 ms (requests sent together), a median of
// 64 ms and a tail of seconds, and short gaps follow short gaps. The chain
// keeps the gap distribution and how the regimes follow one another, which
// is where much of the dispersion of counts comes from.
type GapChain struct {
	// Order is how many previous classes the next class depends on.
	Order int `json:"order"`
	// Edges are the class boundaries (rescaled gaps); class k holds gaps in
	// [Edges[k-1], Edges[k]).
	Edges []float64 `json:"edges"`
	// Quantiles[k] are the gaps of class k at equally spaced probabilities
	// from 0 to 1 (rescaled time).
	Quantiles [][]float64 `json:"quantiles"`
	// Transition[s] is the distribution of the next class given state s,
	// the previous Order classes read as a number in base len(Quantiles),
	// the latest class last. Unseen states fall back to the class shares.
	Transition [][]float64 `json:"transition"`
	// Scale makes the chain's mean gap 1 (gaps are multiplied by it).
	Scale float64 `json:"scale"`
}

// gapChainQuantiles is the number of quantile-table knots per class.
const gapChainQuantiles = 33

// gapChainCandidates are the (classes, order) pairs tried; the fit keeps
// the one whose simulated process reproduces the trace's dispersion curve
// and gap quantiles best (class sequences of different alphabets have no
// common likelihood to compare).
var gapChainCandidates = [][2]int{{4, 1}, {6, 1}, {8, 1}, {4, 2}, {6, 2}, {4, 3}, {6, 3}}

// gapClassing is the gaps sorted into the classes between edges: each gap's
// class, each class's share and its gapChainQuantiles quantiles (from a
// reservoir of 50,000 of its gaps).
type gapClassing struct {
	edges     []float64
	classes   []uint8
	quantiles [][]float64
	shares    []float64
}

// classify sorts gaps into the classes between edges.
func classify(gaps, edges []float64, seed uint64) *gapClassing {
	k := len(edges) + 1
	cl := &gapClassing{edges: edges, classes: make([]uint8, len(gaps)), shares: make([]float64, k)}
	if k < 2 {
		return cl
	}
	byClass := make([]*reservoir[float64], k)
	for j := range byClass {
		byClass[j] = newReservoir[float64](50_000, seed+uint64(j))
	}
	classCount := make([]float64, k)
	for i, v := range gaps {
		c, _ := slices.BinarySearch(edges, v)
		if c < k-1 && v >= edges[c] {
			c++
		}
		cl.classes[i] = uint8(c)
		classCount[c]++
		byClass[c].add(v)
	}
	for j, r := range byClass {
		cl.shares[j] = classCount[j] / float64(len(gaps))
		b := r.items
		slices.Sort(b)
		q := make([]float64, gapChainQuantiles)
		for i := range q {
			if len(b) > 0 {
				q[i] = b[min(len(b)-1, i*(len(b)-1)/(gapChainQuantiles-1))]
			}
		}
		cl.quantiles = append(cl.quantiles, q)
	}
	return cl
}

// fitGapChains fits a gap chain to gaps in arrival order (rescaled time,
// mean about 1) by counting transitions, once for each candidate number of
// classes and order. The caller dequantises gaps observed at a coarse
// resolution. Memory beyond gaps is a byte per gap and bounded samples.
func fitGapChains(ctx context.Context, gaps []float64, seed uint64) ([]*GapChain, error) {
	if len(gaps) < 200 {
		return nil, fmt.Errorf("%d gaps; a gap chain needs at least 200", len(gaps))
	}
	// Class edges from an evenly strided sample of at most 200,000 gaps.
	stride := max(1, len(gaps)/200_000)
	var sample []float64
	for i := 0; i < len(gaps); i += stride {
		sample = append(sample, gaps[i])
	}
	slices.Sort(sample)
	// Candidates of one class count share the edges, the classes and the
	// class quantiles (the reservoirs are seeded by class alone); only the
	// transitions depend on the order. Each count is classified once.
	byCount := map[int]*gapClassing{}
	var out []*GapChain
	for _, cand := range gapChainCandidates {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		order := cand[1]
		cl := byCount[cand[0]]
		if cl == nil {
			cl = classify(gaps, logKMeansEdges(sample, cand[0]), seed)
			byCount[cand[0]] = cl
		}
		k := len(cl.edges) + 1
		if k < 2 {
			continue
		}
		c := &GapChain{Order: order, Edges: slices.Clone(cl.edges)}
		for _, q := range cl.quantiles {
			c.Quantiles = append(c.Quantiles, slices.Clone(q))
		}
		classes, shares := cl.classes, slices.Clone(cl.shares)
		states := int(math.Pow(float64(k), float64(order)))
		counts := make([][]float64, states)
		state := 0
		for i, class := range classes {
			if i >= order {
				if counts[state] == nil {
					counts[state] = make([]float64, k)
				}
				counts[state][class]++
			}
			state = (state*k + int(class)) % states
		}
		// Each seen row gets one pseudo-observation spread by the class
		// shares, so no transition the data did not show is impossible.
		c.Transition = make([][]float64, states)
		for s, row := range counts {
			if row == nil {
				c.Transition[s] = shares
				continue
			}
			total := 1.0
			for _, v := range row {
				total += v
			}
			p := make([]float64, k)
			for j := range p {
				p[j] = (row[j] + shares[j]) / total
			}
			c.Transition[s] = p
		}
		c.Scale = 1
		if mg := c.meanGap(); mg > 0 && !math.IsInf(mg, 0) {
			c.Scale = 1 / mg
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the gaps take a single value; no chain to fit")
	}
	return out, nil
}

// logKMeansEdges splits sorted gaps into at most k classes by 1-D k-means
// on the log gap (Lloyd's iterations from quantile starts) and returns the
// class boundaries, the geometric midpoints between neighbouring centres.
// Regimes of gap size (requests sent together, a steady stream, pauses)
// are clusters in log gap; quantile edges would cut through them and mix
// regimes in one class, losing how they follow one another.
func logKMeansEdges(sorted []float64, k int) []float64 {
	floor := max(sorted[len(sorted)/2]*1e-6, 1e-12)
	x := make([]float64, len(sorted))
	for i, v := range sorted {
		x[i] = math.Log(max(v, floor))
	}
	centres := make([]float64, k)
	for j := range centres {
		centres[j] = x[min(len(x)-1, (2*j+1)*len(x)/(2*k))]
	}
	bounds := make([]float64, k-1)
	for range 100 {
		for j := range bounds {
			bounds[j] = (centres[j] + centres[j+1]) / 2
		}
		lo, moved := 0, false
		for j := range centres {
			hi := len(x)
			if j < k-1 {
				hi, _ = slices.BinarySearch(x, bounds[j])
			}
			if hi > lo {
				m := 0.0
				for _, v := range x[lo:hi] {
					m += v
				}
				m /= float64(hi - lo)
				if math.Abs(m-centres[j]) > 1e-9 {
					moved = true
				}
				centres[j] = m
			}
			lo = hi
		}
		slices.Sort(centres)
		if !moved {
			break
		}
	}
	edges := make([]float64, 0, k-1)
	for j := 0; j+1 < k; j++ {
		edges = append(edges, math.Exp((centres[j]+centres[j+1])/2))
	}
	return slices.Compact(edges)
}

// meanGap is the chain's stationary mean gap (before Scale), from the
// class shares of its transition matrix, found by iterating it.
func (c *GapChain) meanGap() float64 {
	k := len(c.Quantiles)
	states := len(c.Transition)
	pi := make([]float64, states)
	for s := range pi {
		pi[s] = 1 / float64(states)
	}
	next := make([]float64, states)
	for range 200 {
		clear(next)
		for s, p := range pi {
			for j, q := range c.Transition[s] {
				next[(s*k+j)%states] += p * q
			}
		}
		pi, next = next, pi
	}
	mean := 0.0
	for s, p := range pi {
		for j, q := range c.Transition[s] {
			mean += p * q * tableMean(c.Quantiles[j])
		}
	}
	return mean
}

// tableMean is the mean of a quantile table read as a piecewise-linear
// inverse CDF.
func tableMean(q []float64) float64 {
	if len(q) == 1 {
		return q[0]
	}
	s := 0.0
	for i := 1; i < len(q); i++ {
		s += (q[i] + q[i-1]) / 2
	}
	return s / float64(len(q)-1)
}

// validate checks the chain's shape (Model.Validate checks it in place).
func (c *GapChain) validate() error {
	var ck checker
	c.check(&ck, "chain")
	walkNumbers(&ck, "chain", reflect.ValueOf(c).Elem())
	if len(ck.probs) > 0 {
		return &ModelError{Problems: ck.probs}
	}
	return nil
}

// sampler returns a sampler of gaps that follows the chain, starting from
// a state drawn by running the chain in.
func (c *GapChain) sampler(src rand.Source) func() float64 {
	rng := rand.New(src)
	k := len(c.Quantiles)
	states := len(c.Transition)
	state := rng.IntN(states)
	draw := func() float64 {
		row := c.Transition[state]
		u := rng.Float64()
		j := 0
		for ; j < k-1; j++ {
			u -= row[j]
			if u < 0 {
				break
			}
		}
		state = (state*k + j) % states
		q := c.Quantiles[j]
		pos := rng.Float64() * float64(len(q)-1)
		i := min(int(pos), len(q)-2)
		return (q[i] + (pos-float64(i))*(q[i+1]-q[i])) * c.Scale
	}
	for range 10 * c.Order {
		draw()
	}
	return draw
}
