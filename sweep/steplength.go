package sweep

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// An automatic step (StepDuration 0) lasts long enough for its verdict to
// mean something: for the requests a pass needs to arrive twice over at
// the level's rate (a pass needs every one of them good; twice leaves
// room for failures and for the quarters the steadiness check compares),
// for the slowest requests the configuration's steps have met to complete
// many times, and never less than minAutoStep, so a queue above capacity
// has time to show its growth.
const (
	minAutoStep    = 10 * time.Second
	autoPassFactor = 2
	slowE2EFactor  = 10
	// maxPassSample caps the requests a pass needs, for attainments so
	// near 1 that no sample can show them.
	maxPassSample = 100_000
)

// stepLength is the measured time of step n: StepDuration, or the
// automatic length and why.
func (s *sweeper) stepLength(n next) (time.Duration, string) {
	if s.o.StepDuration > 0 {
		return s.o.StepDuration, ""
	}
	d := minAutoStep
	parts := []string{fmt.Sprintf("at least %s", minAutoStep)}
	need := passSample(s.o.Attainment, s.o.Confidence)
	if rate, measured := s.levelRate(n); rate > 0 {
		t := time.Duration(float64(autoPassFactor*need) / rate * float64(time.Second))
		at := ""
		if measured > 0 {
			at = fmt.Sprintf(" (measured at %s in flight)", fmtLevel(measured))
		}
		parts = append(parts, fmt.Sprintf("%d requests at %.4g req/s%s, %d times the %d a pass needs at %.4g%% attainment (%s)",
			autoPassFactor*need, rate, at, autoPassFactor, need, 100*s.o.Attainment, t.Round(100*time.Millisecond)))
		d = max(d, t)
	}
	if e2e := s.slowestE2E(n.Config); e2e > 0 {
		t := time.Duration(slowE2EFactor * e2e * float64(time.Millisecond))
		parts = append(parts, fmt.Sprintf("%d times the slowest E2E p99 of this configuration's steps so far, %.0f ms (%s)", slowE2EFactor, e2e, t.Round(100*time.Millisecond)))
		d = max(d, t)
	}
	return d.Round(time.Second), "automatic: " + strings.Join(parts, "; ")
}

// passSample is the fewest requests, all meeting the SLO, whose exact
// two-sided interval at confidence lies at or above attainment: a level
// of fewer cannot pass.
func passSample(attainment, confidence float64) int {
	if attainment >= 1 {
		return maxPassSample
	}
	n := math.Ceil(math.Log((1-confidence)/2) / math.Log(attainment))
	return int(min(max(n, 1), maxPassSample))
}

// levelRate is the request rate of step n: its level in rate mode, the
// workload's mean rate times the speed in speed mode. In closed loop it
// is the highest rate the configuration's done steps counted at n's
// level or below (measured, the level it was measured at), a lower bound
// on n's as long as more in flight serve no fewer; 0 when none ran.
func (s *sweeper) levelRate(n next) (rate, measured float64) {
	switch s.o.Mode {
	case ModeRate:
		return n.Level, 0
	case ModeSpeed:
		m, err := trace.ReadManifest(s.config(n.Config).Workload)
		if err != nil || !m.End.After(m.Start) || m.Rows < 2 {
			return 0, 0
		}
		return float64(m.Rows-1) / m.End.Sub(m.Start).Seconds() * n.Level, 0
	}
	for _, st := range doneSteps(s.rec.Steps) {
		if st.Config != n.Config || st.Level > n.Level || st.Purpose == "recovery" || !(st.DurationS > 0) {
			continue
		}
		if r := float64(st.Counted) / st.DurationS; r > rate {
			rate, measured = r, st.Level
		}
	}
	return rate, measured
}

// shortStepNotes say, before the sweep starts, where its steps are too
// short to pass: a step of fewer requests than a pass needs (passSample)
// cannot pass however good the server, and a level whose runs pooled hold
// fewer ends undecided or failed, telling nothing of the limit. Automatic
// steps are sized to pass, but a closed-loop level's rate is unknown
// until a step has run.
func (s *sweeper) shortStepNotes() []string {
	o := s.o
	need := passSample(o.Attainment, o.Confidence)
	target := fmt.Sprintf("(%.4g%% attainment at %.4g%% confidence)", 100*o.Attainment, 100*o.Confidence)
	if o.StepDuration == 0 {
		if o.Mode == ModeConcurrency {
			return []string{fmt.Sprintf("in closed loop a level's rate is known only once measured: the first step lasts %s and passes only if it counts at least %d requests %s; its extensions and the levels above are sized from the throughput measured", minAutoStep, need, target)}
		}
		return nil
	}
	secs := o.StepDuration.Seconds()
	switch {
	case o.Mode == ModeConcurrency:
		return []string{fmt.Sprintf("in closed loop a level's rate is known only once measured: a %s step passes only if it counts at least %d requests (%.4g req/s) %s", o.StepDuration, need, float64(need)/secs, target)}
	case o.Search != nil:
		if floor := float64(need) / secs; o.Search.Min < floor {
			return []string{fmt.Sprintf("below %.4g req/s a %s step sends fewer than the %d requests a pass needs %s: a level searched there passes only pooled over its extensions, and below %.4g req/s (its %d runs pooled) it cannot pass", floor, o.StepDuration, need, target, floor/float64(o.mostRuns()), o.mostRuns())}
		}
		return nil
	}
	var notes []string
	for _, c := range o.Configs {
		for _, lv := range o.Levels {
			rate, _ := s.levelRate(next{Config: c.Name, Level: lv})
			if rate <= 0 {
				continue
			}
			at := fmt.Sprintf("at %s %s", fmtLevel(lv), unit(o.Mode))
			if len(o.Configs) > 1 {
				at = fmt.Sprintf("for %s %s", c.Name, at)
			}
			sent := int(math.Round(rate * secs))
			pooled := sent * o.mostRuns()
			switch {
			case sent >= need:
			case pooled < need:
				alone := time.Duration(math.Ceil(float64(need)/rate)) * time.Second
				notes = append(notes, fmt.Sprintf("%s a %s step sends about %d requests, %d over its %d runs pooled, fewer than the %d a pass needs %s: it cannot pass; a step of at least %s could pass alone",
					at, o.StepDuration, sent, pooled, o.mostRuns(), need, target, alone))
			default:
				notes = append(notes, fmt.Sprintf("%s a %s step sends about %d requests, fewer than the %d a pass needs %s: it can pass only pooled over its extensions",
					at, o.StepDuration, sent, need, target))
			}
		}
	}
	return notes
}

// slowestE2E is the largest E2E p99 (ms) of a configuration's done steps.
func (s *sweeper) slowestE2E(config string) float64 {
	var out float64
	for _, st := range doneSteps(s.rec.Steps) {
		if st.Config == config {
			out = max(out, st.E2EP99Ms)
		}
	}
	return out
}
