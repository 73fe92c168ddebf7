package analyze

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// EnvelopeOptions controls Envelope.
type EnvelopeOptions struct {
	Options
	// Attainment is the share of requests that must meet the SLO for a step
	// to pass (default 0.99: the SLO holds at p99).
	Attainment float64
	// Confidence is the level of the exact interval of a step's
	// attainment that judges it (default 0.95): pass when it lies at or
	// above Attainment, fail when below, else undecided.
	Confidence float64
}

// Step verdicts: an undecided step's attainment interval straddles the
// target, and it never counts as meeting the SLO.
const (
	StepPass      = "pass"
	StepFail      = "fail"
	StepUndecided = "undecided"
)

// Envelope is a service envelope across a load sweep: per step, what was
// offered, accepted, completed and good, the knee where goodput stops
// growing, and the highest rate that met the SLO.
type Envelope struct {
	SLO        SLO     `json:"slo"`
	Attainment float64 `json:"attainment"`
	// Confidence is the level of the attainment interval that judges a
	// step (each step's attainment_ci).
	Confidence float64 `json:"confidence"`
	// Steps are ordered by offered rate.
	Steps []Step `json:"steps"`
	// Knee is the index of the last step whose goodput grew significantly
	// over the step before (-1 when every step kept growing or there is one
	// step).
	Knee int `json:"knee"`
	// MaxRateMeetingSLO is the highest offered rate that passed below the
	// lowest failing one, the steps of one rate pooled as a sweep pools a
	// level's. MaxRateInterval brackets the limit: [it, hi), hi the lowest
	// failing rate or, if lower, the lowest undecided rate above it
	// ([it, hi] then: the limit may be at hi); hi 0 when neither. An
	// undecided rate below it bounds nothing.
	MaxRateMeetingSLO *float64   `json:"max_rate_meeting_slo,omitempty"`
	MaxRateInterval   [2]float64 `json:"max_rate_interval"`
	// UndecidedRates are the rates whose pooled attainment interval
	// straddles the target: none counts as meeting the SLO.
	UndecidedRates []float64 `json:"undecided_rates,omitempty"`
	// Recovery says whether latency came back after the overload.
	Recovery string   `json:"recovery"`
	Notes    []string `json:"notes,omitempty"`
}

// Step is one load level: a run of a sweep, or one phase of a ramp run.
type Step struct {
	Name string `json:"name"`
	// StartNs orders steps in time within one run (phases).
	StartNs   int64   `json:"-"`
	DurationS float64 `json:"duration_s"`
	// Rates in requests per second. Accepted excludes requests the server
	// refused (HTTP 429 or 503); Completed counts successes; Goodput counts
	// successes that met the SLO. Intervals are exact Poisson.
	OfferedRate   float64    `json:"offered_rps"`
	AcceptedRate  float64    `json:"accepted_rps"`
	CompletedRate float64    `json:"completed_rps"`
	CompletedCI   [2]float64 `json:"completed_ci95"`
	GoodputRate   float64    `json:"goodput_rps"`
	GoodputCI     [2]float64 `json:"goodput_ci95"`
	// Attainment is the share of counted requests meeting the SLO (Good of
	// Counted), with its exact binomial interval at the envelope's
	// confidence, which judges the step, and at 95% (attainment_ci95
	// keeps the meaning it was published with, whatever the confidence).
	Attainment     float64    `json:"attainment"`
	AttainmentCI   [2]float64 `json:"attainment_ci"`
	AttainmentCI95 [2]float64 `json:"attainment_ci95"`
	Good           int        `json:"good"`
	// Verdict is StepPass, StepFail or StepUndecided, by the interval;
	// a step that is not steady fails. MeetsSLO is Verdict == StepPass.
	Verdict  string `json:"verdict"`
	MeetsSLO bool   `json:"meets_slo"`
	// Token throughput of the ok requests over the step: output tokens,
	// and prompt (the server's usage, else what was sent) plus output.
	OutputTokens     int64   `json:"output_tokens"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	TotalTokensPerS  float64 `json:"total_tokens_per_s"`
	// Energy is the step's GPU energy, where a DCGM exporter was scraped.
	Energy  *Energy      `json:"energy,omitempty"`
	TTFT    Distribution `json:"ttft_ms"`
	E2E     Distribution `json:"e2e_ms"`
	Counted int          `json:"counted"`
	// Steadiness says whether the step's queue held still: a step that
	// is not steady never meets the SLO, whatever its attainment.
	Steadiness *Steadiness `json:"steadiness,omitempty"`
}

// FindEnvelope analyses a load sweep: each run (run id) is a step; a single
// run with several phases is split by phase.
func FindEnvelope(runDirs []string, o EnvelopeOptions) (*Envelope, error) {
	if len(runDirs) == 0 {
		return nil, fmt.Errorf("envelope needs the run directories of a sweep, or one run with phases")
	}
	if o.Attainment == 0 {
		o.Attainment = 0.99
	}
	if !(o.Attainment > 0 && o.Attainment < 1) {
		return nil, opterr.New("Attainment", o.Attainment, "use a share in (0, 1), e.g. 0.99: a step is judged by its interval, which never shows an attainment of 1")
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if !(o.Confidence > 0.5 && o.Confidence < 1) {
		return nil, opterr.New("Confidence", o.Confidence, "use a level between 0.5 and 1, e.g. 0.95")
	}
	if o.TTFTMode == "" {
		o.TTFTMode = TTFTFirstContent
	}
	if len(o.Percentiles) == 0 {
		o.Percentiles = []float64{50, 99}
	}
	if err := holdable(runDirs, o.InMemoryRows, "an envelope"); err != nil {
		return nil, err
	}
	l, err := load(runDirs)
	if err != nil {
		return nil, err
	}
	if err := l.needRecords("an envelope"); err != nil {
		return nil, err
	}
	env := &Envelope{SLO: o.SLO, Attainment: o.Attainment, Confidence: o.Confidence, Knee: -1, Notes: l.notes}
	type group struct {
		name    string
		rows    []int32
		offered float64
	}
	var groups []group
	if len(l.runIDs) > 1 {
		for _, id := range l.runIDs {
			g := group{name: id, rows: l.runRows[id]}
			for i, r := range l.runs {
				if r.RunID == id && l.runs[i].OfferedRate > 0 {
					g.offered = l.runs[i].OfferedRate
				}
			}
			groups = append(groups, g)
		}
	} else {
		byPhase := map[string][]int32{}
		var order []string
		for i := range l.cols.n {
			ph := l.cols.phase[i]
			if ph == "" || ph == "warmup" || ph == otherValue { // pooled past the bounds: no load level
				continue
			}
			if _, ok := byPhase[ph]; !ok {
				order = append(order, ph)
			}
			byPhase[ph] = append(byPhase[ph], int32(i))
		}
		if len(order) < 2 {
			return nil, fmt.Errorf("%s is one run without phases: give the run directories of a sweep (one per rate), or a ramp run whose workload has a phase column", runDirs[0])
		}
		for _, ph := range order {
			groups = append(groups, group{name: ph, rows: byPhase[ph]})
		}
	}
	for _, g := range groups {
		dirs := l.dirs
		if len(l.runIDs) > 1 {
			dirs = runDirsOf(l, g.name)
		}
		scrapes, _ := readScrapes(dirs) // gauges are optional: a step without them is judged by its latencies
		st := step(l.cols, g.name, g.rows, g.offered, o, scrapes)
		if len(l.runIDs) > 1 {
			st.Energy = energyOf(scrapes, st.OutputTokens)
		}
		env.Steps = append(env.Steps, st)
	}
	timeOrder := slices.Clone(env.Steps)
	slices.SortStableFunc(env.Steps, func(a, b Step) int { return cmp.Compare(a.OfferedRate, b.OfferedRate) })
	env.findKnee()
	env.findMaxRate()
	env.Recovery = recoveryOf(timeOrder, l, runDirs)
	return env, nil
}

// MeasureStep summarises run directories as one load level, pooled: the
// repeats of a sweep step, judged together.
func MeasureStep(runDirs []string, o EnvelopeOptions) (Step, error) {
	if o.Attainment == 0 {
		o.Attainment = 0.99
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if o.TTFTMode == "" {
		o.TTFTMode = TTFTFirstContent
	}
	if len(o.Percentiles) == 0 {
		o.Percentiles = []float64{50, 99}
	}
	if err := holdable(runDirs, o.InMemoryRows, "a step"); err != nil {
		return Step{}, err
	}
	l, err := load(runDirs)
	if err != nil {
		return Step{}, err
	}
	if err := l.needRecords("a step"); err != nil {
		return Step{}, err
	}
	rows := make([]int32, l.cols.n)
	for i := range rows {
		rows[i] = int32(i)
	}
	var offered float64
	for _, r := range l.runs {
		offered = max(offered, r.OfferedRate)
	}
	scrapes, err := readScrapes(l.dirs)
	st := step(l.cols, strings.Join(l.runIDs, "+"), rows, offered, o, scrapes)
	if err == nil {
		st.Energy = energyOf(scrapes, st.OutputTokens)
	}
	return st, nil
}

// runDirsOf lists the directories of one run id of a sweep.
func runDirsOf(l *loaded, runID string) []string {
	var dirs []string
	for _, r := range l.runs {
		if r.RunID == runID && r.Dir != "" {
			dirs = append(dirs, r.Dir)
		}
	}
	return dirs
}

// step summarises one load level; scrapes are its engine's, if scraped.
func step(c *resultColumns, name string, rows []int32, offered float64, o EnvelopeOptions, scrapes []scrape) Step {
	x := extractRows(c, o.Options, rows)
	s := Step{Name: name, Counted: x.counts.Counted}
	var first, last int64 = math.MaxInt64, math.MinInt64
	accepted := 0
	var outTok, promptTok int64
	for _, i := range rows {
		if c.warmup[i] {
			continue
		}
		if c.outcome[i] == trace.OutcomeOK {
			outTok += c.observedOut[i]
			if c.usagePrompt[i] != null {
				promptTok += c.usagePrompt[i]
			} else {
				promptTok += c.promptSent[i]
			}
		}
		first = min(first, c.scheduled[i])
		last = max(last, c.scheduled[i])
		if c.done[i] != null {
			last = max(last, c.done[i])
		}
		if c.sent[i] != null && c.status[i] != 429 && c.status[i] != 503 {
			accepted++
		}
	}
	s.StartNs = first
	if last <= first {
		return s
	}
	span := float64(last-first) / 1e9
	s.DurationS = span
	ok := x.counts.Outcomes[trace.OutcomeOK]
	if offered <= 0 {
		offered = float64(x.counts.Counted) / span
	}
	good := ok
	if !o.SLO.Empty() {
		good = x.met
	}
	s.OfferedRate, s.AcceptedRate = offered, float64(accepted)/span
	s.CompletedRate, s.CompletedCI = float64(ok)/span, poissonRateCI(ok, span)
	s.GoodputRate, s.GoodputCI = float64(good)/span, poissonRateCI(good, span)
	s.Good = good
	s.OutputTokens = outTok
	s.OutputTokensPerS, s.TotalTokensPerS = float64(outTok)/span, float64(outTok+promptTok)/span
	s.AttainmentCI = BinomialCI(good, x.counts.Counted, o.Confidence)
	s.AttainmentCI95 = BinomialCI(good, x.counts.Counted, 0.95)
	if x.counts.Counted > 0 {
		s.Attainment = float64(good) / float64(x.counts.Counted)
	}
	s.Steadiness = steadiness(x.timed["ttft_ms"], x.timed["tpot_ms"], x.timed["e2e_ms"], scrapes)
	switch {
	case !s.Steadiness.Steady || s.AttainmentCI[1] < o.Attainment:
		s.Verdict = StepFail
	case s.AttainmentCI[0] >= o.Attainment && x.counts.Counted > 0:
		s.Verdict = StepPass
	default:
		s.Verdict = StepUndecided
	}
	s.MeetsSLO = s.Verdict == StepPass
	s.TTFT = Summarize(x.values("ttft_ms"), o.Percentiles)
	s.E2E = Summarize(x.values("e2e_ms"), o.Percentiles)
	return s
}

// findKnee sets the last step whose goodput grew significantly: the next
// higher offered rate's goodput does not exceed it beyond its own interval.
// Steps repeating a rate count as one level (the better of them).
func (e *Envelope) findKnee() {
	best := 0
	for k := 1; k < len(e.Steps); k++ {
		s, b := e.Steps[k], e.Steps[best]
		switch {
		case s.OfferedRate == b.OfferedRate:
			if s.GoodputRate > b.GoodputRate {
				best = k
			}
		case s.GoodputCI[0] > b.GoodputRate:
			best = k
		default:
			e.Knee = best
			return
		}
	}
}

// rateLevel is the steps of one offered rate pooled, as a sweep pools a
// level's: not steady in any of them fails it, else its pooled interval
// judges it.
type rateLevel struct {
	rate        float64
	steps       []string
	good, count int
	ci          [2]float64
	verdict     string
}

// rateLevels pools the steps (ordered by offered rate) rate by rate.
func (e *Envelope) rateLevels() []rateLevel {
	var out []rateLevel
	notSteady := map[float64]bool{}
	for _, s := range e.Steps {
		if len(out) == 0 || out[len(out)-1].rate != s.OfferedRate {
			out = append(out, rateLevel{rate: s.OfferedRate})
		}
		l := &out[len(out)-1]
		l.steps, l.good, l.count = append(l.steps, s.Name), l.good+s.Good, l.count+s.Counted
		if st := s.Steadiness; st != nil && !st.Steady {
			notSteady[s.OfferedRate] = true
		}
	}
	for i := range out {
		l := &out[i]
		l.ci = BinomialCI(l.good, l.count, e.Confidence)
		switch {
		case notSteady[l.rate] || l.ci[1] < e.Attainment:
			l.verdict = StepFail
		case l.ci[0] >= e.Attainment && l.count > 0:
			l.verdict = StepPass
		default:
			l.verdict = StepUndecided
		}
	}
	return out
}

// findMaxRate brackets the limit over the rates (rateLevels) as a sweep
// brackets it over its levels: lo the highest rate that passed below the
// lowest failing one, hi that failing rate or, if lower, the lowest
// undecided rate above lo. An undecided rate is never counted as meeting
// the SLO; one below lo bounds nothing (a short step at a low rate cannot
// hold the requests a pass needs).
func (e *Envelope) findMaxRate() {
	levels := e.rateLevels()
	var lo, hi, failed float64
	for _, l := range levels {
		if l.verdict == StepFail {
			failed = l.rate
			break
		}
	}
	hi = failed
	for _, l := range levels {
		if l.verdict == StepPass && (failed == 0 || l.rate < failed) {
			lo = l.rate
		}
	}
	var undecided []string
	for _, l := range levels {
		if l.verdict != StepUndecided {
			continue
		}
		e.UndecidedRates = append(e.UndecidedRates, l.rate)
		undecided = append(undecided, fmt.Sprintf("%.2f", l.rate))
		if l.rate > lo && (hi == 0 || l.rate < hi) {
			hi = l.rate
		}
	}
	for _, s := range e.Steps {
		if st := s.Steadiness; st != nil && !st.Steady {
			e.Notes = append(e.Notes, fmt.Sprintf("step %s (%.2f req/s) fails: %s", s.Name, s.OfferedRate, st.Reason))
		}
	}
	for _, l := range levels {
		if l.verdict != StepUndecided {
			continue
		}
		what := fmt.Sprintf("step %s (%.2f req/s) is undecided: its attainment interval", l.steps[0], l.rate)
		if len(l.steps) > 1 {
			what = fmt.Sprintf("steps %s (%.2f req/s), pooled, are undecided: their attainment interval", strings.Join(l.steps, ", "), l.rate)
		}
		note := fmt.Sprintf("%s [%.2f%%, %.2f%%] straddles %.1f%%; not counted as meeting the SLO: run it longer to decide it", what, 100*l.ci[0], 100*l.ci[1], 100*e.Attainment)
		if l.rate < lo {
			note += fmt.Sprintf("; below %.2f req/s, the highest rate that passed, it bounds nothing", lo)
		}
		e.Notes = append(e.Notes, note)
	}
	e.MaxRateInterval = [2]float64{lo, hi}
	switch {
	case lo > 0:
		e.MaxRateMeetingSLO = new(lo)
		if hi == 0 {
			e.Notes = append(e.Notes, "no rate failed: the sweep did not reach the limit; extend it to higher rates")
		}
	case hi > 0 && hi == failed:
		e.Notes = append(e.Notes, fmt.Sprintf("no step met the SLO at %.1f%% attainment: the limit is below %.2f req/s", 100*e.Attainment, hi))
	case len(undecided) > 0:
		note := fmt.Sprintf("no step was shown to meet the SLO (undecided: %s req/s)", strings.Join(undecided, ", "))
		if failed > 0 {
			note += fmt.Sprintf("; %.2f req/s failed: the limit is below it", failed)
		}
		e.Notes = append(e.Notes, note)
	}
}

// recoveryOf says whether latency recovered after the first failing step:
// for a sweep, a later step at or below an earlier passing step's rate must
// have p99 TTFT within 10% of it; for a ramp (one run), the time series
// recovery decides.
func recoveryOf(timeOrder []Step, l *loaded, runDirs []string) string {
	failed := -1
	for k, s := range timeOrder {
		if s.Verdict == StepFail {
			failed = k
			break
		}
	}
	if failed < 0 {
		return "no step failed the SLO, so there was no overload to recover from"
	}
	for k := failed + 1; k < len(timeOrder); k++ {
		later := timeOrder[k]
		for _, earlier := range timeOrder[:failed] {
			if later.OfferedRate <= earlier.OfferedRate*1.1 && later.OfferedRate >= earlier.OfferedRate*0.9 {
				a, b := p99(earlier.TTFT), p99(later.TTFT)
				if b <= 1.1*a {
					return fmt.Sprintf("recovered: after the overload (%s), step %s at %.2f req/s has p99 TTFT %s ms, within 10%% of %s ms before it",
						timeOrder[failed].Name, later.Name, later.OfferedRate, num(b), num(a))
				}
				return fmt.Sprintf("NOT recovered: after the overload (%s), step %s at %.2f req/s has p99 TTFT %s ms against %s ms before it",
					timeOrder[failed].Name, later.Name, later.OfferedRate, num(b), num(a))
			}
		}
	}
	if len(l.runIDs) == 1 {
		ser := timeSeries(l.cols, nil, Options{Window: niceWindow(float64(maxTime(l.cols)) / 1e9 / 40)})
		if r := ser.Recovery; r != nil && r.RecoveryS != nil {
			return fmt.Sprintf("recovered %s s after the first saturated window (%s s into the run)", num(*r.RecoveryS), num(r.FirstBreakS))
		} else if r != nil {
			return "NOT recovered: " + r.Note
		}
	}
	return fmt.Sprintf("not measured: no step after the overload (%s) repeats an earlier, passing rate; end the sweep with a step back at a passing rate", timeOrder[failed].Name)
}

func p99(d Distribution) float64 {
	for _, q := range d.Quantiles {
		if q.P == 99 {
			return q.Value
		}
	}
	return d.Max
}

// maxTime is the run clock's last instant: the latest schedule or completion.
func maxTime(c *resultColumns) int64 {
	var t int64
	for i := range c.n {
		t = max(t, c.scheduled[i])
		if c.done[i] != null {
			t = max(t, c.done[i])
		}
	}
	return t
}

// WriteEnvelopeTable prints the envelope: one line per step, then the
// knee, the highest rate meeting the SLO and recovery.
func WriteEnvelopeTable(w io.Writer, e *Envelope) error {
	var b strings.Builder
	slo := "none (goodput = completed)"
	if !e.SLO.Empty() {
		slo = sloText(e.SLO)
	}
	fmt.Fprintf(&b, "service envelope: SLO %s, a step passes when %.1f%% of its requests meet it; rates in req/s [95%% Poisson interval]\n", slo, 100*e.Attainment)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "step\toffered\taccepted\tcompleted\tgoodput\tattainment\tttft p50\tttft p99\te2e p99\tpasses\t\n")
	for k, s := range e.Steps {
		mark := ""
		if k == e.Knee {
			mark = " ← knee"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f [%.2f, %.2f]\t%.2f [%.2f, %.2f]\t%.1f%%\t%s\t%s\t%s\t%v%s\t\n", s.Name, s.OfferedRate, s.AcceptedRate,
			s.CompletedRate, s.CompletedCI[0], s.CompletedCI[1], s.GoodputRate, s.GoodputCI[0], s.GoodputCI[1], 100*s.Attainment,
			pct(s.TTFT, 50), pct(s.TTFT, 99), pct(s.E2E, 99), passesText(s), mark)
	}
	tw.Flush()
	if e.Knee >= 0 {
		fmt.Fprintf(&b, "knee: goodput stops growing after %.2f req/s offered (%.2f req/s good)\n", e.Steps[e.Knee].OfferedRate, e.Steps[e.Knee].GoodputRate)
	} else {
		b.WriteString("knee: not reached (goodput grew at every step)\n")
	}
	if e.MaxRateMeetingSLO != nil {
		if hi := e.MaxRateInterval[1]; hi > 0 && slices.Contains(e.UndecidedRates, hi) {
			fmt.Fprintf(&b, "highest rate meeting the SLO: %.2f req/s; the limit lies in [%.2f, %.2f] at this sweep's resolution (%.2f undecided)\n", *e.MaxRateMeetingSLO, e.MaxRateInterval[0], e.MaxRateInterval[1], e.MaxRateInterval[1])
		} else if e.MaxRateInterval[1] > 0 {
			fmt.Fprintf(&b, "highest rate meeting the SLO: %.2f req/s; the limit lies in [%.2f, %.2f) at this sweep's resolution\n", *e.MaxRateMeetingSLO, e.MaxRateInterval[0], e.MaxRateInterval[1])
		} else {
			fmt.Fprintf(&b, "highest rate meeting the SLO: at least %.2f req/s (no step failed)\n", *e.MaxRateMeetingSLO)
		}
	}
	fmt.Fprintf(&b, "recovery: %s\n", e.Recovery)
	for _, n := range e.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// passesText says whether a step passes, "not steady" when it fails for
// that, and "undecided" when its interval straddles the target.
func passesText(s Step) string {
	if st := s.Steadiness; st != nil && !st.Steady {
		return "false (not steady)"
	}
	if s.Verdict == StepUndecided {
		return "undecided"
	}
	return fmt.Sprint(s.MeetsSLO)
}

// pct prints a distribution's percentile, marked as a floor where the
// sample cannot bound it.
func pct(d Distribution, p float64) string {
	for _, q := range d.Quantiles {
		if q.P == p {
			if q.Hi == nil {
				return num(q.Value) + "≥"
			}
			return num(q.Value)
		}
	}
	return "—"
}
