package synth

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/internal/rank"
)

// linearMarginal is a uniform law on [lo, hi] as a quantile table.
func linearMarginal(lo, hi float64) Marginal {
	k := make([]float64, 1025)
	for i := range k {
		k[i] = lo + (hi-lo)*float64(i)/float64(len(k)-1)
	}
	return Marginal{Knots: k, Mean: (lo + hi) / 2}
}

// TestLengthBlocksStratifyAndPair draws whole blocks from a class with
// uniform marginals and a known copula correlation: every block's inputs
// must fill each 1/256 of the law once (KS against the law ≤ 1/256 plus
// rounding), and the block's rank correlation must sit much closer to the
// copula's than i.i.d. draws of the same size do.
func TestLengthBlocksStratifyAndPair(t *testing.T) {
	const rho = 0.6
	c := &LengthClass{Input: linearMarginal(1, 10000), Output: linearMarginal(1, 5000), Rho: rho, Sampler: "copula"}
	want := 6 / math.Pi * math.Asin(rho/2) // Spearman of a Gaussian copula
	b := newLengthBlocks(c, rand.New(rand.NewPCG(1, 2)))
	rng := rand.New(rand.NewPCG(3, 4))
	const blocks = 40
	var blockErr, iidErr float64
	for range blocks {
		in := make([]float64, lengthBlockSize)
		for i := range in {
			a, _ := b.next()
			in[i] = float64(a)
		}
		slices.Sort(in)
		ks := 0.0
		for i, x := range in {
			cdf := (x - 1) / 9999
			ks = max(ks, math.Abs(cdf-float64(i)/lengthBlockSize), math.Abs(cdf-float64(i+1)/lengthBlockSize))
		}
		if ks > 1.0/lengthBlockSize+1e-3 {
			t.Fatalf("a block's inputs are KS %.4f from the law, want ≤ 1/%d: not stratified", ks, lengthBlockSize)
		}
		// The block just handed out, in its drawn pairing.
		var pi, po []float64
		for _, p := range b.pending {
			pi, po = append(pi, float64(p[0])), append(po, float64(p[1]))
		}
		blockErr += math.Abs(rank.Spearman(pi, po)-want) / blocks
		for i := range pi {
			pi[i], po[i] = iidPair(c, rng)
		}
		iidErr += math.Abs(rank.Spearman(pi, po)-want) / blocks
	}
	t.Logf("mean |Spearman − %.4f| over %d blocks of %d: blocks %.4f, i.i.d. %.4f", want, blocks, lengthBlockSize, blockErr, iidErr)
	if blockErr > 0.6*iidErr {
		t.Errorf("block rank correlation is off by %.4f on average, i.i.d. by %.4f: pairing does not hold the copula", blockErr, iidErr)
	}
}

func iidPair(c *LengthClass, rng *rand.Rand) (float64, float64) {
	a, o := c.sample(rng.Float64(), rng.Float64(), nil)
	return float64(a), float64(o)
}

// TestRhoCalibratedToSpearman fits a class whose outputs are few tied
// values (three, like short completions): the normal scores of tied ranks
// understate the dependence, so sampling at the estimated rho gives too
// weak a rank correlation, and sampling at the calibrated one gives the
// trace's.
func TestRhoCalibratedToSpearman(t *testing.T) {
	const rho = 0.5
	rng := rand.New(rand.NewPCG(8, 8))
	f := newLengthFitter(8)
	var xi, xo []float64
	for range 20000 {
		z1 := rng.NormFloat64()
		z2 := rho*z1 + math.Sqrt(1-rho*rho)*rng.NormFloat64()
		in := int64(math.Exp(6 + z1))
		out := int64(1 + math.Floor(3*distNormalCDF(z2)))
		f.add(max(in, 1), out)
		xi, xo = append(xi, float64(max(in, 1))), append(xo, float64(out))
	}
	c := f.fit(257)
	if c.RhoSampler == nil {
		t.Fatal("no calibrated correlation for 20,000 pairs")
	}
	target := rank.Spearman(xi, xo)
	simulate := func(r float64) float64 {
		cc := c
		cc.RhoSampler = &r
		cc.Sampler = "copula"
		s := rand.New(rand.NewPCG(9, 9))
		a, b := make([]float64, 100000), make([]float64, 100000)
		for i := range a {
			a[i], b[i] = iidPair(&cc, s)
		}
		return rank.Spearman(a, b)
	}
	atEstimate, atCalibrated := simulate(c.Rho), simulate(*c.RhoSampler)
	t.Logf("trace Spearman %.4f; rho %.4f gives %.4f, calibrated %.4f gives %.4f", target, c.Rho, atEstimate, *c.RhoSampler, atCalibrated)
	if math.Abs(atCalibrated-target) > 0.01 {
		t.Errorf("sampling at the calibrated rho gives Spearman %.4f, the trace %.4f", atCalibrated, target)
	}
	if math.Abs(atEstimate-target) < 0.02 {
		t.Errorf("the estimate alone already gives %.4f for %.4f: the fixture does not need calibration", atEstimate, target)
	}
}

func distNormalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// TestBinnedSamplerKeepsTailDependence fits a class whose output falls
// from ~500 to ~5 tokens for the longest tenth of the inputs (long
// documents, one-word answers): equal-count bins isolate that decile, so
// the binned sampler must give every input decile the trace's median output
// (log-spaced bins mixed the top decile with shorter inputs: Mooncake's
// median output there came out 19 tokens for the trace's 6).
func TestBinnedSamplerKeepsTailDependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	f := newLengthFitter(12)
	var xi, xo []float64
	cut := math.Exp(6 + 1.2*1.2816) // the inputs' 90th percentile
	for range 20000 {
		in := max(1, int64(math.Exp(6+1.2*rng.NormFloat64())))
		out := int64(400 + rng.IntN(200))
		if float64(in) >= cut {
			out = int64(3 + rng.IntN(5))
		}
		f.add(in, out)
		xi, xo = append(xi, float64(in)), append(xo, float64(out))
	}
	c := f.fit(257)
	c.Sampler = "binned"
	want := medianOutputPerDecile(xi, xo)
	s := rand.New(rand.NewPCG(13, 13))
	si, so := make([]float64, 50000), make([]float64, 50000)
	for i := range si {
		si[i], so[i] = iidPair(&c, s)
	}
	got := medianOutputPerDecile(si, so)
	t.Logf("median output per input decile: trace %v, binned sampler %v (%d bins)", want, got, len(c.Bins))
	for d := range want {
		if math.Abs(got[d]-want[d]) > 0.25*want[d] {
			t.Errorf("input decile %d: median output %.0f, the trace's %.0f", d+1, got[d], want[d])
		}
	}
}
