package synth

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// coverage runs trial for seeds 1..n and returns the share whose 95%
// interval covered the truth.
func coverage(n int, trial func(seed uint64) bool) float64 {
	hit := 0
	for s := 1; s <= n; s++ {
		if trial(uint64(s)) {
			hit++
		}
	}
	return float64(hit) / float64(n)
}

// skipLong skips a long statistical check under -race or -short, and
// otherwise lets it run beside the others: they are seeded and CPU-bound,
// and make test-timing runs them on an otherwise idle machine.
func skipLong(t *testing.T) {
	t.Helper()
	if raceEnabled || testing.Short() {
		t.Skip("long statistical check: runs without -race in make test-timing")
	}
	t.Parallel()
}

func checkCoverage(t *testing.T, what string, c float64) {
	t.Helper()
	t.Logf("%s: 95%% interval covered the truth in %.0f%% of seeds", what, 100*c)
	if c < 0.90 || c > 0.99 {
		t.Errorf("%s: coverage %.2f outside [0.90, 0.99]", what, c)
	}
}

// TestRecoverFourierIntensity draws 14 days of a Poisson process whose log
// rate has known daily harmonics, bins it as the fit does, and checks the
// coverage of each coefficient's interval.
func TestLongRecoverFourierIntensity(t *testing.T) {
	skipLong(t)
	truth := []float64{math.Log(2), 0.6, -0.3, 0.2, 0.1} // intercept, daily h1 cos/sin, h2 cos/sin
	const days = 14
	width := 300.0
	nb := int(days * daySeconds / width)
	covered := make([]int, len(truth))
	const seeds = 100
	for s := 1; s <= seeds; s++ {
		rng := rand.New(rand.NewPCG(uint64(s), 11))
		b := binnedCounts{Start: 0, Width: width, Counts: make([]float64, nb)}
		for i := range b.Counts {
			mu := math.Exp(fourierDot(truth, 2, 0, b.mid(i))) * width
			b.Counts[i] = distuv.Poisson{Lambda: mu, Src: rng}.Rand()
		}
		if s <= 5 { // model choice: QAIC must keep the true harmonics
			in, err := fitFourier(context.Background(), b, days*daySeconds, 2)
			if err != nil {
				t.Fatal(err)
			}
			// AIC may keep a spurious weekly term now and then (it is
			// not consistent); it must find the daily ones.
			if in.DailyHarmonics != 2 {
				t.Errorf("seed %d: QAIC chose %d daily harmonics, truth has 2", s, in.DailyHarmonics)
			}
		}
		coef, se, err := fitFourierFixed(b, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range truth {
			if math.Abs(coef[j]-want) <= 1.96*se[j] {
				covered[j]++
			}
		}
	}
	for j := range truth {
		checkCoverage(t, "fourier coefficient "+string(rune('0'+j)), float64(covered[j])/seeds)
	}
}

// TestRecoverGammaShape fits renewal laws to Gamma gaps of known shape.
func TestLongRecoverGammaShape(t *testing.T) {
	skipLong(t)
	const shape = 0.6
	c := coverage(100, func(seed uint64) bool {
		g := distuv.Gamma{Alpha: shape, Beta: shape, Src: rand.NewPCG(seed, 12)}
		obs := make([]gapObs, 1000)
		for i := range obs {
			obs[i] = gapObs{gap: g.Rand(), res: 1e-9}
		}
		r, err := fitRenewal(context.Background(), obs, false)
		if err != nil {
			t.Fatal(err)
		}
		if r.Dist != "gamma" {
			// Weibull can win AIC on a sample; its shape is not the truth.
			return false
		}
		return r.ShapeCI95[0] <= shape && shape <= r.ShapeCI95[1]
	})
	checkCoverage(t, "gamma shape", c)
}

// TestRecoverCopulaCorrelation draws lengths from a Gaussian copula with
// known correlation over lognormal and geometric marginals.
func TestLongRecoverCopulaCorrelation(t *testing.T) {
	skipLong(t)
	const rho = 0.45
	c := coverage(300, func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, 14))
		f := newLengthFitter(seed)
		for range 2000 {
			z1 := rng.NormFloat64()
			z2 := rho*z1 + math.Sqrt(1-rho*rho)*rng.NormFloat64()
			in := int64(math.Exp(6 + 1.2*z1))  // lognormal input
			out := int64(math.Exp(7 + 0.9*z2)) // lognormal output, median 1097 (few ties)
			f.add(max(in, 1), max(out, 1))
		}
		cl := f.fit(257)
		return cl.RhoCI95[0] <= rho && rho <= cl.RhoCI95[1]
	})
	// Geometric ties blur the normal scores a little; the interval must
	// still cover about 95%.
	checkCoverage(t, "copula correlation", c)
}

// TestRecoverZipfExponent draws group sizes from a discrete power law of
// known exponent (P(x) ∝ x^-alpha) by inverse transform and fits it.
func TestLongRecoverZipfExponent(t *testing.T) {
	skipLong(t)
	const alpha = 2.3
	z, _, _ := hurwitzZeta(alpha, 1)
	var cdf []float64
	acc := 0.0
	for x := 1; x <= 1_000_000 && acc < 1-1e-9; x++ {
		acc += math.Pow(float64(x), -alpha) / z
		cdf = append(cdf, acc)
	}
	c := coverage(400, func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, 15))
		sizes := make([]float64, 1500)
		for i := range sizes {
			u := rng.Float64()
			lo, hi := 0, len(cdf)
			for lo < hi {
				mid := (lo + hi) / 2
				if cdf[mid] < u {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			sizes[i] = float64(lo + 1)
		}
		_, ci, err := fitPowerLaw(context.Background(), sizes)
		if err != nil {
			t.Fatal(err)
		}
		return ci[0] <= alpha && alpha <= ci[1]
	})
	checkCoverage(t, "zipf exponent", c)
}

func TestHurwitzZetaKnownValues(t *testing.T) {
	for _, tc := range []struct{ s, want float64 }{
		{2, math.Pi * math.Pi / 6},
		{4, math.Pow(math.Pi, 4) / 90},
		{1.5, 2.6123753486854883},
	} {
		z, dz, _ := hurwitzZeta(tc.s, 1)
		if math.Abs(z-tc.want) > 1e-9*tc.want {
			t.Errorf("zeta(%v) = %.12f, want %.12f", tc.s, z, tc.want)
		}
		// Derivative against a central difference.
		zp, _, _ := hurwitzZeta(tc.s+1e-5, 1)
		zm, _, _ := hurwitzZeta(tc.s-1e-5, 1)
		if fd := (zp - zm) / 2e-5; math.Abs(dz-fd) > 1e-5*math.Abs(fd) {
			t.Errorf("zeta'(%v) = %v, finite difference %v", tc.s, dz, fd)
		}
	}
}
