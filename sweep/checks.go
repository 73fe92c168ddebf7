package sweep

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

// ColdStart is a step's warmup, kept apart from the measured part: a
// server's first seconds at a new load (a cold prefix cache, a batch
// still filling) are not its steady state.
type ColdStart struct {
	Requests  int     `json:"requests"`
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
}

// coldStart summarises the warmup rows of a step's run.
func coldStart(runDir string) (*ColdStart, error) {
	rows, err := trace.ReadResults(runDir)
	if err != nil {
		return nil, err
	}
	var ttft []float64
	n := 0
	for _, r := range rows {
		if !r.Warmup {
			continue
		}
		n++
		if r.Outcome == trace.OutcomeOK && r.SentNs != nil && r.FirstTokenNs != nil {
			ttft = append(ttft, float64(*r.FirstTokenNs-*r.SentNs)/1e6)
		}
	}
	if n == 0 {
		return nil, nil
	}
	c := &ColdStart{Requests: n}
	if len(ttft) > 0 {
		slices.Sort(ttft)
		c.TTFTP50Ms, c.TTFTP99Ms = analyze.Percentile(ttft, 0.5), analyze.Percentile(ttft, 0.99)
	}
	return c, nil
}

// identity is what a fairness check compares of a server between the
// steps of one configuration.
func identity(s *trace.ServerIdentity) string {
	if s == nil {
		return trace.NotRecorded
	}
	return fmt.Sprintf("engine %s, version %s, model %s, context %d", s.Engine, s.Version, s.Model, s.ContextTokens)
}

// identityChange says how a step's server differs from the one the
// configuration's first step met, or "" when it does not.
func (s *sweeper) identityChange(rec *Step, info *trace.RunInfo) string {
	for _, st := range s.rec.Steps {
		if st.Config != rec.Config || st.Status != "done" || st.Index == rec.Index {
			continue
		}
		first, err := trace.ReadRunInfo(filepath.Join(s.dir, st.RunDir))
		if err != nil {
			return ""
		}
		if a, b := identity(first.Server), identity(info.Server); a != b {
			return fmt.Sprintf("the server changed since step %d: it said %s, now %s; steps of one configuration must meet one server", st.Index, a, b)
		}
		return ""
	}
	return ""
}

// gaugeMedians are the median waiting requests and KV usage over a run's
// windows, where scraped (negative when not).
func gaugeMedians(ser *analyze.Series) (waiting, kv float64) {
	var w, k []float64
	if ser != nil {
		for _, win := range ser.Windows {
			if win.Waiting != nil {
				w = append(w, *win.Waiting)
			}
			if win.KVUsage != nil {
				k = append(k, *win.KVUsage)
			}
		}
	}
	med := func(x []float64) float64 {
		if len(x) == 0 {
			return -1
		}
		slices.Sort(x)
		return analyze.Percentile(x, 0.5)
	}
	return med(w), med(k)
}
