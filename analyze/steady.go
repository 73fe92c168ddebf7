package analyze

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/servetrace/servetrace/internal/rank"
)

// A verdict on a load level presumes its queue held still: above a
// server's capacity the queue grows for as long as the load lasts, so a
// step too short to let it reach the SLO's limit meets the SLO that any
// longer one fails. A step is judged steady only when neither its
// requests' latency nor the engine's waiting requests rose over it.

// Steadiness says whether a step's queue held still over its measured
// part, and the figures that say so.
type Steadiness struct {
	Steady bool `json:"steady"`
	// Reason says why a step is not steady, or why it could not be
	// judged (too few requests: then Steady is true, for want of
	// evidence).
	Reason string `json:"reason,omitempty"`
	// Checks are the latencies followed: TTFT (the queue for admission)
	// and TPOT (the running batch, which is where a continuous-batching
	// server keeps its backlog until the batch is full), or E2E where no
	// request streamed.
	Checks []SteadyCheck `json:"checks,omitempty"`
	// WaitingEarly and WaitingLate are the engine's waiting requests,
	// averaged over the scrapes of the step's second and last quarter,
	// where an engine's metrics were scraped.
	WaitingEarly *float64 `json:"waiting_early,omitempty"`
	WaitingLate  *float64 `json:"waiting_late,omitempty"`
}

// SteadyCheck is one latency's figures over a step: its median over the
// requests sent in the step's second quarter (the first is left to the
// queue's approach to its level: a step starts on an idle server), its
// 10th percentile and median over the last quarter, and whether it rose.
type SteadyCheck struct {
	Metric    string  `json:"metric"`
	N         int     `json:"n"`
	EarlyMs   float64 `json:"early_median_ms"`
	LateP10Ms float64 `json:"late_p10_ms"`
	LateMs    float64 `json:"late_median_ms"`
	Rose      bool    `json:"rose"`
}

// The rules of steadiness. A queue that holds still empties now and then,
// so some of a step's last requests wait little; one that grows keeps
// every late request waiting longer than the typical earlier one. So a
// step is not steady when, for TTFT or TPOT (E2E where nothing streamed),
// the 10th percentile over the last quarter lies above the median over
// the second by the metric's margin: riseMs for TTFT and E2E, and for
// TPOT tpotRiseMs or tpotRiseShare of that median, whichever is more
// (measured against queues of known capacity, docs/measurements.md:
// power 95% for a 5-second step at 1.3 times capacity, no false alarm in
// 300 steps at 0.7 times); or when the engine's waiting requests grew
// from the second quarter to the last by at least waitingRise and
// waitingShare of the step's sends, with a rank correlation with time of
// at least waitingSpearman.
const (
	steadyMinN      = 20
	riseMs          = 50
	tpotRiseMs      = 2
	tpotRiseShare   = 0.25
	waitingRise     = 4
	waitingShare    = 0.05
	waitingSpearman = 0.5
)

// steadiness judges a step from its requests' latencies (at their send
// times, ns) and the engine's scrapes over it.
func steadiness(ttft, tpot, e2e []timedValue, scrapes []scrape) *Steadiness {
	s := &Steadiness{Steady: true}
	type series struct {
		metric string
		vals   []timedValue
		margin func(early float64) float64
	}
	fixed := func(float64) float64 { return riseMs }
	all := []series{{"ttft_ms", ttft, fixed}, {"tpot_ms", tpot, func(early float64) float64 { return max(tpotRiseMs, tpotRiseShare*early) }}}
	if len(ttft) == 0 {
		all = []series{{"e2e_ms", e2e, fixed}}
	}
	var t0, t1 int64 // the span of the sends judged
	for _, se := range all {
		c, lo, hi, why := riseOf(se.metric, se.vals, se.margin)
		if why != "" {
			if s.Reason == "" {
				s.Reason = why
			}
			continue
		}
		s.Checks = append(s.Checks, c)
		if t0 == 0 && t1 == 0 {
			t0, t1 = lo, hi
		}
		if c.Rose && s.Steady {
			s.Steady = false
			s.Reason = fmt.Sprintf("not steady: nine in ten of the last quarter's requests had a %s above %.1f ms, where the second quarter's median was %.1f ms: the queue was still growing, as above capacity, and a longer step would fail",
				c.Metric, c.LateP10Ms, c.EarlyMs)
		}
	}
	if len(s.Checks) == 0 {
		return s
	}
	if s.Steady {
		s.Reason = ""
	}
	frac := func(at int64) float64 { return float64(at-t0) / float64(max(t1-t0, 1)) }
	var wt, wv, wEarly, wLate []float64
	for _, sc := range scrapes {
		if !sc.hasWaiting || sc.atNs < t0 || sc.atNs > t1 {
			continue
		}
		switch f := frac(sc.atNs); {
		case f < 0.25:
			continue
		case f < 0.5:
			wEarly = append(wEarly, sc.waiting)
		case f >= 0.75:
			wLate = append(wLate, sc.waiting)
		}
		wt, wv = append(wt, float64(sc.atNs)), append(wv, sc.waiting)
	}
	if len(wEarly) == 0 || len(wLate) == 0 {
		return s
	}
	s.WaitingEarly, s.WaitingLate = new(mean(wEarly)), new(mean(wLate))
	if grew := *s.WaitingLate - *s.WaitingEarly; s.Steady && grew >= max(waitingRise, waitingShare*float64(s.Checks[0].N)) && rank.Spearman(wt, wv) >= waitingSpearman {
		s.Steady = false
		s.Reason = fmt.Sprintf("not steady: the engine's waiting requests grew from %.1f in the step's second quarter to %.1f in its last: the queue was still growing, as above capacity, and a longer step would fail",
			*s.WaitingEarly, *s.WaitingLate)
	}
	return s
}

// riseOf compares one latency's last quarter with its second, over the
// span of its sends [t0, t1]; why says, instead, why it cannot be judged.
func riseOf(metric string, vals []timedValue, margin func(float64) float64) (c SteadyCheck, t0, t1 int64, why string) {
	c = SteadyCheck{Metric: metric, N: len(vals)}
	if c.N < steadyMinN {
		return c, 0, 0, fmt.Sprintf("%d requests with a %s: too few to judge whether the queue held still", c.N, metric)
	}
	vals = slices.Clone(vals)
	slices.SortStableFunc(vals, func(a, b timedValue) int { return cmp.Compare(a.at, b.at) })
	t0, t1 = vals[0].at, vals[len(vals)-1].at
	var early, late []float64
	for _, x := range vals {
		switch f := float64(x.at-t0) / float64(max(t1-t0, 1)); {
		case f >= 0.25 && f < 0.5:
			early = append(early, x.v)
		case f >= 0.75:
			late = append(late, x.v)
		}
	}
	if len(early) < 5 || len(late) < 5 {
		return c, 0, 0, fmt.Sprintf("fewer than 5 requests with a %s in the second or last quarter of the step (%d, %d): too few to judge whether the queue held still", metric, len(early), len(late))
	}
	slices.Sort(early)
	slices.Sort(late)
	c.EarlyMs, c.LateP10Ms, c.LateMs = Percentile(early, 0.5), Percentile(late, 0.1), Percentile(late, 0.5)
	c.Rose = c.LateP10Ms >= c.EarlyMs+margin(c.EarlyMs)
	return c, t0, t1, ""
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}
