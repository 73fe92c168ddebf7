package sim

// specAlpha returns the probability α that a draft token is accepted given
// that the drafts before it were, such that SpecTokens k drafts per step,
// accepted up to the first rejection, give an acceptance rate
// (accepted ÷ drafted, vLLM's spec_decode counters) of p in expectation:
// E[accepted] = α + α² + … + αᵏ = k·p. That sum rises with α from 0 to k,
// so it is found by bisection. SpecAcceptance is the rate a server reports
// rather than α, so that a simulator set to 0.7 shows 0.7 in its metrics.
func specAlpha(p float64, k int) float64 {
	if k <= 0 || p <= 0 {
		return 0
	}
	if p >= 1 {
		return 1
	}
	expected := func(a float64) float64 {
		sum, pow := 0.0, 1.0
		for range k {
			pow *= a
			sum += pow
		}
		return sum
	}
	lo, hi := 0.0, 1.0
	for range 100 {
		mid := (lo + hi) / 2
		if expected(mid) < float64(k)*p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}
