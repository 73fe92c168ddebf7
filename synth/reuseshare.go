package synth

// fillCounts counts requests with prefix blocks, and those that reused, by
// fill bin (quarter octaves of the distinct blocks used before the
// request).
type fillCounts struct {
	n, hits [fillBins]int64
}

func (c *fillCounts) add(fill int, hit bool) {
	c.n[fill]++
	if hit {
		c.hits[fill]++
	}
}

// minFillRequests is the fewest requests a fill bin is merged up to: the
// first few requests of a trace decide how many shared prefixes it has
// (the first ten of a chat trace opened its four system prompts), and
// merged over 30 requests the generator opened seven.
const minFillRequests = 10

// bins merges the fill bins upwards until each holds minFillRequests
// requests (a short remainder, and the empty bins above, join the last)
// and returns them with their reuse shares: the first requests spread over
// many nearly empty bins.
func (c *fillCounts) bins() []FillBin {
	var out []FillBin
	var n, hits int64
	for k := range fillBins {
		n, hits = n+c.n[k], hits+c.hits[k]
		if n >= minFillRequests {
			out = append(out, FillBin{FillHigh: fillHigh(k), Share: float64(hits) / float64(n), N: n})
			n, hits = 0, 0
		}
	}
	switch l := len(out); {
	case l == 0 && n > 0:
		out = append(out, FillBin{Share: float64(hits) / float64(n), N: n})
	case l == 0:
		return nil
	case n > 0:
		last := &out[l-1]
		last.Share = (last.Share*float64(last.N) + float64(hits)) / float64(last.N+n)
		last.N += n
	}
	out[len(out)-1].FillHigh = fillHigh(fillBins - 1)
	return out
}
