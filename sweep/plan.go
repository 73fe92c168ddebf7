package sweep

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/servetrace/servetrace/analyze"
)

// next is the step to run after the done ones, or ok false when the sweep
// is finished; why says so in a sentence. It is a function of the done
// steps alone, so a resumed sweep continues exactly where it stopped.
type next struct {
	Config  string
	Level   float64
	Purpose string
	Repeat  int
	// Overload, for a recovery step, is the failing level replayed just
	// before it, the recovery starting as the overload's schedule ends.
	Overload float64
}

// verdicts of a level.
const (
	pass      = "pass"
	fail      = "fail"
	undecided = "undecided"
)

// judge is the verdict of k good requests of n, at the options'
// attainment and confidence.
func (o *Options) judge(k, n int) (string, [2]float64) {
	ci := analyze.BinomialCI(k, n, o.Confidence)
	switch {
	case n == 0:
		return undecided, ci
	case ci[0] >= o.Attainment:
		return pass, ci
	case ci[1] < o.Attainment:
		return fail, ci
	}
	return undecided, ci
}

// level is what the done steps say of one configuration's level.
type level struct {
	value       float64
	good, count int
	runs        int // measuring steps (recovery steps excluded)
	verdict     string
	// final is set when the verdict stands: decided, or undecided with
	// no extension left. An undecided level never counts as a pass: its
	// interval straddles the target, and a longer step may fall short.
	final bool
	// notSteady is the reason of the first of its steps whose queue was
	// still growing: the level fails, whatever its attainment.
	notSteady string
	// inaccurate is the reason of the first of its steps whose answers
	// fell below MinAccuracy: the level fails too.
	inaccurate string
}

// levels pools each level's measuring steps of a configuration.
func (o *Options) levels(done []Step, config string) map[float64]*level {
	out := map[float64]*level{}
	for _, s := range done {
		if s.Config != config || s.Purpose == "recovery" || s.Status != "done" {
			continue
		}
		l := out[s.Level]
		if l == nil {
			l = &level{value: s.Level}
			out[s.Level] = l
		}
		l.good += s.Good
		l.count += s.Counted
		l.runs++
		if st := s.Steadiness; st != nil && !st.Steady && l.notSteady == "" {
			l.notSteady = fmt.Sprintf("step %d %s", s.Index, st.Reason)
		}
		if s.Inaccurate != "" && l.inaccurate == "" {
			l.inaccurate = fmt.Sprintf("step %d: %s", s.Index, s.Inaccurate)
		}
	}
	for _, l := range out {
		if l.notSteady != "" || l.inaccurate != "" {
			l.verdict, l.final = fail, true
			continue
		}
		l.verdict, _ = o.judge(l.good, l.count)
		l.final = l.verdict != undecided || l.runs >= max(o.Repeats, 1)+o.MaxExtensions
	}
	return out
}

// bracket returns the highest passing level below the lowest level that
// did not pass, failed or undecided for good (0 when none), and that
// level (0 when none): an undecided level is never counted as meeting
// the SLO.
func bracket(ls map[float64]*level) (lo, hi float64) {
	for _, l := range ls {
		if l.final && l.verdict != pass && (hi == 0 || l.value < hi) {
			hi = l.value
		}
	}
	for _, l := range ls {
		if l.final && l.verdict == pass && (hi == 0 || l.value < hi) && l.value > lo {
			lo = l.value
		}
	}
	return lo, hi
}

// planNext chooses the step after done.
func (o *Options) planNext(done []Step) (n next, why string, ok bool) {
	if r, why, ok := o.recoveryNext(done); ok {
		return r, why, true
	}
	if o.Search != nil {
		return o.searchNext(done)
	}
	return o.fixedNext(done)
}

// fixedNext walks the fixed levels in order; at each, repeat r runs the
// configurations in their order for even r and reversed for odd r, the
// alternation continuing across levels (A B | B A | A B ...), so that
// neither side is always measured first. A configuration's level still
// undecided after its repeats is run again, pooled, before the next
// level, up to MaxExtensions times.
func (o *Options) fixedNext(done []Step) (next, string, bool) {
	ran := map[string]int{}
	for _, s := range done {
		if s.Purpose == "level" && s.Status == "done" {
			ran[s.Config+"@"+strconv.FormatFloat(s.Level, 'g', -1, 64)]++
		}
	}
	turn := 0
	for k, lv := range o.Levels {
		if k > 0 {
			if n, why, ok := o.extendNext(done, o.Levels[k-1]); ok {
				return n, why, true
			}
		}
		for r := range o.Repeats {
			order := slices.Clone(o.Configs)
			if turn%2 == 1 {
				slices.Reverse(order)
			}
			turn++
			for _, c := range order {
				key := c.Name + "@" + strconv.FormatFloat(lv, 'g', -1, 64)
				if ran[key] > 0 {
					ran[key]--
					continue
				}
				return next{Config: c.Name, Level: lv, Purpose: "level", Repeat: r},
					fmt.Sprintf("fixed level %s %s, repeat %d of %d, configuration %s", fmtLevel(lv), o.Mode, r+1, o.Repeats, c.Name), true
			}
		}
	}
	if n, why, ok := o.extendNext(done, o.Levels[len(o.Levels)-1]); ok {
		return n, why, true
	}
	return next{}, "every fixed level was run", false
}

// extendNext is the extension of fixed level lv for the first
// configuration, in order, whose runs of it left it undecided with
// extensions to spare.
func (o *Options) extendNext(done []Step, lv float64) (next, string, bool) {
	for _, c := range o.Configs {
		if l := o.levels(done, c.Name)[lv]; l != nil && !l.final {
			return next{Config: c.Name, Level: lv, Purpose: "extend", Repeat: l.runs}, undecidedWhy(o, l), true
		}
	}
	return next{}, "", false
}

// undecidedWhy says why an undecided level runs again.
func undecidedWhy(o *Options, l *level) string {
	return fmt.Sprintf("%s %s is undecided (%d of %d good; the interval straddles %.4g): run it again, pooled", fmtLevel(l.value), o.Mode, l.good, l.count, o.Attainment)
}

// searchNext grows, shrinks or bisects (see Search).
func (o *Options) searchNext(done []Step) (next, string, bool) {
	s := o.Search
	config := o.Configs[0].Name
	ls := o.levels(done, config)
	// An undecided level is run again before anything else.
	for i := len(done) - 1; i >= 0; i-- {
		d := done[i]
		if d.Purpose == "recovery" || d.Status != "done" {
			continue
		}
		if l := ls[d.Level]; l != nil && !l.final {
			return next{Config: config, Level: d.Level, Purpose: "extend", Repeat: l.runs}, undecidedWhy(o, l), true
		}
		break
	}
	lo, hi := bracket(ls)
	switch {
	case len(ls) == 0:
		return next{Config: config, Level: s.Start, Purpose: "grow"}, fmt.Sprintf("search starts at %s", fmtLevel(s.Start)), true
	case hi == 0:
		nl := round4(lo * s.Growth)
		if nl > s.Max*(1+1e-9) {
			return next{}, fmt.Sprintf("every level up to %s passed; the limit is above the search's maximum %s", fmtLevel(lo), fmtLevel(s.Max)), false
		}
		return next{Config: config, Level: nl, Purpose: "grow"}, fmt.Sprintf("%s passed: grow ×%g to %s", fmtLevel(lo), s.Growth, fmtLevel(nl)), true
	case lo == 0:
		nl := round4(hi / s.Growth)
		if nl < s.Min*(1-1e-9) {
			return next{}, fmt.Sprintf("every level down to %s failed; the limit is below the search's minimum %s", fmtLevel(hi), fmtLevel(s.Min)), false
		}
		return next{Config: config, Level: nl, Purpose: "shrink"}, fmt.Sprintf("%s failed with nothing passing below it: shrink ÷%g to %s", fmtLevel(hi), s.Growth, fmtLevel(nl)), true
	case hi/lo <= 1+s.Resolution*(1+1e-9):
		return next{}, fmt.Sprintf("the limit lies in [%s, %s), within the resolution %.3g", fmtLevel(lo), fmtLevel(hi), s.Resolution), false
	}
	nl := round4(math.Sqrt(lo * hi))
	if nl <= lo || nl >= hi { // rounding closed the gap
		return next{}, fmt.Sprintf("the limit lies in [%s, %s)", fmtLevel(lo), fmtLevel(hi)), false
	}
	return next{Config: config, Level: nl, Purpose: "bisect"}, fmt.Sprintf("the limit lies in [%s, %s): bisect at %s", fmtLevel(lo), fmtLevel(hi), fmtLevel(nl)), true
}

// recoveryNext puts the recovery step right after a configuration's first
// failing level (its verdict final) when some lower level of it passed:
// the failing level again, and the passing one starting as it stops
// sending, on the backlog it leaves (a replay that ran alone would have
// let its backlog drain before it ended).
func (o *Options) recoveryNext(done []Step) (next, string, bool) {
	if !o.Recovery || len(done) == 0 {
		return next{}, "", false
	}
	last := done[len(done)-1]
	if last.Status != "done" || last.Purpose == "recovery" {
		return next{}, "", false
	}
	ls := o.levels(done, last.Config)
	if l := ls[last.Level]; l == nil || !l.final || l.verdict != fail {
		return next{}, "", false
	}
	var passed float64
	for _, s := range done[:len(done)-1] {
		if s.Config != last.Config {
			continue
		}
		if s.Purpose == "recovery" {
			return next{}, "", false // measured already
		}
		if l := ls[s.Level]; l.final && l.verdict == fail && s.Level != last.Level {
			return next{}, "", false // not the first failure
		}
	}
	for _, l := range ls {
		if l.final && l.verdict == pass && l.value < last.Level && l.value > passed {
			passed = l.value
		}
	}
	if passed == 0 {
		return next{}, "", false
	}
	return next{Config: last.Config, Level: passed, Purpose: "recovery", Overload: last.Level},
		fmt.Sprintf("%s failed: recovery step at %s, the highest level that passed before it, starting the moment a replay of %s stops sending, on its backlog", fmtLevel(last.Level), fmtLevel(passed), fmtLevel(last.Level)), true
}

// round4 rounds a level to 4 significant digits, for readable names.
func round4(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return v
}

// fmtLevel prints a level.
func fmtLevel(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
