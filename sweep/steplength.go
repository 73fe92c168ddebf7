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
	if rate := s.levelRate(n); rate > 0 {
		t := time.Duration(float64(autoPassFactor*need) / rate * float64(time.Second))
		parts = append(parts, fmt.Sprintf("%d requests at %.4g req/s, %d times the %d a pass needs at %.4g%% attainment (%s)",
			autoPassFactor*need, rate, autoPassFactor, need, 100*s.o.Attainment, t.Round(100*time.Millisecond)))
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
// workload's mean rate times the speed in speed mode, 0 (unknown) in
// closed loop.
func (s *sweeper) levelRate(n next) float64 {
	switch s.o.Mode {
	case ModeRate:
		return n.Level
	case ModeSpeed:
		m, err := trace.ReadManifest(s.config(n.Config).Workload)
		if err != nil || !m.End.After(m.Start) || m.Rows < 2 {
			return 0
		}
		return float64(m.Rows-1) / m.End.Sub(m.Start).Seconds() * n.Level
	}
	return 0
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
