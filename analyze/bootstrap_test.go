package analyze

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCDFStandardErrorIID checks the plain bootstrap's standard error of
// F̂ at a quantile against the binomial truth √(F(1−F)/n).
func TestCDFStandardErrorIID(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 5000)
	for i := range x {
		x[i] = rng.ExpFloat64()
	}
	for _, p := range []float64{0.5, 0.9, 0.99} {
		se, block := newSample(x).cdfStandardErrors([]float64{p}, BootstrapOptions{Resamples: 4000, Seed: 3, Block: 1})
		want := math.Sqrt(p * (1 - p) / 5000)
		if block != 1 || math.Abs(se[0]/want-1) > 0.05 {
			t.Errorf("p%v: se %.6f (block %d), want %.6f within 5%%", p, se[0], block, want)
		}
	}
}

// TestBlockTypesDrawMatchesEnumeration checks the multinomial draw over
// block types against the exact bootstrap variance, computed by
// enumerating every circular block: Var(Σ of b blocks) = b·Var(one block).
func TestBlockTypesDrawMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	x := make([]float64, 301)
	z := 0.0
	for i := range x {
		z = 0.8*z + rng.NormFloat64()
		x[i] = z
	}
	s := newSample(x)
	thresholds := []int32{30, 150, 290}
	for _, l := range []int{1, 7, 40} { // 40: more types than blocks, drawn block by block
		bt := s.blockCounts(thresholds, l)
		// Exact mean and variance of one block's counts over the n starts.
		n := len(x)
		b := n / l
		for j, th := range thresholds {
			var sum, sum2 float64
			for start := range n {
				c := 0.0
				for k := range l {
					if s.rank[(start+k)%n] < th {
						c++
					}
				}
				sum += c
				sum2 += c * c
			}
			mean := sum / float64(n)
			wantVar := float64(b) * (sum2/float64(n) - mean*mean)
			const reps = 20000
			var got, got2 float64
			for rep := range reps {
				counts := make([]int64, len(thresholds))
				bt.draw(b, rand.New(rand.NewPCG(9, uint64(rep))), counts)
				got += float64(counts[j])
				got2 += float64(counts[j]) * float64(counts[j])
			}
			gm := got / reps
			gv := got2/reps - gm*gm
			if math.Abs(gm-float64(b)*mean) > 0.02*float64(b)*mean+0.05 || math.Abs(gv/wantVar-1) > 0.06 {
				t.Errorf("l=%d threshold %d: drawn mean %.3f var %.3f, exact %.3f and %.3f", l, th, gm, gv, float64(b)*mean, wantVar)
			}
		}
	}
}

func TestAutoBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	iid := make([]float64, 2000)
	ar := make([]float64, 2000)
	for i := range iid {
		iid[i] = rng.NormFloat64()
		if i > 0 {
			ar[i] = 0.9*ar[i-1] + rng.NormFloat64()
		}
	}
	if b := autoBlock(iid); b > 4 {
		t.Errorf("independent series: block %d, want about 1", b)
	}
	// AR(1) at 0.9: the autocorrelation 0.9^k falls below 2/√2000 near k = 29.
	if b := autoBlock(ar); b < 20 || b > 200 {
		t.Errorf("AR(1) 0.9 series: block %d, want tens", b)
	}
}

// TestLongIntervalCoverage checks that the 95% intervals cover the true
// percentile in 400 trials of 2,000 lognormal (σ = 1) samples, and of AR(1)
// (φ = 0.9) log-latency series; the bounds asserted are written below.
func TestLongIntervalCoverage(t *testing.T) {
	skipLong(t)
	const trials, n, p = 400, 2000, 0.99
	trueIID := math.Exp(2.3263478740408408) // lognormal σ=1 p99: exp(z_0.99)
	// AR(1) log series with unit marginal variance: x_t = φx_{t-1} + √(1-φ²)ε.
	const phi = 0.9
	trueAR := trueIID
	var osCover, bootCover, blockCover, plainARCover int
	x := make([]float64, n)
	for trial := range trials {
		rng := rand.New(rand.NewPCG(uint64(trial), 77))
		for i := range x {
			x[i] = math.Exp(rng.NormFloat64())
		}
		sorted := slices.Clone(x)
		slices.Sort(sorted)
		lo, hi, loOK, hiOK := OrderStatCI(n, p, 0.95)
		if loOK && hiOK && sorted[lo-1] <= trueIID && trueIID <= sorted[hi-1] {
			osCover++
		}
		o := BootstrapOptions{Resamples: 1000, Seed: uint64(trial), Block: 1}
		if blo, bhi, _ := BootstrapQuantile(x, p, 0.95, o); blo <= trueIID && trueIID <= bhi {
			bootCover++
		}
		// Correlated series.
		z := rng.NormFloat64()
		for i := range x {
			z = phi*z + math.Sqrt(1-phi*phi)*rng.NormFloat64()
			x[i] = math.Exp(z)
		}
		if blo, bhi, _ := BootstrapQuantile(x, p, 0.95, BootstrapOptions{Resamples: 1000, Seed: uint64(trial), Block: BlockAuto}); blo <= trueAR && trueAR <= bhi {
			blockCover++
		}
		if blo, bhi, _ := BootstrapQuantile(x, p, 0.95, o); blo <= trueAR && trueAR <= bhi {
			plainARCover++
		}
	}
	rate := func(k int) float64 { return float64(k) / trials }
	t.Logf("p99 coverage over %d trials: order statistics %.3f, bootstrap %.3f; AR(1) 0.9: block bootstrap %.3f, plain bootstrap %.3f",
		trials, rate(osCover), rate(bootCover), rate(blockCover), rate(plainARCover))
	if r := rate(osCover); r < 0.92 || r > 0.98 {
		t.Errorf("order-statistic interval covers %.3f, want 0.92-0.98", r)
	}
	if r := rate(bootCover); r < 0.92 || r > 0.98 {
		t.Errorf("bootstrap interval covers %.3f, want 0.92-0.98", r)
	}
	if r := rate(blockCover); r < 0.85 {
		t.Errorf("block bootstrap on AR(1) covers %.3f, want at least 0.85", r)
	}
	if r := rate(plainARCover); r > 0.75 {
		t.Errorf("plain bootstrap on AR(1) covers %.3f; expected it to undercover (at most 0.75)", r)
	}
}

func TestSummarizeBootstrapFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float64, 3000)
	for i := range x {
		x[i] = math.Exp(rng.NormFloat64())
	}
	pcts := []float64{99, 50} // not ascending on purpose
	d := SummarizeBootstrap(x, pcts, BootstrapOptions{Resamples: 500, Seed: 1, Block: 1}, 0.05, IntervalAuto)
	if d.Block != 1 || d.N != 3000 {
		t.Fatalf("block %d n %d", d.Block, d.N)
	}
	for _, q := range d.Quantiles {
		if q.BootLo == nil || q.BootHi == nil || !(*q.BootLo <= q.Value && q.Value <= *q.BootHi) {
			t.Errorf("p%g = %v outside its bootstrap interval [%v, %v]", q.P, q.Value, q.BootLo, q.BootHi)
		}
	}
	p99, p50 := d.Quantiles[0], d.Quantiles[1]
	if p99.P != 99 || p50.P != 50 || p99.Value <= p50.Value {
		t.Fatalf("percentile order mixed up: %+v", d.Quantiles)
	}
	// The tail is less precise than the median, and needs more samples.
	if *p99.RelHalfWidth <= *p50.RelHalfWidth || *p99.NeededN <= *p50.NeededN {
		t.Errorf("p99 ±%.3f (n %d) vs p50 ±%.3f (n %d)", *p99.RelHalfWidth, *p99.NeededN, *p50.RelHalfWidth, *p50.NeededN)
	}
	// Half the data: the needed count is about the same, the width grows ~√2.
	h := SummarizeBootstrap(x[:750], []float64{50}, BootstrapOptions{Resamples: 500, Seed: 1, Block: 1}, 0.05, IntervalAuto)
	if r := *h.Quantiles[0].RelHalfWidth / *p50.RelHalfWidth; r < 1.4 || r > 2.8 {
		t.Errorf("a quarter of the data widened the median interval %.2fx, want about 2x", r)
	}
}

func TestSortParallelMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for _, n := range []int{0, 1, 1000, 1<<16 + 7, 300001} {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(rng.IntN(5000)) / 7 // ties on purpose
		}
		want := slices.Clone(x)
		slices.Sort(want)
		sortFloatsParallel(x)
		if !slices.Equal(x, want) {
			t.Fatalf("n=%d: parallel sort differs from slices.Sort", n)
		}
		s := newSample(want) // already sorted: ranks must be the identity
		for i, r := range s.rank {
			if int(r) != i {
				t.Fatalf("n=%d: rank[%d] = %d on sorted input with ties", n, i, r)
			}
		}
	}
}

// skipLong skips a long statistical check under -race or -short: make
// test-timing runs them without -race, where they take seconds.
func skipLong(t *testing.T) {
	t.Helper()
	if raceEnabled || testing.Short() {
		t.Skip("a long statistical check: run by make test-timing")
	}
}
