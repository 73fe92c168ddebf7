package synth

import (
	"math"
	"slices"
)

// DispersionIndex returns the index of dispersion of counts (variance over
// mean of the number of arrivals per window) for windows of w seconds laid
// from t0 over [t0, t1). ts are arrival times in seconds. It returns NaN when
// fewer than two whole windows fit or no arrival falls in them. Memory is
// bounded by the arrivals, not the number of windows.
func DispersionIndex(ts []float64, t0, t1, w float64) float64 {
	nw := math.Floor((t1 - t0) / w)
	if !(nw >= 2) {
		return math.NaN()
	}
	if nw <= max(1<<20, 4*float64(len(ts))) {
		return denseDispersion(ts, t0, w, int(nw))
	}
	// Many more windows than arrivals: Σc and Σc² over the windows that
	// hold arrivals (the rest add 0).
	var sum, sq float64
	if slices.IsSorted(ts) {
		cur, c := -1.0, 0.0
		for _, t := range ts {
			k := math.Floor((t - t0) / w)
			if k < 0 || k >= nw {
				continue
			}
			if k != cur {
				sq += c * c
				cur, c = k, 0
			}
			c++
			sum++
		}
		sq += c * c
	} else {
		counts := map[float64]float64{}
		for _, t := range ts {
			if k := math.Floor((t - t0) / w); k >= 0 && k < nw {
				counts[k]++
				sum++
			}
		}
		for _, c := range counts {
			sq += c * c
		}
	}
	mean := sum / nw
	if mean == 0 {
		return math.NaN()
	}
	return (sq - nw*mean*mean) / (nw - 1) / mean
}

// denseDispersion is DispersionIndex with one counter per window.
func denseDispersion(ts []float64, t0, w float64, n int) float64 {
	counts := make([]float64, n)
	for _, t := range ts {
		k := int(math.Floor((t - t0) / w))
		if k >= 0 && k < n {
			counts[k]++
		}
	}
	var sum, sq float64
	for _, c := range counts {
		sum += c
	}
	mean := sum / float64(n)
	if mean == 0 {
		return math.NaN()
	}
	for _, c := range counts {
		sq += (c - mean) * (c - mean)
	}
	return sq / float64(n-1) / mean
}

// hurwitzZeta returns ζ(s, q) = Σ_{k≥0} (k+q)^-s for s > 1, with its first
// and second derivatives in s, by direct summation of the first terms and
// the Euler–Maclaurin tail.
func hurwitzZeta(s, q float64) (z, dz, d2z float64) {
	const terms = 64
	for k := 0; k < terms; k++ {
		x := float64(k) + q
		l := math.Log(x)
		t := math.Pow(x, -s)
		z += t
		dz -= l * t
		d2z += l * l * t
	}
	// Tail Σ_{x ≥ N} x^-s ≈ ∫_N^∞ x^-s dx + N^-s/2 (N = terms + q), and its
	// derivatives in s.
	n := float64(terms) + q
	l := math.Log(n)
	p := math.Pow(n, 1-s)
	integral := p / (s - 1)
	dIntegral := -l*p/(s-1) - p/((s-1)*(s-1))
	d2Integral := l*l*p/(s-1) + 2*l*p/((s-1)*(s-1)) + 2*p/((s-1)*(s-1)*(s-1))
	half := math.Pow(n, -s) / 2
	// Next Euler–Maclaurin term: s·N^(-s-1)/12.
	em := s * math.Pow(n, -s-1) / 12
	dem := math.Pow(n, -s-1)/12 - l*em
	d2em := -2*l*math.Pow(n, -s-1)/12 + l*l*em
	z += integral + half + em
	dz += dIntegral - l*half + dem
	d2z += d2Integral + l*l*half + d2em
	return z, dz, d2z
}
