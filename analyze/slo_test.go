package analyze

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestGoodputOnHandCheckedRows(t *testing.T) {
	// handRows: a (TTFT 10 ms, TPOT 20 ms, E2E 50 ms) and b (TTFT 30 ms, one
	// token so no TPOT, E2E 40 ms) succeeded; c failed, n was not sent, w is
	// warmup. Four requests are eligible; the span is 1.042 s.
	cases := []struct {
		slo string
		met int
	}{
		{"ttft=20ms", 1},          // a only
		{"tpot=15ms", 1},          // a misses; b has no TPOT, so the objective does not apply
		{"e2e=45ms", 1},           // b only
		{"ttft=40ms,e2e=60ms", 2}, // both
		{"ttft=5ms", 0},           // neither
	}
	for _, c := range cases {
		slo, err := ParseSLO(c.slo)
		if err != nil {
			t.Fatal(err)
		}
		rep := &Report{Metrics: map[string]Distribution{}}
		compute(rep, columnsOf(handRows()), Options{TTFTMode: TTFTFirstContent, Percentiles: []float64{50}, SLO: slo})
		g := rep.Goodput
		if g == nil || g.Eligible != 4 || g.Met != c.met || g.ErrorBudgetUsed != 4-c.met {
			t.Fatalf("%s: goodput %+v, want %d of 4 met", c.slo, g, c.met)
		}
		if want := float64(c.met) / 1.042; math.Abs(g.RequestsPerS-want) > 1e-9 {
			t.Errorf("%s: %v req/s, want %v", c.slo, g.RequestsPerS, want)
		}
	}
	// Exact Poisson limits for one event: [0.0253, 5.5716] (standard tables).
	ci := poissonRateCI(1, 1)
	if math.Abs(ci[0]-0.0253) > 1e-4 || math.Abs(ci[1]-5.5716) > 1e-4 {
		t.Errorf("Poisson interval for k=1: %v, want [0.0253, 5.5716]", ci)
	}
	if ci := poissonRateCI(0, 2); ci[0] != 0 || math.Abs(ci[1]-3.6889/2) > 1e-4 {
		t.Errorf("Poisson interval for k=0 over 2 s: %v, want [0, 1.8444]", ci)
	}
}

func TestParseSLOErrors(t *testing.T) {
	for _, bad := range []string{"ttft", "ttft=fast", "latency=1s", "e2e=-1s"} {
		if _, err := ParseSLO(bad); err == nil || !strings.Contains(err.Error(), "ttft, tpot or e2e") && !strings.Contains(err.Error(), "name=duration") {
			t.Errorf("ParseSLO(%q): %v", bad, err)
		}
	}
	if s, err := ParseSLO("TTFT=800ms, tpot=50ms"); err != nil || s.TTFT != 800*time.Millisecond || s.TPOT != 50*time.Millisecond {
		t.Errorf("ParseSLO: %+v, %v", s, err)
	}
}
