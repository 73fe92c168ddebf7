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
		l.final = l.verdict != undecided || l.runs >= o.mostRuns()
	}
	return out
}

// mostRuns is how many times a level runs at most: once when searched
// (Search.BoundFor counts so), Repeats times when fixed, and
// MaxExtensions more while it stays undecided.
func (o *Options) mostRuns() int {
	if o.Search != nil {
		return 1 + o.MaxExtensions
	}
	return max(o.Repeats, 1) + o.MaxExtensions
}

// bracket returns the limit's bracket from the final levels: lo is the
// highest passing level below the lowest failing one (0 when none), hi the
// lowest failing level or, if lower, the lowest level undecided for good
// above lo (0 when neither). An undecided level is never counted as
// meeting the SLO; one below lo bounds nothing (a short step at a low
// rate cannot send the requests a pass needs, and says nothing of the
// limit), and a pass above a failure is noise.
func bracket(ls map[float64]*level) (lo, hi float64) {
	for _, l := range ls {
		if l.final && l.verdict == fail && (hi == 0 || l.value < hi) {
			hi = l.value
		}
	}
	for _, l := range ls {
		if l.final && l.verdict == pass && (hi == 0 || l.value < hi) && l.value > lo {
			lo = l.value
		}
	}
	for _, l := range ls {
		if l.final && l.verdict == undecided && l.value > lo && (hi == 0 || l.value < hi) {
			hi = l.value
		}
	}
	return lo, hi
}

// bracketText prints the bracket [lo, hi): closed, [lo, hi], where hi is
// undecided, since the limit may then be at hi.
func bracketText(lo, hi float64, hiUndecided bool) string {
	if hiUndecided {
		return fmt.Sprintf("[%s, %s]", fmtLevel(lo), fmtLevel(hi))
	}
	return fmt.Sprintf("[%s, %s)", fmtLevel(lo), fmtLevel(hi))
}

// verdictText says what a level's verdict was, as a past-tense phrase.
func verdictText(l *level) string {
	switch l.verdict {
	case pass:
		return "passed"
	case fail:
		return "failed"
	}
	return "stayed undecided"
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
			if n, why, ok := o.extendNext(done, k-1); ok {
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
	if n, why, ok := o.extendNext(done, len(o.Levels)-1); ok {
		return n, why, true
	}
	return next{}, "every fixed level was run", false
}

// extendNext is the next extension of fixed level k: round by round,
// each configuration whose runs of it left it undecided with extensions
// to spare runs once more, the order alternating from round to round and
// continuing the alternation of the level's repeats (A B | B A | A B), so
// that neither side is always measured first.
func (o *Options) extendNext(done []Step, k int) (next, string, bool) {
	lv := o.Levels[k]
	open := map[string]*level{}
	fewest := math.MaxInt
	for _, c := range o.Configs {
		if l := o.levels(done, c.Name)[lv]; l != nil && !l.final {
			open[c.Name], fewest = l, min(fewest, l.runs)
		}
	}
	if len(open) == 0 {
		return next{}, "", false
	}
	order := slices.Clone(o.Configs)
	if turn := (k+1)*o.Repeats + fewest - o.Repeats; turn%2 == 1 {
		slices.Reverse(order)
	}
	for _, c := range order {
		if l := open[c.Name]; l != nil && l.runs == fewest {
			return next{Config: c.Name, Level: lv, Purpose: "extend", Repeat: l.runs}, undecidedWhy(o, l), true
		}
	}
	return next{}, "", false
}

// undecidedWhy says why an undecided level runs again.
func undecidedWhy(o *Options, l *level) string {
	return fmt.Sprintf("%s %s is undecided (%d of %d good; the interval straddles %.4g): run it again, pooled", fmtLevel(l.value), o.Mode, l.good, l.count, o.Attainment)
}

// searchNext grows, shrinks or bisects (see Search). It never runs a
// final level again: it grows past lo only while nothing above lo is
// final, shrinks below hi only while nothing passed (nothing final lies
// below hi then), and bisects strictly between lo and hi, where bracket
// leaves nothing final; a level the rounding lands on that is final
// anyway ends the search.
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
	}
	lo, hi := bracket(ls)
	var limit string
	if hi > 0 {
		limit = bracketText(lo, hi, ls[hi].verdict == undecided)
	}
	var nl float64
	var purpose, why string
	switch {
	case len(ls) == 0:
		return next{Config: config, Level: s.Start, Purpose: "grow"}, fmt.Sprintf("search starts at %s", fmtLevel(s.Start)), true
	case lo == 0 && hi == 0: // no level final: cannot happen once extensions are run
		return next{}, "no level was judged", false
	case hi == 0:
		nl, purpose = round4(lo*s.Growth), "grow"
		if nl > s.Max*(1+1e-9) {
			return next{}, fmt.Sprintf("%s passed and no level above it failed; the next, %s, is past the search's maximum %s: the limit is at least %s", fmtLevel(lo), fmtLevel(nl), fmtLevel(s.Max), fmtLevel(lo)), false
		}
		why = fmt.Sprintf("%s passed: grow ×%g to %s", fmtLevel(lo), s.Growth, fmtLevel(nl))
	case lo == 0:
		nl, purpose = round4(hi/s.Growth), "shrink"
		if nl < s.Min*(1-1e-9) {
			return next{}, fmt.Sprintf("no level down to %s was shown to meet the SLO (%s %s); the next, %s, is below the search's minimum %s", fmtLevel(hi), fmtLevel(hi), verdictText(ls[hi]), fmtLevel(nl), fmtLevel(s.Min)), false
		}
		why = fmt.Sprintf("%s %s with nothing passing below it: shrink ÷%g to %s", fmtLevel(hi), verdictText(ls[hi]), s.Growth, fmtLevel(nl))
	case hi/lo <= 1+s.Resolution*(1+1e-9):
		return next{}, fmt.Sprintf("the limit lies in %s, within the resolution %.3g", limit, s.Resolution), false
	default:
		nl, purpose = round4(math.Sqrt(lo*hi)), "bisect"
		if nl <= lo || nl >= hi { // rounding closed the gap
			return next{}, fmt.Sprintf("the limit lies in %s", limit), false
		}
		why = fmt.Sprintf("the limit lies in %s: bisect at %s", limit, fmtLevel(nl))
	}
	if l := ls[nl]; l != nil && l.final {
		return next{}, fmt.Sprintf("the search's next level, %s, %s already: stopping", fmtLevel(nl), verdictText(l)), false
	}
	return next{Config: config, Level: nl, Purpose: purpose}, why, true
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
