package analyze

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// SessionSlowdown is each session's makespan under the run's load over
// its makespan in an unloaded run of the same workload (Options.Baseline),
// with the session, not the request, as the unit.
//
// The rule: sessions are matched by session_id, a session of the run with
// the baseline's session of the same id; a pair counts only where both
// have two or more requests, every one ended ok and none was warmup (the
// makespan rule of Sessions), and its slowdown is the run's makespan
// divided by the baseline's. The reason: a session's makespan mixes its
// own shape (how many calls, how deep the graph, how long its answers and
// tool times) with the load it met; dividing by the same session's time
// alone leaves the load, so a deep graph and a shallow one weigh the same,
// and 1 means the load cost that session nothing. The run's repeats (run
// ids) are each matched against the one baseline: each is a unit.
type SessionSlowdown struct {
	// Baseline is the unloaded run's directory.
	Baseline string `json:"baseline"`
	// Matched counts the sessions complete in both runs, whose slowdown
	// is in Slowdown.
	Matched int `json:"matched"`
	// Slowdown is makespan ÷ the baseline's makespan per matched session,
	// percentiles with order-statistic intervals.
	Slowdown Distribution `json:"slowdown"`
	// OnlyInRun counts the run's sessions of two or more requests that
	// the baseline lacks; OnlyInBaseline the baseline's the run lacks.
	OnlyInRun      int `json:"only_in_run"`
	OnlyInBaseline int `json:"only_in_baseline"`
	// Incomplete counts the sessions in both with a request not ok or
	// warmup on either side (or a baseline makespan of zero).
	Incomplete int `json:"incomplete"`
	// Truncated: either side had more sessions than maxSessions; the
	// rest were not read, and the counts apart are no longer exact.
	Truncated bool `json:"truncated,omitempty"`
}

// checkBaseline refuses a baseline that is not a servetrace run directory,
// before any run is read.
func checkBaseline(dir string) error {
	if dir == "" || isRunDir(dir) {
		return nil
	}
	return opterr.New("Baseline", dir, "not a servetrace run directory (no %s in it): give the directory replay wrote for an unloaded run of the same workload (e.g. replayed slowly enough that its sessions do not overlap)", trace.RunInfoName)
}

// sessionSlowdown reads the baseline's sessions and matches the run's
// (its tally) against them.
func sessionSlowdown(run *sessionTally, baseline string, percentiles []float64) (*SessionSlowdown, error) {
	base := newSessionTally()
	if err := forEachResultBatch([]string{baseline}, sessionColumns, base.add); err != nil {
		return nil, opterr.New("Baseline", baseline, "%v", err)
	}
	baseRuns := sessionRunIDs(base)
	if len(baseRuns) > 1 {
		return nil, opterr.New("Baseline", baseline, "holds %d runs (%s): give one unloaded run's directory", len(baseRuns), strings.Join(baseRuns, ", "))
	}
	out, err := matchSessions(run, base, percentiles)
	if err != nil {
		return nil, opterr.New("Baseline", baseline, "%v", err)
	}
	out.Baseline = baseline
	return out, nil
}

// otherWorkload is a note where run.json says the baseline replayed
// another workload than a run did: sessions of one id may then be other
// work.
func otherWorkload(runDirs []string, baseline string) string {
	b, err := trace.ReadRunInfo(baseline)
	if err != nil || b.WorkloadSHA256 == "" {
		return ""
	}
	for _, dir := range runDirs {
		if r, err := trace.ReadRunInfo(dir); err == nil && r.WorkloadSHA256 != "" && r.WorkloadSHA256 != b.WorkloadSHA256 {
			return fmt.Sprintf("the baseline %s replayed another workload than %s (sha256 %s vs %s): sessions of one id may be other work, and their slowdown no slowdown; replay the run's own workload unloaded",
				baseline, dir, short([]string{b.WorkloadSHA256})[0], short([]string{r.WorkloadSHA256})[0])
		}
	}
	return ""
}

// matchSessions pairs the run's sessions with the baseline's one run's by
// session id; an error where no pair is complete in both.
func matchSessions(run, base *sessionTally, percentiles []float64) (*SessionSlowdown, error) {
	out := &SessionSlowdown{Truncated: run.truncated || base.truncated}
	baseRuns, runRuns := sessionRunIDs(base), sessionRunIDs(run)
	if len(runRuns) == 0 {
		return nil, fmt.Errorf("the run analyzed has no sessions (session_id) of two or more requests, so there is no makespan to slow down: analyze it without a baseline, or replay a workload with sessions")
	}
	if len(baseRuns) == 0 {
		return nil, fmt.Errorf("it has no sessions (session_id) of two or more requests: give an unloaded run of the same workload")
	}
	baseRun, _ := base.runs.find(baseRuns[0])
	var slowdowns []float64
	for key, s := range run.spans {
		if s.requests < 2 {
			continue
		}
		b, ok := base.spans[sessionKey{run: uint32(baseRun), id: key.id}]
		switch {
		case !ok || b.requests < 2:
			out.OnlyInRun++
		case s.incomplete || b.incomplete || b.last <= b.first:
			out.Incomplete++
		default:
			slowdowns = append(slowdowns, float64(s.last-s.first)/float64(b.last-b.first))
		}
	}
	for key, b := range base.spans {
		if b.requests < 2 {
			continue
		}
		if !slices.ContainsFunc(runRuns, func(r string) bool {
			k, _ := run.runs.find(r)
			s, ok := run.spans[sessionKey{run: uint32(k), id: key.id}]
			return ok && s.requests >= 2
		}) {
			out.OnlyInBaseline++
		}
	}
	out.Matched = len(slowdowns)
	if out.Matched == 0 {
		return nil, fmt.Errorf("no session is complete in both runs (%d of the run's sessions are not in it, %d have a request not ok or warmup on a side): give an unloaded run of the same workload, whose sessions all ended ok", out.OnlyInRun, out.Incomplete)
	}
	out.Slowdown = Summarize(slowdowns, percentiles)
	return out, nil
}

// sessionRunIDs lists the run ids of a tally's sessions of two or more
// requests, sorted.
func sessionRunIDs(t *sessionTally) []string {
	seen := map[string]bool{}
	for key, s := range t.spans {
		if s.requests >= 2 {
			seen[t.runs.names[key.run]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// slowdownText says the sessions' slowdowns in a line, each percentile
// with its order-statistic interval.
func slowdownText(s *SessionSlowdown) string {
	var b strings.Builder
	fmt.Fprintf(&b, "session slowdown against %s (each session's makespan ÷ its makespan there, sessions as the unit): mean %s", s.Baseline, num(s.Slowdown.Mean))
	quantilesText(&b, s.Slowdown)
	fmt.Fprintf(&b, " (n %d)", s.Slowdown.N)
	var apart []string
	for _, c := range []struct {
		n    int
		what string
	}{{s.OnlyInRun, "only in the run"}, {s.OnlyInBaseline, "only in the baseline"}, {s.Incomplete, "with a request not ok or warmup"}} {
		if c.n > 0 {
			apart = append(apart, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(apart) > 0 {
		fmt.Fprintf(&b, "; left out: %s", strings.Join(apart, ", "))
	}
	if s.Truncated {
		fmt.Fprintf(&b, "; only the first %d sessions of a side followed", maxSessions)
	}
	return b.String()
}
