package analyze

import (
	"fmt"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// SLO holds latency objectives; a zero field is not an objective.
type SLO struct {
	TTFT time.Duration `json:"ttft,omitempty"`
	TPOT time.Duration `json:"tpot,omitempty"`
	E2E  time.Duration `json:"e2e,omitempty"`
}

// Empty reports whether no objective is set.
func (s SLO) Empty() bool { return s.TTFT == 0 && s.TPOT == 0 && s.E2E == 0 }

// String names the objectives: "TTFT <= 800ms, TPOT <= 50ms".
func (s SLO) String() string { return sloText(s) }

// ParseSLO reads objectives written as "ttft=800ms,tpot=50ms,e2e=10s".
func ParseSLO(v string) (SLO, error) {
	var s SLO
	if strings.TrimSpace(v) == "" {
		return s, nil
	}
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if !ok || err != nil || d <= 0 {
			return s, fmt.Errorf("%q: want name=duration pairs such as ttft=800ms,tpot=50ms,e2e=10s", part)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "ttft":
			s.TTFT = d
		case "tpot":
			s.TPOT = d
		case "e2e":
			s.E2E = d
		default:
			return s, fmt.Errorf("unknown objective %q; use ttft, tpot or e2e", k)
		}
	}
	return s, nil
}

// Goodput is the rate of requests that succeeded and met every objective.
type Goodput struct {
	SLO SLO `json:"slo"`
	// Eligible requests are the counted ones (warmup excluded); Met of them
	// succeeded and met every objective; ErrorBudgetUsed = Eligible − Met.
	Eligible        int     `json:"eligible"`
	Met             int     `json:"met"`
	ErrorBudgetUsed int     `json:"error_budget_used"`
	MetShare        float64 `json:"met_share"`
	// RequestsPerS is Met over the measured span, with an exact Poisson 95%
	// interval on the count.
	RequestsPerS float64    `json:"requests_per_s"`
	CI95         [2]float64 `json:"ci95"`
}

// meets reports whether an ok request with these latencies meets s; a
// request without a TTFT (not streamed) cannot meet a TTFT objective.
func (s SLO) meets(ttftMs, tpotMs, e2eMs float64, hasTTFT, hasTPOT bool) bool {
	if s.TTFT > 0 && (!hasTTFT || ttftMs > ms(s.TTFT)) {
		return false
	}
	if s.TPOT > 0 && hasTPOT && tpotMs > ms(s.TPOT) {
		return false
	}
	return s.E2E == 0 || e2eMs <= ms(s.E2E)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// poissonRateCI is the exact 95% interval for a rate with k events in span
// seconds (chi-square limits).
// BinomialCI is the exact (Clopper–Pearson) two-sided interval of a share
// from k successes in n trials at confidence conf: it never covers less
// than conf, which a pass/fail decision on it needs.
func BinomialCI(k, n int, conf float64) [2]float64 {
	if n <= 0 || k < 0 || k > n {
		return [2]float64{0, 1}
	}
	a := (1 - conf) / 2
	lo, hi := 0.0, 1.0
	if k > 0 {
		lo = distuv.Beta{Alpha: float64(k), Beta: float64(n - k + 1)}.Quantile(a)
	}
	if k < n {
		hi = distuv.Beta{Alpha: float64(k + 1), Beta: float64(n - k)}.Quantile(1 - a)
	}
	return [2]float64{lo, hi}
}

func poissonRateCI(k int, span float64) [2]float64 {
	if span <= 0 {
		return [2]float64{}
	}
	lo := 0.0
	if k > 0 {
		lo = distuv.ChiSquared{K: float64(2 * k)}.Quantile(0.025) / 2
	}
	hi := distuv.ChiSquared{K: float64(2*k + 2)}.Quantile(0.975) / 2
	return [2]float64{lo / span, hi / span}
}
