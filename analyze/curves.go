package analyze

import "math"

// Curve is a metric's empirical quantile function with a 95%
// order-statistic band: at each level P, the type-7 quantile V and the
// band [Lo, Hi]. Where the sample cannot bound a level from above, Hi holds
// the maximum and Bounded says so.
type Curve struct {
	N  int       `json:"n"`
	P  []float64 `json:"p"`
	V  []float64 `json:"v"`
	Lo []float64 `json:"lo"`
	Hi []float64 `json:"hi"`
	// Bounded[i] is false where the sample cannot bound level P[i] from
	// above (Hi[i] then holds the maximum).
	Bounded []bool `json:"bounded"`
}

// curveLevels are the quantile levels a Curve samples: dense in the body,
// denser in the tail.
func curveLevels() []float64 {
	var ps []float64
	for p := 0.01; p < 0.9; p += 0.01 {
		ps = append(ps, p)
	}
	for p := 0.9; p < 0.99; p += 0.0025 {
		ps = append(ps, p)
	}
	for p := 0.99; p < 0.9995; p += 0.0005 {
		ps = append(ps, p)
	}
	return ps
}

// curveOf samples the quantile function of a sorted sample.
func curveOf(sorted []float64) Curve {
	c := Curve{N: len(sorted)}
	if len(sorted) < 2 {
		return c
	}
	for _, p := range curveLevels() {
		lo, hi, loOK, hiOK := OrderStatCI(len(sorted), p, 0.95)
		l, h := sorted[0], sorted[len(sorted)-1]
		if loOK {
			l = sorted[lo-1]
		}
		if hiOK {
			h = sorted[hi-1]
		}
		c.P = append(c.P, p)
		c.V = append(c.V, Percentile(sorted, p))
		c.Lo, c.Hi, c.Bounded = append(c.Lo, l), append(c.Hi, h), append(c.Bounded, hiOK)
	}
	return c
}

// Histogram counts values in equal-width bins from 0 to Edges[len-1];
// Overflow counts values above the last edge.
type Histogram struct {
	Edges    []float64 `json:"edges"`
	Counts   []int     `json:"counts"`
	Overflow int       `json:"overflow"`
}

// histogramOf bins a sorted sample into bins bins up to its p99.9.
func histogramOf(sorted []float64, bins int) Histogram {
	var h Histogram
	if len(sorted) == 0 {
		return h
	}
	top := Percentile(sorted, 0.999)
	if top <= 0 {
		top = sorted[len(sorted)-1]
	}
	if top <= 0 {
		top = 1
	}
	width := top / float64(bins)
	h.Edges = make([]float64, bins+1)
	for i := range h.Edges {
		h.Edges[i] = float64(i) * width
	}
	h.Counts = make([]int, bins)
	for _, v := range sorted {
		if v > top {
			h.Overflow++
			continue
		}
		h.Counts[min(bins-1, max(0, int(math.Floor(v/width))))]++
	}
	return h
}
