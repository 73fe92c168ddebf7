package synth

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/rank"
)

// Marginal is an empirical distribution of a token length: a quantile table
// plus atoms, the single values that carry a visible share of the mass (a
// context cap, a max_tokens default). Knots[i] is the type-1 quantile at
// p = i/(len(Knots)-1), so Knots[0] is the minimum and the last knot the
// maximum.
type Marginal struct {
	N     int64     `json:"n"`
	Mean  float64   `json:"mean"`
	Knots []float64 `json:"knots"`
	// Atoms are values holding at least AtomShare of the mass, with the CDF
	// just below (PLow) and at (PHigh) the value.
	Atoms []Atom `json:"atoms,omitempty"`
}

// Atom is one value with a point mass.
type Atom struct {
	Value float64 `json:"value"`
	PLow  float64 `json:"p_low"`
	PHigh float64 `json:"p_high"`
}

// AtomShare is the smallest share of the mass a value needs to be an atom.
const AtomShare = 0.005

// Quantile returns the marginal's value at probability p: an atom's value
// where p falls in its mass, else linear interpolation between knots.
func (m *Marginal) Quantile(p float64) float64 {
	for _, a := range m.Atoms {
		if p >= a.PLow && p < a.PHigh {
			return a.Value
		}
	}
	k := len(m.Knots)
	if k == 0 {
		return 0
	}
	if k == 1 || p <= 0 {
		return m.Knots[0]
	}
	if p >= 1 {
		return m.Knots[k-1]
	}
	pos := p * float64(k-1)
	i := int(pos)
	frac := pos - float64(i)
	return m.Knots[i] + frac*(m.Knots[i+1]-m.Knots[i])
}

// histogram counts exact integer values: token lengths have few distinct
// values, so this is exact and small.
type histogram map[int64]int64

// merge adds o's counts to h's.
func (h histogram) merge(o histogram) {
	for v, c := range o {
		h[v] += c
	}
}

// marginal builds a Marginal with up to k knots from the histogram.
func (h histogram) marginal(k int) Marginal {
	vals, counts := h.sortedCounts()
	return marginalFromCounts(vals, counts, k)
}

// cdfTable holds the mid-rank CDF of each value, (count below + half the
// count at v) / n, for normal scores.
type cdfTable struct {
	vals []float64
	mid  []float64
}

func (h histogram) cdf() cdfTable {
	vals, counts := h.sortedCounts()
	var n int64
	for _, c := range counts {
		n += c
	}
	t := cdfTable{vals: vals, mid: make([]float64, len(vals))}
	var cum int64
	for i, c := range counts {
		t.mid[i] = (float64(cum) + float64(c)/2) / float64(n)
		cum += c
	}
	return t
}

func (t cdfTable) at(v int64) float64 {
	i, _ := slices.BinarySearch(t.vals, float64(v))
	if i >= len(t.vals) {
		return 1
	}
	return t.mid[i]
}

// LengthClass is the joint input/output length model of one class of
// requests (model and api).
type LengthClass struct {
	Model string `json:"model,omitempty"`
	API   string `json:"api,omitempty"`
	// Share is the class's share of requests.
	Share  float64  `json:"share"`
	Input  Marginal `json:"input_tokens"`
	Output Marginal `json:"output_tokens"`
	// Rho is the correlation of the Gaussian copula (of the normal scores of
	// the mid-ranks), RhoCI95 its 95% interval (Fisher z, Bonett–Wright
	// variance).
	Rho     float64    `json:"rho"`
	RhoCI95 [2]float64 `json:"rho_ci95"`
	// Spearman is the rank correlation of input and output in the trace.
	Spearman float64 `json:"spearman"`
	// RhoSampler is the copula correlation the generator uses: Rho adjusted
	// so that the simulated lengths (rounded, with the marginals' atoms and
	// ties) have the trace's Spearman. Normal scores of tied ranks
	// understate the dependence (Azure code, first 70%: Rho −0.010 for a
	// Spearman of −0.016, RhoSampler −0.019). Absent in older models: Rho
	// is used.
	RhoSampler *float64 `json:"rho_sampler,omitempty"`
	// Bins is the conditional alternative: output quantiles given an
	// equal-count input bin (its edges at the input's quantiles).
	Bins []LengthBin `json:"bins,omitempty"`
	// Sampler is "copula" or "binned": the one whose median output per input
	// decile is closer to the trace's (decided at fit time).
	Sampler string `json:"sampler"`
	// DecileError is the largest relative error of the median output per
	// input decile, for each sampler, by simulation from the fit.
	DecileError map[string]float64 `json:"decile_error"`
}

// LengthBin holds the output distribution of requests whose input falls in
// [InputLow, InputHigh).
type LengthBin struct {
	InputLow  float64  `json:"input_low"`
	InputHigh float64  `json:"input_high"`
	Output    Marginal `json:"output_tokens"`
}

// lengthFitter accumulates one class's lengths.
type lengthFitter struct {
	in, out histogram
	pairs   *reservoir[[2]int64] // (input, output)
}

// maxPairs bounds the pairs kept per class for the copula and the bins.
const maxPairs = 200_000

func newLengthFitter(seed uint64) *lengthFitter {
	return &lengthFitter{in: histogram{}, out: histogram{}, pairs: newReservoir[[2]int64](maxPairs, seed)}
}

func (f *lengthFitter) add(in, out int64) {
	f.in[in]++
	f.out[out]++
	f.pairs.add([2]int64{in, out})
}

// merge adds o's lengths to f's: the histograms exactly, the pairs by a
// reservoir merge (exact below maxPairs).
func (f *lengthFitter) merge(o *lengthFitter, rng *rand.Rand) {
	f.in.merge(o.in)
	f.out.merge(o.out)
	f.pairs.merge(o.pairs, rng)
}

func (f *lengthFitter) fit(knots int) LengthClass {
	c := LengthClass{Input: f.in.marginal(knots), Output: f.out.marginal(knots), DecileError: map[string]float64{}}
	ci, co := f.in.cdf(), f.out.cdf()
	n := len(f.pairs.items)
	zi, zo := make([]float64, n), make([]float64, n)
	xi, xo := make([]float64, n), make([]float64, n)
	norm := distuv.UnitNormal
	for i, p := range f.pairs.items {
		zi[i] = norm.Quantile(ci.at(p[0]))
		zo[i] = norm.Quantile(co.at(p[1]))
		xi[i], xo[i] = float64(p[0]), float64(p[1])
	}
	if c.Rho = stat.Correlation(zi, zo, nil); math.IsNaN(c.Rho) {
		c.Rho = 0 // a constant length: no dependence to model
	}
	if n > 3 {
		// Fisher z with Bonett and Wright's variance for rank-based
		// correlations, (1 + r²/2)/(n − 3): plain 1/(n − 3) is too narrow
		// for normal scores of ranks.
		z, se := math.Atanh(c.Rho), math.Sqrt((1+c.Rho*c.Rho/2)/float64(n-3))
		c.RhoCI95 = [2]float64{math.Tanh(z - 1.96*se), math.Tanh(z + 1.96*se)}
	}
	c.Spearman = rank.Spearman(xi, xo)
	if n >= minCalibrationPairs {
		r := c.calibrateRho(c.Spearman)
		c.RhoSampler = &r
	}
	c.Bins = fitBins(f.pairs.items, c.Input)
	// Choose the sampler by the median output per input decile.
	want := medianOutputPerDecile(xi, xo)
	rng := rand.New(rand.NewPCG(99, 1))
	for _, s := range []string{"copula", "binned"} {
		c.Sampler = s
		si, so := make([]float64, 20000), make([]float64, 20000)
		for k := range si {
			a, b := c.sample(rng.Float64(), rng.Float64(), nil)
			si[k], so[k] = float64(a), float64(b)
		}
		got := medianOutputPerDecile(si, so)
		e := 0.0
		for d := range want {
			if want[d] > 0 {
				e = max(e, math.Abs(got[d]-want[d])/want[d])
			}
		}
		c.DecileError[s] = e
	}
	c.Sampler = "copula"
	if len(c.Bins) > 0 && c.DecileError["binned"] < 0.8*c.DecileError["copula"] {
		c.Sampler = "binned"
	}
	return c
}

// Conditional bins: at most maxLengthBins, each from at least minBinPairs
// pairs, each output law a table of binKnots knots (20 × 65 knots: less than
// the 12 × 129 of the log-spaced bins they replaced).
const (
	maxLengthBins = 20
	minBinPairs   = 200
	binKnots      = 65
)

// fitBins builds output tables for equal-count input bins, merging a bin
// with fewer than minBinPairs pairs (ties at an atom) into its neighbour.
// Bin edges sit half-way between integers: a length v is in the bin with
// InputLow < v < InputHigh.
func fitBins(pairs [][2]int64, in Marginal) []LengthBin {
	if len(pairs) < 400 || len(in.Knots) < 2 {
		return nil
	}
	hi := in.Knots[len(in.Knots)-1] + 1
	k := min(maxLengthBins, len(pairs)/minBinPairs)
	edges := make([]float64, k+1)
	for i := 1; i < k; i++ {
		// Equal-count bins: edges at the input's quantiles, so the bins
		// follow the data where it is (the input deciles a check looks at
		// included) instead of spreading over a long thin tail.
		edges[i] = max(edges[i-1], math.Round(in.Quantile(float64(i)/float64(k)))+0.5)
	}
	edges[0], edges[k] = 0, hi // the last bin also takes anything longer when sampling
	hists := make([]histogram, k)
	counts := make([]int, k)
	for i := range hists {
		hists[i] = histogram{}
	}
	for _, p := range pairs {
		b, _ := slices.BinarySearch(edges, float64(p[0]))
		b = min(max(b-1, 0), k-1)
		hists[b][p[1]]++
		counts[b]++
	}
	var bins []LengthBin
	var cur histogram
	curN, start := 0, 0.0
	for i := range k {
		if cur == nil {
			cur, start = histogram{}, edges[i]
		}
		for v, c := range hists[i] {
			cur[v] += c
		}
		curN += counts[i]
		if curN >= minBinPairs || i == k-1 {
			if curN < minBinPairs && len(bins) > 0 { // fold a thin last bin into the previous one
				prev := &bins[len(bins)-1]
				merged := histogram{}
				for v, c := range cur {
					merged[v] += c
				}
				// Rebuild the previous bin from pairs in its whole range.
				for _, p := range pairs {
					if float64(p[0]) >= prev.InputLow && float64(p[0]) < start {
						merged[p[1]]++
					}
				}
				prev.InputHigh = hi
				prev.Output = merged.marginal(binKnots)
				break
			}
			bins = append(bins, LengthBin{InputLow: start, InputHigh: edges[i+1], Output: cur.marginal(binKnots)})
			cur, curN = nil, 0
		}
	}
	return bins
}

// medianOutputPerDecile returns the median output length within each input
// decile.
func medianOutputPerDecile(in, out []float64) []float64 {
	idx := make([]int, len(in))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(in[a], in[b]) })
	res := make([]float64, 10)
	for d := range 10 {
		lo, hi := d*len(idx)/10, (d+1)*len(idx)/10
		if hi <= lo {
			continue
		}
		o := make([]float64, 0, hi-lo)
		for _, i := range idx[lo:hi] {
			o = append(o, out[i])
		}
		slices.Sort(o)
		res[d] = rank.Percentile(o, 0.5)
	}
	return res
}

// minCalibrationPairs is the fewest pairs a class needs before its copula
// correlation is calibrated to the trace's Spearman (below it the target
// itself is too noisy to chase).
const minCalibrationPairs = 200

// calibrationSamples is the size of the simulated sample the calibration
// matches the Spearman on.
const calibrationSamples = 20_000

// calibrationTolerance is how close the simulated Spearman must come to
// the trace's: below the simulation's own noise.
const calibrationTolerance = 0.001

// samplerRho is the copula correlation to sample with.
func (c *LengthClass) samplerRho() float64 {
	if c.RhoSampler != nil {
		return *c.RhoSampler
	}
	return c.Rho
}

// calibrateRho returns the copula correlation whose simulated lengths have
// Spearman target, by secant steps with common random numbers (the
// simulated Spearman is then a smooth monotone function of the
// correlation).
func (c *LengthClass) calibrateRho(target float64) float64 {
	// Stratified scores, and a noise exactly uncorrelated with them: the
	// simulated sample then carries almost none of the sampling noise a
	// random one would (±1/sqrt(n) in its Spearman).
	rng := rand.New(rand.NewPCG(98, 1))
	n := calibrationSamples
	z1, e, in, out := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range n {
		u := (float64(i) + 0.5) / float64(n)
		z1[i] = distuv.UnitNormal.Quantile(u)
		in[i] = math.Max(1, math.Round(c.Input.Quantile(u)))
	}
	copy(e, z1)
	rng.Shuffle(n, func(i, j int) { e[i], e[j] = e[j], e[i] })
	decorrelate(z1, e)
	inRanks := rank.Average(in)
	simulated := func(rho float64) float64 {
		s := math.Sqrt(1 - rho*rho)
		for i := range n {
			out[i] = math.Max(1, math.Round(c.Output.Quantile(distuv.UnitNormal.CDF(rho*z1[i]+s*e[i]))))
		}
		r := stat.Correlation(inRanks, rank.Average(out), nil)
		if math.IsNaN(r) {
			return 0
		}
		return r
	}
	// Secant steps from the normal-score estimate: the simulated Spearman
	// is smooth in rho, and continuous marginals need no step at all.
	x0, f0 := c.Rho, simulated(c.Rho)-target
	if math.Abs(f0) <= calibrationTolerance {
		return c.Rho
	}
	x1 := min(max(x0-f0, -0.999), 0.999)
	f1 := simulated(x1) - target
	for range 10 {
		if math.Abs(f1) <= calibrationTolerance || f1 == f0 {
			break
		}
		x0, f0, x1 = x1, f1, min(max(x1-f1*(x1-x0)/(f1-f0), -0.999), 0.999)
		f1 = simulated(x1) - target
	}
	if math.Abs(f1) > math.Abs(f0) {
		return x0
	}
	return x1
}

// sample draws one (input, output) pair from two independent uniforms on
// (0, 1): u1 sets the input, ue the output given the input. inputU, when
// non-nil, maps u1 first (scenarios use it to draw from the tail).
func (c *LengthClass) sample(u1, ue float64, inputU func(float64) float64) (int64, int64) {
	e := distuv.UnitNormal.Quantile(min(max(ue, 1e-12), 1-1e-12))
	if inputU != nil {
		u1 = inputU(u1)
	}
	in := max(1, int64(math.Round(c.Input.Quantile(u1))))
	var out float64
	if c.Sampler == "binned" && len(c.Bins) > 0 {
		b := len(c.Bins) - 1
		for i, bin := range c.Bins {
			if float64(in) < bin.InputHigh {
				b = i
				break
			}
		}
		out = c.Bins[b].Output.Quantile(distuv.UnitNormal.CDF(e))
	} else {
		rho := c.samplerRho()
		z2 := rho*distuv.UnitNormal.Quantile(min(max(u1, 1e-12), 1-1e-12)) + math.Sqrt(1-rho*rho)*e
		out = c.Output.Quantile(distuv.UnitNormal.CDF(z2))
	}
	return in, max(1, int64(math.Round(out)))
}
