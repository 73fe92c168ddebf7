package sweep

import (
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

// Result is a configuration's envelope as the sweep found it.
type Result struct {
	Config string `json:"config"`
	Mode   Mode   `json:"mode"`
	// MaxLevel is the highest level that passed below the lowest failing
	// one; the limit lies in Bracket [lo, hi), hi the lowest failing level
	// or, if lower, the lowest level undecided for good above lo ([lo, hi]
	// then: the limit may be at hi); hi 0: none, the limit is above lo.
	// An undecided level below lo bounds nothing.
	MaxLevel *float64   `json:"max_level_meeting_slo,omitempty"`
	Bracket  [2]float64 `json:"bracket"`
	// Undecided lists the levels whose interval still straddled the
	// target after every extension: none counts as meeting the SLO.
	Undecided []float64   `json:"undecided_levels,omitempty"`
	Levels    []LevelStat `json:"levels"`
	// KneeLevel is where goodput stopped growing (analyze envelope's knee).
	KneeLevel *float64  `json:"knee_level,omitempty"`
	Recovery  *Recovery `json:"recovery,omitempty"`
	// CostPerMillionOutput and CostPerMillionTotal are the price of a
	// million output (and prompt plus output) tokens at MaxLevel, from
	// CostPerHour and that level's token throughput.
	CostPerMillionOutput *float64 `json:"cost_per_million_output_tokens,omitempty"`
	CostPerMillionTotal  *float64 `json:"cost_per_million_total_tokens,omitempty"`
	Notes                []string `json:"notes,omitempty"`
}

// LevelStat is one level's measuring steps pooled.
type LevelStat struct {
	Level        float64    `json:"level"`
	Steps        []int      `json:"steps"`
	Counted      int        `json:"counted"`
	Good         int        `json:"good"`
	Attainment   float64    `json:"attainment"`
	AttainmentCI [2]float64 `json:"attainment_ci"`
	// Verdict is pass, fail, or undecided when the interval still
	// straddled the target after every extension (never counted as
	// meeting the SLO); Judged says how: "interval", "not steady" or
	// "inaccurate".
	Verdict string `json:"verdict"`
	Judged  string `json:"judged"`
	// NotSteady says why the level failed for a queue still growing over
	// one of its steps ("not steady" in Judged).
	NotSteady string `json:"not_steady,omitempty"`
	// Inaccurate says why the level failed for answers below the accuracy
	// floor ("inaccurate" in Judged).
	Inaccurate       string     `json:"inaccurate,omitempty"`
	OfferedRate      float64    `json:"offered_rps"`
	GoodputRate      float64    `json:"goodput_rps"`
	GoodputCI        [2]float64 `json:"goodput_ci95"`
	OutputTokensPerS float64    `json:"output_tokens_per_s"`
	TotalTokensPerS  float64    `json:"total_tokens_per_s"`
	TTFTP50Ms        float64    `json:"ttft_p50_ms"`
	TTFTP99Ms        float64    `json:"ttft_p99_ms"`
	// EnergyPerOutputTokenJ, where a DCGM exporter was scraped.
	EnergyPerOutputTokenJ *float64 `json:"energy_per_output_token_j,omitempty"`
	MeanGPUPowerW         *float64 `json:"mean_gpu_power_w,omitempty"`
}

// Recovery is the step run right after the first overload, at the highest
// level that had passed, without waiting for the server to drain.
type Recovery struct {
	Step       int     `json:"step"`
	AfterStep  int     `json:"after_step"`
	Level      float64 `json:"level"`
	RefP50Ms   float64 `json:"reference_ttft_p50_ms"`
	RefP99Ms   float64 `json:"reference_ttft_p99_ms"`
	StepP99Ms  float64 `json:"step_ttft_p99_ms"`
	Meets      bool    `json:"meets_slo"`
	Attainment float64 `json:"attainment"`
	// RefWaiting and RefKVUsage are the level's median waiting requests
	// and KV usage per window before the overload (engine metrics; absent
	// without them).
	RefWaiting *float64 `json:"reference_waiting,omitempty"`
	RefKVUsage *float64 `json:"reference_kv_usage,omitempty"`
	// RecoveredAfterS is when, into the recovery step, TTFT per 1-second
	// window came back within 10% (or 5 ms) of the level's reference (the
	// p50: a window's p99 is the largest of its few requests, and one slow
	// request would reset it), and the waiting requests and KV usage within 10% (or 1
	// request, 2 points) of theirs, and stayed there; nil when they never
	// did.
	RecoveredAfterS *float64 `json:"recovered_after_s,omitempty"`
	Note            string   `json:"note"`
}

// results computes every configuration's result from the done steps,
// and each configuration's envelope (nil with fewer than two measuring
// steps) for the plot.
func (s *sweeper) results() ([]Result, []*analyze.Envelope, error) {
	done := doneSteps(s.rec.Steps)
	var out []Result
	var envs []*analyze.Envelope
	for _, c := range s.o.Configs {
		r := Result{Config: c.Name, Mode: s.o.Mode}
		ls := s.o.levels(done, c.Name)
		var measuring []string
		for _, lv := range slices.Sorted(maps.Keys(ls)) {
			stat, dirs, err := s.levelStat(done, c.Name, ls[lv])
			if err != nil {
				return nil, nil, err
			}
			measuring = append(measuring, dirs...)
			r.Levels = append(r.Levels, stat)
		}
		r.setBracket(ls, s.o.Attainment)
		if lo := r.Bracket[0]; lo > 0 {
			if i := slices.IndexFunc(r.Levels, func(l LevelStat) bool { return l.Level == lo }); i >= 0 && s.o.CostPerHour > 0 {
				l := r.Levels[i]
				if l.OutputTokensPerS > 0 {
					r.CostPerMillionOutput = new(s.o.CostPerHour / 3600 / l.OutputTokensPerS * 1e6)
				}
				if l.TotalTokensPerS > 0 {
					r.CostPerMillionTotal = new(s.o.CostPerHour / 3600 / l.TotalTokensPerS * 1e6)
				}
			}
		}
		var env *analyze.Envelope
		if len(measuring) >= 2 {
			e, err := analyze.FindEnvelope(measuring, s.envelopeOptions())
			if err != nil {
				return nil, nil, err
			}
			if env = e; env.Knee >= 0 {
				r.KneeLevel = new(levelOfRun(done, env.Steps[env.Knee].Name))
			}
		}
		rec, err := s.recovery(done, c.Name, r.Levels)
		if err != nil {
			return nil, nil, err
		}
		r.Recovery = rec
		out, envs = append(out, r), append(envs, env)
	}
	return out, envs, nil
}

// setBracket sets the highest level meeting the SLO, the bracket of the
// limit (bracket's rule) and the undecided levels from the pooled levels,
// with the notes that say what they mean against the attainment target;
// r.Levels must be set.
func (r *Result) setBracket(ls map[float64]*level, attainment float64) {
	lo, hi := bracket(ls)
	r.Bracket = [2]float64{lo, hi}
	if lo > 0 {
		r.MaxLevel = new(lo)
	}
	var undecidedText []string
	lowestFail := 0.0
	for _, l := range r.Levels {
		if l.Verdict == fail && lowestFail == 0 {
			lowestFail = l.Level
		}
		if l.Verdict != undecided {
			continue
		}
		r.Undecided = append(r.Undecided, l.Level)
		undecidedText = append(undecidedText, fmtLevel(l.Level))
		note := fmt.Sprintf("%s is undecided: its attainment interval [%.2f%%, %.2f%%] over %d requests straddles %.2f%%; not counted as meeting the SLO: run it longer (more extensions, or longer steps) to decide it",
			fmtLevel(l.Level), 100*l.AttainmentCI[0], 100*l.AttainmentCI[1], l.Counted, 100*attainment)
		if l.Level < lo {
			note += fmt.Sprintf("; below %s, the highest level that passed, it bounds nothing", fmtLevel(lo))
		}
		r.Notes = append(r.Notes, note)
	}
	switch {
	case lo > 0 && hi == 0:
		r.Notes = append(r.Notes, fmt.Sprintf("no level failed: the limit is above %s; sweep higher", fmtLevel(lo)))
	case lo > 0:
	case hi > 0 && !r.hiUndecided():
		r.Notes = append(r.Notes, fmt.Sprintf("no level passed: the limit is below %s", fmtLevel(hi)))
	case len(undecidedText) > 0:
		note := fmt.Sprintf("no level was shown to meet the SLO (undecided: %s)", strings.Join(undecidedText, ", "))
		if lowestFail > 0 {
			note += fmt.Sprintf("; %s failed: the limit is below it", fmtLevel(lowestFail))
		}
		r.Notes = append(r.Notes, note)
	}
}

// hiUndecided reports whether the bracket's upper end is an undecided
// level: the limit may then be at it, and the bracket is closed.
func (r *Result) hiUndecided() bool {
	return r.Bracket[1] > 0 && slices.Contains(r.Undecided, r.Bracket[1])
}

// levelOfRun returns the level of the step with that run id.
func levelOfRun(done []Step, runID string) float64 {
	for _, s := range done {
		if s.RunID == runID {
			return s.Level
		}
	}
	return 0
}

// levelStat pools one level's measuring steps.
func (s *sweeper) levelStat(done []Step, config string, l *level) (LevelStat, []string, error) {
	stat := LevelStat{Level: l.value, Counted: l.count, Good: l.good, Verdict: l.verdict, Judged: "interval"}
	var dirs []string
	for _, st := range done {
		if st.Config == config && st.Level == l.value && st.Purpose != "recovery" {
			stat.Steps = append(stat.Steps, st.Index)
			dirs = append(dirs, filepath.Join(s.dir, st.RunDir))
		}
	}
	_, ci := s.o.judge(l.good, l.count)
	stat.AttainmentCI, stat.Inaccurate, stat.NotSteady = ci, l.inaccurate, l.notSteady
	stat.Judged = judgedHow(l)
	m, err := analyze.MeasureStep(dirs, s.envelopeOptions())
	if err != nil {
		return stat, nil, err
	}
	stat.Attainment, stat.OfferedRate, stat.GoodputRate, stat.GoodputCI = m.Attainment, m.OfferedRate, m.GoodputRate, m.GoodputCI
	stat.OutputTokensPerS, stat.TotalTokensPerS = m.OutputTokensPerS, m.TotalTokensPerS
	stat.TTFTP50Ms, stat.TTFTP99Ms = quantile(m.TTFT, 50), quantile(m.TTFT, 99)
	if e := m.Energy; e != nil {
		stat.MeanGPUPowerW = new(e.MeanPowerW)
		if e.PerOutputTokenJ > 0 {
			stat.EnergyPerOutputTokenJ = new(e.PerOutputTokenJ)
		}
	}
	return stat, dirs, nil
}

// judgedHow says how a level's verdict was reached: "not steady" or
// "inaccurate" where that failed it, else "interval".
func judgedHow(l *level) string {
	switch {
	case l.notSteady != "":
		return "not steady"
	case l.inaccurate != "":
		return "inaccurate"
	}
	return "interval"
}

// recovery measures the configuration's recovery step, if it ran.
func (s *sweeper) recovery(done []Step, config string, levels []LevelStat) (*Recovery, error) {
	k := slices.IndexFunc(done, func(st Step) bool { return st.Config == config && st.Purpose == "recovery" })
	if k < 0 {
		return nil, nil
	}
	st := done[k]
	r := &Recovery{Step: st.Index, Level: st.Level, StepP99Ms: st.TTFTP99Ms, Attainment: st.Attainment, Meets: st.Verdict == pass}
	for j := k - 1; j >= 0; j-- {
		if done[j].Config == config {
			r.AfterStep = done[j].Index
			break
		}
	}
	var refDirs []string
	if i := slices.IndexFunc(levels, func(l LevelStat) bool { return l.Level == st.Level }); i >= 0 {
		r.RefP50Ms, r.RefP99Ms = levels[i].TTFTP50Ms, levels[i].TTFTP99Ms
		for _, idx := range levels[i].Steps {
			if j := slices.IndexFunc(done, func(d Step) bool { return d.Index == idx }); j >= 0 {
				refDirs = append(refDirs, filepath.Join(s.dir, done[j].RunDir))
			}
		}
	}
	series := func(dirs []string) (*analyze.Series, error) {
		// The time series needs the rows held, however many the steps hold.
		rep, err := analyze.Analyze(dirs, analyze.Options{Window: time.Second, TTFTMode: s.o.TTFTMode,
			Percentiles: []float64{50, 99}, Bootstrap: analyze.BootstrapOptions{Resamples: 200}, InMemoryRows: math.MaxInt})
		if err != nil {
			return nil, err
		}
		return rep.Series, nil
	}
	var refWait, refKV float64 = -1, -1
	if len(refDirs) > 0 {
		ref, err := series(refDirs)
		if err != nil {
			return nil, fmt.Errorf("recovery reference: %w", err)
		}
		if refWait, refKV = gaugeMedians(ref); refWait >= 0 {
			r.RefWaiting = new(refWait)
		}
		if refKV >= 0 {
			r.RefKVUsage = new(refKV)
		}
	}
	ser, err := series([]string{filepath.Join(s.dir, st.RunDir)})
	if err != nil {
		return nil, fmt.Errorf("recovery step %d: %w", st.Index, err)
	}
	limit := max(1.1*r.RefP50Ms, r.RefP50Ms+5)
	back := func(w analyze.Window) bool {
		if w.TTFTP50Ms != nil && *w.TTFTP50Ms > limit {
			return false
		}
		if w.Waiting != nil && refWait >= 0 && *w.Waiting > max(1.1*refWait, refWait+1) {
			return false
		}
		if w.KVUsage != nil && refKV >= 0 && *w.KVUsage > max(1.1*refKV, refKV+0.02) {
			return false
		}
		return w.TTFTP50Ms != nil || w.Waiting != nil
	}
	if ser != nil {
		var at *float64
		for _, w := range ser.Windows {
			if w.TTFTP50Ms == nil && w.Waiting == nil {
				continue
			}
			if back(w) {
				if at == nil {
					at = new(w.StartS)
				}
			} else {
				at = nil
			}
		}
		r.RecoveredAfterS = at
	}
	switch {
	case r.RecoveredAfterS != nil:
		r.Note = fmt.Sprintf("after the overload of step %d, TTFT p50 at %s (and the queue and KV usage, where scraped) was back within 10%% of its level before, %.0f ms, %.0f s into step %d", r.AfterStep, fmtLevel(r.Level), r.RefP50Ms, *r.RecoveredAfterS, r.Step)
	default:
		r.Note = fmt.Sprintf("NOT recovered: after the overload of step %d, TTFT p50 at %s (or the queue, or KV usage) stayed above its level before (%.0f ms) through step %d", r.AfterStep, fmtLevel(r.Level), r.RefP50Ms, r.Step)
	}
	return r, nil
}

// WriteSummary prints the sweep's steps and results.
func WriteSummary(w io.Writer, rec *Record) error {
	var b strings.Builder
	slo := "none (a request counts when it succeeds)"
	if !rec.Plan.SLO.Empty() {
		slo = rec.Plan.SLO.String()
	}
	fmt.Fprintf(&b, "sweep %s (%s): SLO %s; a level passes when the %.0f%% exact interval of its attainment lies at or above %.2f%%\n",
		rec.SweepID, rec.Status, slo, 100*rec.Plan.Confidence, 100*rec.Plan.Attainment)
	if rec.Reason != "" {
		fmt.Fprintf(&b, "  %s\n", rec.Reason)
	}
	for _, n := range rec.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if lo, hi := stepLengths(rec.Steps); rec.Plan.StepDurationS == 0 && hi > 0 {
		fmt.Fprintf(&b, "  steps sized from each level and the workload: %.0f to %.0f s (sweep.json's step_duration_why says how)\n", lo, hi)
	}
	for _, r := range rec.Results {
		fmt.Fprintf(&b, "configuration %s, by %s:\n", r.Config, r.Mode)
		for _, l := range r.Levels {
			energy := ""
			if l.EnergyPerOutputTokenJ != nil {
				energy = fmt.Sprintf(", %.3g J/output token", *l.EnergyPerOutputTokenJ)
			}
			fmt.Fprintf(&b, "  %8s: %s (%s) attainment %.2f%% [%.2f, %.2f] of %d; goodput %.2f req/s [%.2f, %.2f]; %.0f output tok/s; TTFT p50 %.0f p99 %.0f ms%s\n",
				fmtLevel(l.Level), l.Verdict, l.Judged, 100*l.Attainment, 100*l.AttainmentCI[0], 100*l.AttainmentCI[1], l.Counted,
				l.GoodputRate, l.GoodputCI[0], l.GoodputCI[1], l.OutputTokensPerS, l.TTFTP50Ms, l.TTFTP99Ms, energy)
			if l.NotSteady != "" {
				fmt.Fprintf(&b, "            %s\n", l.NotSteady)
			}
			if l.Inaccurate != "" {
				fmt.Fprintf(&b, "            %s\n", l.Inaccurate)
			}
		}
		switch {
		case r.MaxLevel != nil && r.Bracket[1] > 0:
			undecided := ""
			if r.hiUndecided() {
				undecided = fmt.Sprintf(" (%s undecided)", fmtLevel(r.Bracket[1]))
			}
			fmt.Fprintf(&b, "  highest level meeting the SLO: %s; the limit lies in %s%s\n", fmtLevel(*r.MaxLevel), bracketText(r.Bracket[0], r.Bracket[1], r.hiUndecided()), undecided)
		case r.MaxLevel != nil:
			fmt.Fprintf(&b, "  highest level meeting the SLO: at least %s (no level failed)\n", fmtLevel(*r.MaxLevel))
		}
		if r.KneeLevel != nil {
			fmt.Fprintf(&b, "  knee: goodput stops growing after %s\n", fmtLevel(*r.KneeLevel))
		}
		if r.Recovery != nil {
			fmt.Fprintf(&b, "  recovery: %s\n", r.Recovery.Note)
		}
		if r.CostPerMillionOutput != nil {
			fmt.Fprintf(&b, "  cost at %s: %.4g per million output tokens, %.4g per million tokens (prompt + output), at %g per hour\n",
				fmtLevel(*r.MaxLevel), *r.CostPerMillionOutput, *r.CostPerMillionTotal, rec.Plan.CostPerHour)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
	}
	idle, waited := 0.0, 0
	for _, st := range rec.Steps {
		if st.IdleWaitS != nil {
			idle, waited = idle+*st.IdleWaitS, waited+1
		}
		for _, n := range st.Notes {
			fmt.Fprintf(&b, "note: step %d: %s\n", st.Index, n)
		}
	}
	fmt.Fprintf(&b, "%d steps in %.0f s", len(doneSteps(rec.Steps)), rec.WallS)
	if waited > 0 {
		fmt.Fprintf(&b, "; %d waited %.1f s in all for the server to drain", waited, idle)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// stepLengths are the shortest and longest measured times of the steps.
func stepLengths(steps []Step) (lo, hi float64) {
	for _, st := range steps {
		if st.DurationS > 0 && (lo == 0 || st.DurationS < lo) {
			lo = st.DurationS
		}
		hi = max(hi, st.DurationS)
	}
	return lo, hi
}

// writeHTML writes envelope.html: each configuration's envelope plot.
func writeHTML(dir string, rec *Record, envs []*analyze.Envelope) error {
	var figs []analyze.Figure
	for i, env := range envs {
		if env == nil {
			continue
		}
		f, err := analyze.EnvelopeFigures(env)
		if err != nil {
			return err
		}
		for k := range f {
			f[k].Title = rec.Plan.Configs[i].Name + ": " + f[k].Title
		}
		figs = append(figs, f...)
	}
	if len(figs) == 0 {
		return nil
	}
	var text strings.Builder
	WriteSummary(&text, rec)
	return trace.WriteFileAtomic(filepath.Join(dir, "envelope.html"), func(w io.Writer) error {
		return analyze.WriteFigurePage(w, "servetrace sweep "+rec.SweepID, text.String(), figs)
	})
}
