package synth

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/stat/distuv"
)

// lengthBlockSize is the number of requests of a class whose lengths are
// drawn together (see lengthBlocks).
const lengthBlockSize = 256

// lengthBlocks draws a class's (input, output) pairs a block of
// lengthBlockSize at a time. In each block the input and the output
// uniforms are stratified (one draw from each 1/256 of the probability, in
// random order: Latin hypercube sampling), and for the copula sampler the
// outputs are paired with the inputs so that the normal scores of the block
// correlate exactly at the fitted rho (Iman–Conover). Every pair is still a
// draw from the fitted joint law; what goes is the sampling noise of short
// workloads, which i.i.d. draws make as large as the trace's own drift
// (docs/measurements.md).
type lengthBlocks struct {
	c       *LengthClass
	rng     *rand.Rand
	pending [][2]int64 // the current block's pairs
	used    int        // how many of them were handed out
	// scratch for one block
	u1, u2, z1, e []float64
	order         []int
}

func newLengthBlocks(c *LengthClass, rng *rand.Rand) *lengthBlocks {
	k := lengthBlockSize
	return &lengthBlocks{c: c, rng: rng, pending: make([][2]int64, 0, k), u1: make([]float64, k), u2: make([]float64, k), z1: make([]float64, k), e: make([]float64, k), order: make([]int, k)}
}

// next returns the next pair of the current block, drawing a new block
// when it is used up.
func (b *lengthBlocks) next() (int64, int64) {
	if b.used == len(b.pending) {
		b.fill()
		b.used = 0
	}
	p := b.pending[b.used]
	b.used++
	return p[0], p[1]
}

// stratify fills u with one uniform from each of len(u) equal strata, in
// random order.
func (b *lengthBlocks) stratify(u []float64) {
	k := float64(len(u))
	for i := range u {
		u[i] = min(max((float64(i)+b.rng.Float64())/k, 1e-12), 1-1e-12)
	}
	b.rng.Shuffle(len(u), func(i, j int) { u[i], u[j] = u[j], u[i] })
}

// fill draws one block.
func (b *lengthBlocks) fill() {
	c, k := b.c, lengthBlockSize
	b.stratify(b.u1)
	b.stratify(b.u2)
	b.pending = b.pending[:0]
	if c.Sampler == "binned" && len(c.Bins) > 0 {
		// Output given the input's bin: stratified, no pairing to adjust.
		for i := range k {
			in, out := c.sample(b.u1[i], b.u2[i], nil)
			b.pending = append(b.pending, [2]int64{in, out})
		}
		return
	}
	// Normal scores of the inputs and an independent noise, made exactly
	// uncorrelated with them in the block; z2 = rho z1 + sqrt(1-rho²) e then
	// correlates with z1 at exactly rho, and the k stratified outputs are
	// handed out in the order of z2.
	for i := range k {
		b.z1[i] = distuv.UnitNormal.Quantile(b.u1[i])
		b.e[i] = distuv.UnitNormal.Quantile(b.u2[i])
	}
	decorrelate(b.z1, b.e)
	rho := c.samplerRho()
	z2 := b.e // reused in place
	for i := range z2 {
		z2[i] = rho*b.z1[i] + math.Sqrt(1-rho*rho)*b.e[i]
	}
	for i := range b.order {
		b.order[i] = i
	}
	slices.SortFunc(b.order, func(i, j int) int { return cmp.Compare(z2[i], z2[j]) })
	slices.Sort(b.u2)
	b.pending = b.pending[:k]
	for i := range k {
		b.pending[i][0] = max(1, int64(math.Round(c.Input.Quantile(b.u1[i]))))
	}
	for rank, i := range b.order {
		b.pending[i][1] = max(1, int64(math.Round(c.Output.Quantile(b.u2[rank]))))
	}
}

// decorrelate standardizes z and e (mean 0, mean square 1) and removes from
// e its sample correlation with z, so that rho·z + sqrt(1−rho²)·e correlates
// with z at exactly rho in the sample.
func decorrelate(z, e []float64) {
	standardize(z)
	standardize(e)
	r := floats.Dot(z, e) / float64(len(z))
	if s := math.Sqrt(1 - r*r); s > 1e-9 {
		for i := range e {
			e[i] = (e[i] - r*z[i]) / s
		}
	}
}

// standardize shifts and scales x to mean 0 and mean square 1.
func standardize(x []float64) {
	m := 0.0
	for _, v := range x {
		m += v
	}
	m /= float64(len(x))
	ss := 0.0
	for i := range x {
		x[i] -= m
		ss += x[i] * x[i]
	}
	if s := math.Sqrt(ss / float64(len(x))); s > 0 {
		for i := range x {
			x[i] /= s
		}
	}
}
