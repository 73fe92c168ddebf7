package synth

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/rank"
)

// TestGapChainKeepsRegimesAndTheirOrder draws gaps from a known two-regime
// source (bursts of short gaps, U[0.001, 0.01], and pauses, U[1, 3], with
// P(short after short) = 0.9 and P(long after long) = 0.7), fits every
// candidate chain, and checks that a chain's own gaps keep the regimes'
// persistence, their shares (0.75 short, from the transition
// probabilities) and the gap distribution.
func TestGapChainKeepsRegimesAndTheirOrder(t *testing.T) {
	const n = 100_000
	rng := rand.New(rand.NewPCG(7, 7))
	gaps := make([]float64, n)
	short := true
	for i := range gaps {
		if short {
			gaps[i] = 0.001 + 0.009*rng.Float64()
			short = rng.Float64() < 0.9
		} else {
			gaps[i] = 1 + 2*rng.Float64()
			short = rng.Float64() >= 0.7
		}
	}
	src := slices.Clone(gaps)
	mean := 0.0
	for _, g := range src {
		mean += g / n
	}
	chains, err := fitGapChains(context.Background(), gaps, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(chains) != len(gapChainCandidates) {
		t.Fatalf("%d chains for %d candidates", len(chains), len(gapChainCandidates))
	}
	sortedSrc := slices.Sorted(slices.Values(src))
	for _, c := range chains {
		if err := c.validate(); err != nil {
			t.Fatalf("fitted chain invalid: %v", err)
		}
		draw := c.sampler(rand.NewPCG(3, 3))
		out := make([]float64, n)
		var ss, sl, s, l float64
		for i := range out {
			out[i] = draw() * mean // the chain's mean gap is 1
			if i > 0 {
				prevShort, isShort := out[i-1] < 0.5, out[i] < 0.5
				switch {
				case prevShort && isShort:
					ss++
				case !prevShort && !isShort:
					sl++
				}
				if prevShort {
					s++
				} else {
					l++
				}
			}
		}
		pss, pll, shareShort := ss/s, sl/l, s/(s+l)
		ks := rank.KS(sortedSrc, slices.Sorted(slices.Values(out)))
		t.Logf("%d classes, order %d: P(short→short) %.3f, P(long→long) %.3f, short share %.3f, KS %.4f",
			len(c.Quantiles), c.Order, pss, pll, shareShort, ks)
		if math.Abs(pss-0.9) > 0.015 || math.Abs(pll-0.7) > 0.025 || math.Abs(shareShort-0.75) > 0.015 || ks > 0.015 {
			t.Errorf("%d classes, order %d: want P(short→short) 0.9, P(long→long) 0.7, short share 0.75, KS ≤ 0.015", len(c.Quantiles), c.Order)
		}
	}
}

// TestGapChainValidation: a damaged chain in a model is refused with a
// message that says what is wrong.
func TestGapChainValidation(t *testing.T) {
	good := func() *GapChain {
		return &GapChain{Order: 1, Edges: []float64{1}, Quantiles: [][]float64{{0, 0.5}, {1, 2}},
			Transition: [][]float64{{0.5, 0.5}, {0.2, 0.8}}, Scale: 1}
	}
	if err := good().validate(); err != nil {
		t.Fatalf("good chain refused: %v", err)
	}
	for name, tc := range map[string]struct {
		damage func(*GapChain)
		want   string
	}{
		"order":             {func(c *GapChain) { c.Order = 0 }, "order"},
		"edges":             {func(c *GapChain) { c.Edges = nil }, "edges"},
		"rows":              {func(c *GapChain) { c.Transition = c.Transition[:1] }, "chain.transition has 1 rows"},
		"row sum":           {func(c *GapChain) { c.Transition[1] = []float64{0.2, 0.7} }, "sum to"},
		"negative":          {func(c *GapChain) { c.Transition[0] = []float64{1.5, -0.5} }, "transition[0][1] -0.5 is outside"},
		"unsorted table":    {func(c *GapChain) { c.Quantiles[1] = []float64{2, 1} }, "must not decrease"},
		"scale":             {func(c *GapChain) { c.Scale = 0 }, "scale"},
		"too short a table": {func(c *GapChain) { c.Quantiles[0] = []float64{0} }, "at least 2"},
	} {
		c := good()
		tc.damage(c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.want)
		}
	}
}
