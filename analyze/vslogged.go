package analyze

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// VsLoggedAuto asks for the source trace named in run.json's workload.
const VsLoggedAuto = "auto"

// VsLogged puts a replayed incident beside what the source trace logged
// for the same requests (joined by request id): the same window, the same
// requests, two measurements.
type VsLogged struct {
	Source string `json:"source"`
	// Replayed counts successful replayed requests; Paired those whose
	// source row logged the metric.
	Replayed int                       `json:"replayed_ok"`
	Metrics  map[string]VsLoggedMetric `json:"metrics"`
	Note     string                    `json:"note"`
}

// VsLoggedMetric compares one metric on the paired requests.
type VsLoggedMetric struct {
	Paired   int          `json:"paired"`
	Logged   Distribution `json:"logged"`
	Replayed Distribution `json:"replayed"`
	// RatioP50 and RatioP99 are replayed / logged.
	RatioP50 float64 `json:"ratio_p50"`
	RatioP99 float64 `json:"ratio_p99"`
	// MedianDiffMs is the median of replayed − logged per request.
	MedianDiffMs float64 `json:"median_paired_diff_ms"`
	// Spearman is the rank correlation of the paired values: whether the
	// replay reproduces which requests were slow, not only how many.
	Spearman float64 `json:"spearman"`
}

// vsLogged joins the run's results with the source trace's logged TTFT and
// E2E.
func vsLogged(c *resultColumns, source string, opts Options) (*VsLogged, error) {
	if _, err := os.Stat(source); err != nil {
		return nil, opterr.New("VsLogged", source, "the source trace cannot be read (%v): give its path", err)
	}
	type logged struct{ ttft, e2e *float64 }
	// Only the run's own requests are kept from the trace, which may be
	// far longer than the run (a slice of it replayed).
	byID := map[string]logged{}
	for i := range c.n {
		byID[c.requestID[i]] = logged{}
	}
	b, err := trace.OpenBucket(source)
	if err != nil {
		return nil, fmt.Errorf("logged latencies: %w", err)
	}
	err = b.Scan(context.Background(), func(r *trace.Request) error {
		if _, ours := byID[r.RequestID]; ours && (r.TTFTMs != nil || r.E2EMs != nil) {
			byID[r.RequestID] = logged{r.TTFTMs, r.E2EMs}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("logged latencies: read %s: %w", source, err)
	}
	v := &VsLogged{Source: source, Metrics: map[string]VsLoggedMetric{},
		Note: "logged latencies were measured where the source logged them (a gateway, a server log), replayed ones at this client: compare shapes and ratios, not single milliseconds"}
	pairs := map[string][2][]float64{}
	for i := range c.n {
		if c.warmup[i] || c.outcome[i] != trace.OutcomeOK || c.sent[i] == null || c.done[i] == null {
			continue
		}
		v.Replayed++
		l := byID[c.requestID[i]]
		if l.ttft == nil && l.e2e == nil {
			continue
		}
		sent := c.sent[i]
		ft := c.firstToken[i]
		if opts.TTFTMode == TTFTFirstChunk {
			ft = c.firstChunk[i]
		}
		if l.ttft != nil && ft != null {
			p := pairs["ttft_ms"]
			pairs["ttft_ms"] = [2][]float64{append(p[0], *l.ttft), append(p[1], nsToMs(ft-sent))}
		}
		if l.e2e != nil {
			p := pairs["e2e_ms"]
			pairs["e2e_ms"] = [2][]float64{append(p[0], *l.e2e), append(p[1], nsToMs(c.done[i]-sent))}
		}
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("logged latencies: none of the %d replayed requests has a logged ttft_ms or e2e_ms in %s (joined by request_id)", v.Replayed, source)
	}
	for name, p := range pairs {
		lg, rp := p[0], p[1]
		m := VsLoggedMetric{Paired: len(lg), Spearman: rank.Spearman(lg, rp)}
		diffs := make([]float64, len(lg))
		for i := range lg {
			diffs[i] = rp[i] - lg[i]
		}
		slices.Sort(diffs)
		m.MedianDiffMs = Percentile(diffs, 0.5)
		m.Logged = Summarize(slices.Clone(lg), opts.Percentiles)
		m.Replayed = Summarize(slices.Clone(rp), opts.Percentiles)
		if l50 := m.Logged.Median; l50 > 0 {
			m.RatioP50 = m.Replayed.Median / l50
		}
		if l99 := p99(m.Logged); l99 > 0 {
			m.RatioP99 = p99(m.Replayed) / l99
		}
		v.Metrics[name] = m
	}
	return v, nil
}
