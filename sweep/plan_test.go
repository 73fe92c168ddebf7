package sweep

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// simulate runs the planner against an oracle that gives each step's
// good and counted requests, and returns the steps it ran.
func simulate(t *testing.T, o Options, oracle func(level float64, run int) (good, count int)) []Step {
	t.Helper()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	var done []Step
	runs := map[string]int{}
	for len(done) < 200 {
		n, _, ok := o.planNext(done)
		if !ok {
			return done
		}
		key := fmt.Sprintf("%s@%g", n.Config, n.Level)
		good, count := oracle(n.Level, runs[key])
		runs[key]++
		st := Step{Index: len(done) + 1, Config: n.Config, Level: n.Level, Purpose: n.Purpose, Repeat: n.Repeat, Status: "done", Good: good, Counted: count}
		st.Verdict, st.AttainmentCI = o.judge(good, count)
		done = append(done, st)
	}
	t.Fatal("the planner did not finish in 200 steps")
	return nil
}

func searchOptions(start float64) Options {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Search = DefaultSearch(start)
	o.Search.Resolution = 0.05
	return o
}

// TestSearchBracketsTheLimit: against a server whose true limit is known
// (every level at or below it passes decisively, every level above fails),
// the search ends with the limit in its bracket, the bracket within the
// resolution, and no more steps than its documented bound.
func TestSearchBracketsTheLimit(t *testing.T) {
	for _, limit := range []float64{0.05, 0.3, 1, 1.7, 5, 37.5, 100, 999, 3000} {
		o := searchOptions(1)
		steps := simulate(t, o, func(level float64, _ int) (int, int) {
			if level <= limit {
				return 1000, 1000
			}
			return 500, 1000
		})
		lo, hi := bracket(o.levels(steps, "A"))
		// Every level is decisive here, so no step is an extension: the
		// bound without extensions holds, and the worst case with them.
		bound := o.Search.BoundFor(min(max(limit, o.Search.Min), o.Search.Max), 0)
		if len(steps) > bound || len(steps) > o.Search.Bound(o.MaxExtensions) {
			t.Errorf("limit %g: %d steps, more than the bound %d", limit, len(steps), bound)
		}
		t.Logf("limit %g: %d steps (bound %d), bracket [%g, %g)", limit, len(steps), bound, lo, hi)
		switch {
		case limit < o.Search.Min:
			if lo != 0 || hi == 0 || hi > o.Search.Min*o.Search.Growth {
				t.Errorf("limit %g below the minimum: bracket [%g, %g)", limit, lo, hi)
			}
		case limit >= o.Search.Max:
			if hi != 0 || lo < o.Search.Max/o.Search.Growth {
				t.Errorf("limit %g above the maximum: bracket [%g, %g)", limit, lo, hi)
			}
		default:
			if !(lo <= limit && limit < hi) || hi/lo > 1+o.Search.Resolution+1e-9 {
				t.Errorf("limit %g: bracket [%g, %g), want it to hold the limit within %g", limit, lo, hi, o.Search.Resolution)
			}
		}
		for _, s := range steps {
			if s.Purpose == "recovery" && s.Level > limit {
				t.Errorf("limit %g: recovery step at %g, a failing level", limit, s.Level)
			}
		}
	}
}

// TestSearchExtendsUndecidedLevels (issue 46, item 14): a level whose
// interval straddles the target is run again, pooled, and once the
// extensions are spent stays undecided: it is neither a pass (before, its
// point estimate passed it) nor counted below the limit, and the search
// goes on below it.
func TestSearchExtendsUndecidedLevels(t *testing.T) {
	o := searchOptions(4)
	o.MaxExtensions = 2
	o.Recovery = false
	// 4 passes clearly; 8 is always 99 of 100 (99% attainment: never
	// decisive against 0.99 with 100 requests); every other level fails.
	steps := simulate(t, o, func(level float64, _ int) (int, int) {
		switch {
		case level <= 4:
			return 1000, 1000
		case level == 8:
			return 99, 100
		}
		return 10, 100
	})
	n8 := 0
	for _, s := range steps {
		if s.Level == 8 {
			n8++
			if n8 > 1 && s.Purpose != "extend" {
				t.Errorf("step %d at 8 is %s, want extend", s.Index, s.Purpose)
			}
		}
	}
	if n8 != 1+o.MaxExtensions {
		t.Errorf("level 8 ran %d times, want 1 + %d extensions", n8, o.MaxExtensions)
	}
	ls := o.levels(steps, "A")
	if l := ls[8]; !l.final || l.verdict != undecided || l.good != 297 || l.count != 300 {
		t.Errorf("level 8 pooled: %+v, want final and undecided on 297 of 300", *l)
	}
	if lo, hi := bracket(ls); lo != 4 || hi <= 4 || hi >= 8 {
		t.Errorf("bracket [%g, %g); want 4 the highest level meeting the SLO, the search gone on below 8", lo, hi)
	}
}

// TestFixedLevelsExtendUndecided (issue 46, item 14): a fixed level whose
// interval straddles the target is run again, pooled, up to
// MaxExtensions times, right after its own repeats; still undecided, it
// is not the highest level meeting the SLO (before, fixed levels were
// never extended and passed by their point estimate).
func TestFixedLevelsExtendUndecided(t *testing.T) {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Levels, o.Recovery, o.MaxExtensions = []float64{4, 8, 16}, false, 2
	steps := simulate(t, o, func(level float64, _ int) (int, int) {
		switch level {
		case 4:
			return 1000, 1000
		case 8:
			return 99, 100
		}
		return 10, 100
	})
	var got []string
	for _, s := range steps {
		got = append(got, fmt.Sprintf("%s:%g", s.Purpose, s.Level))
	}
	if want := "level:4 level:8 extend:8 extend:8 level:16"; strings.Join(got, " ") != want {
		t.Errorf("steps %v, want %s", got, want)
	}
	ls := o.levels(steps, "A")
	if l := ls[8]; !l.final || l.verdict != undecided {
		t.Errorf("level 8: %+v, want final and undecided", *l)
	}
	if lo, hi := bracket(ls); lo != 4 || hi != 8 {
		t.Errorf("bracket [%g, %g]; want [4, 8], closed at the undecided 8: 8 is not shown to meet the SLO", lo, hi)
	}
}

// TestFixedLevelsInterleaveABBA: two configurations alternate which goes
// first, across levels and repeats.
func TestFixedLevelsInterleaveABBA(t *testing.T) {
	for _, c := range []struct {
		levels  []float64
		repeats int
		want    string
	}{
		{[]float64{1, 2}, 1, "A1 B1 B2 A2"},
		{[]float64{1}, 2, "A1 B1 B1 A1"},
		{[]float64{1, 2}, 2, "A1 B1 B1 A1 A2 B2 B2 A2"},
	} {
		o := DefaultOptions()
		o.Configs = []Config{{Name: "A"}, {Name: "B"}}
		o.Levels, o.Repeats, o.Recovery = c.levels, c.repeats, false
		steps := simulate(t, o, func(float64, int) (int, int) { return 1000, 1000 }) // decisive: no extension
		var got []string
		for _, s := range steps {
			got = append(got, fmt.Sprintf("%s%g", s.Config, s.Level))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("levels %v × %d: order %v, want %s", c.levels, c.repeats, got, c.want)
		}
	}
}

// TestRecoveryFollowsTheFirstFailure: the recovery step comes right after
// the first failing step, at the highest level that passed, once.
func TestRecoveryFollowsTheFirstFailure(t *testing.T) {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Levels = []float64{1, 2, 4, 8}
	steps := simulate(t, o, func(level float64, _ int) (int, int) {
		if level <= 2 {
			return 1000, 1000
		}
		return 0, 1000
	})
	var got []string
	for _, s := range steps {
		got = append(got, fmt.Sprintf("%s:%g", s.Purpose, s.Level))
	}
	if want := "level:1 level:2 level:4 recovery:2 level:8"; strings.Join(got, " ") != want {
		t.Errorf("steps %v, want %s", got, want)
	}
}

// TestBoundFormula pins the documented bound for the default search.
func TestBoundFormula(t *testing.T) {
	s := DefaultSearch(1)
	// walk: ⌊log2(4096)⌋ + 2 = 14; bisect: ⌈log2(ln 2 / ln 1.05)⌉ = ⌈3.83⌉ = 4;
	// (14 + 4) × 3 + 1 = 55.
	if got := s.Bound(2); got != 55 {
		t.Errorf("bound %d, want 55", got)
	}
	if math.Abs(round4(12.34567)-12.35) > 1e-12 {
		t.Errorf("round4(12.34567) = %v", round4(12.34567))
	}
}

// TestUndecidedLevelsAreNotCounted (issue 46, item 14): a result whose
// lowest level not passing is undecided names it, brackets the limit
// [4, 8] closed at it, and the summary says "undecided" where it said
// "pass (point estimate)" and counted 8 as the highest level meeting the
// SLO.
func TestUndecidedLevelsAreNotCounted(t *testing.T) {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Levels, o.Recovery, o.MaxExtensions = []float64{4, 8}, false, 0
	steps := simulate(t, o, func(level float64, _ int) (int, int) {
		if level == 4 {
			return 1000, 1000
		}
		return 99, 100
	})
	r := Result{Config: "A", Mode: o.Mode}
	for _, lv := range []float64{4, 8} {
		l := o.levels(steps, "A")[lv]
		_, ci := o.judge(l.good, l.count)
		r.Levels = append(r.Levels, LevelStat{Level: lv, Counted: l.count, Good: l.good, Verdict: l.verdict, Judged: judgedHow(l), AttainmentCI: ci,
			Attainment: float64(l.good) / float64(l.count)})
	}
	r.setBracket(o.levels(steps, "A"), o.Attainment)
	if r.MaxLevel == nil || *r.MaxLevel != 4 || r.Bracket != [2]float64{4, 8} || len(r.Undecided) != 1 || r.Undecided[0] != 8 {
		t.Fatalf("result %+v; want the highest level meeting the SLO 4, bracket [4, 8], 8 undecided", r)
	}
	var b strings.Builder
	if err := WriteSummary(&b, &Record{Plan: Plan{Confidence: 0.95, Attainment: 0.99}, Results: []Result{r}}); err != nil {
		t.Fatal(err)
	}
	txt := b.String()
	for _, want := range []string{"8: undecided (interval)", "highest level meeting the SLO: 4; the limit lies in [4, 8]",
		"8 is undecided: its attainment interval [", "straddles 99.00%; not counted as meeting the SLO"} {
		if !strings.Contains(txt, want) {
			t.Errorf("summary lacks %q:\n%s", want, txt)
		}
	}
	if strings.Contains(txt, "point estimate") {
		t.Errorf("summary still judges by the point estimate:\n%s", txt)
	}
}

// TestBracketRule: the limit's bracket from pooled, final levels (P pass,
// F fail, U undecided for good): lo is the highest pass below the lowest
// fail, hi the lowest fail or, if lower, the lowest undecided level above
// lo; an undecided level below lo bounds nothing, and a pass above a fail
// is noise (before, the lowest level not passing, undecided included,
// was hi, whatever passed above it).
func TestBracketRule(t *testing.T) {
	for _, c := range []struct {
		levels string
		lo, hi float64
	}{
		{"1U 2U 4P 8P 16F", 8, 16},
		{"4P 8U 16F", 4, 8},
		{"1P 2U 4P 8F", 4, 8},
		{"1U 2U", 0, 1},
		{"1U 2F", 0, 1},
		{"1F 2U", 0, 1},
		{"1P 2F 4P", 1, 2},
		{"1P 2P", 2, 0},
		{"1P 2U 4P", 4, 0},
		{"1F", 0, 1},
		{"1P 2P 4U 8U", 2, 4},
	} {
		ls := map[float64]*level{}
		for _, f := range strings.Fields(c.levels) {
			var v float64
			var verdict string
			fmt.Sscanf(f[:len(f)-1], "%g", &v)
			switch f[len(f)-1] {
			case 'P':
				verdict = pass
			case 'F':
				verdict = fail
			case 'U':
				verdict = undecided
			}
			ls[v] = &level{value: v, verdict: verdict, final: true}
		}
		if lo, hi := bracket(ls); lo != c.lo || hi != c.hi {
			t.Errorf("%s: bracket [%g, %g], want [%g, %g]", c.levels, lo, hi, c.lo, c.hi)
		}
	}
}

// TestUndecidedLowLevelsBoundNothing (the guide's own sweep): rates 1, 2,
// 4, 8 and 16 in 60-second steps against a server good up to 8 req/s.
// At 1 and 2 req/s no step, even extended, sends the 368 requests a pass
// at 99% needs: they end undecided. 4 and 8 pass, 16 fails: the limit
// lies in [8, 16) (before: [0, 1], "no level passed: the limit is below
// 1").
func TestUndecidedLowLevelsBoundNothing(t *testing.T) {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Levels, o.Recovery, o.StepDuration = []float64{1, 2, 4, 8, 16}, false, time.Minute
	steps := simulate(t, o, func(level float64, _ int) (int, int) {
		n := int(level * 60)
		if level <= 8 {
			return n, n
		}
		return n / 2, n
	})
	var got []string
	for _, s := range steps {
		got = append(got, fmt.Sprintf("%s:%g", s.Purpose, s.Level))
	}
	if want := "level:1 extend:1 extend:1 level:2 extend:2 extend:2 level:4 extend:4 level:8 level:16"; strings.Join(got, " ") != want {
		t.Errorf("steps %v, want %s", got, want)
	}
	r := resultOf(o, steps)
	if r.MaxLevel == nil || *r.MaxLevel != 8 || r.Bracket != [2]float64{8, 16} || fmt.Sprint(r.Undecided) != "[1 2]" {
		t.Fatalf("max level %v, bracket %v, undecided %v; want 8, [8 16], [1 2]", r.MaxLevel, r.Bracket, r.Undecided)
	}
	txt := summary(t, r)
	for _, want := range []string{"highest level meeting the SLO: 8; the limit lies in [8, 16)\n",
		"1 is undecided: its attainment interval [", "below 8, the highest level that passed, it bounds nothing"} {
		if !strings.Contains(txt, want) {
			t.Errorf("summary lacks %q:\n%s", want, txt)
		}
	}
	for _, bad := range []string{"no level passed", "below 1"} {
		if strings.Contains(txt, bad) {
			t.Errorf("summary says %q:\n%s", bad, txt)
		}
	}
}

// TestNothingDecidedSaysSo: with no level passing and none failing, the
// summary says no level was shown to meet the SLO and names the undecided
// ones; it never says one failed or that the limit is below one.
func TestNothingDecidedSaysSo(t *testing.T) {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Levels, o.Recovery, o.StepDuration = []float64{1, 2}, false, time.Minute
	steps := simulate(t, o, func(level float64, _ int) (int, int) { n := int(level * 60); return n, n })
	r := resultOf(o, steps)
	txt := summary(t, r)
	if !strings.Contains(txt, "no level was shown to meet the SLO (undecided: 1, 2)") {
		t.Errorf("summary lacks what was not shown:\n%s", txt)
	}
	for _, bad := range []string{"failed", "no level passed", "is below"} {
		if strings.Contains(txt, bad) {
			t.Errorf("summary says %q:\n%s", bad, txt)
		}
	}
}

// resultOf is the result setBracket gives the steps of configuration A.
func resultOf(o Options, steps []Step) Result {
	r := Result{Config: "A", Mode: o.Mode}
	ls := o.levels(steps, "A")
	for _, lv := range slices.Sorted(maps.Keys(ls)) {
		l := ls[lv]
		_, ci := o.judge(l.good, l.count)
		r.Levels = append(r.Levels, LevelStat{Level: lv, Counted: l.count, Good: l.good, Verdict: l.verdict, Judged: judgedHow(l), AttainmentCI: ci,
			Attainment: float64(l.good) / float64(l.count)})
	}
	r.setBracket(ls, o.Attainment)
	return r
}

// summary is WriteSummary's text of one result.
func summary(t *testing.T, r Result) string {
	t.Helper()
	var b strings.Builder
	if err := WriteSummary(&b, &Record{Plan: Plan{Confidence: 0.95, Attainment: 0.99}, Results: []Result{r}}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSearchNeverRerunsAFinalLevel: levels between 20 and 24 req/s meet
// the SLO for 99% of their requests (undecided however long), above 24
// half. The search bisects below an undecided level as below a failing
// one, never runs a final level again, ends with the bracket closed at
// an undecided level and says so; a search started at 1 req/s in
// 60-second steps, where no pass is possible, shrinks saying its levels
// stayed undecided (before: "failed with nothing passing below it").
func TestSearchNeverRerunsAFinalLevel(t *testing.T) {
	o := searchOptions(4)
	o.Recovery, o.StepDuration = false, time.Minute
	steps := simulate(t, o, func(level float64, _ int) (int, int) {
		n := int(level * 60)
		switch {
		case level <= 20:
			return n, n
		case level <= 24:
			return n * 99 / 100, n
		}
		return n / 2, n
	})
	seen := map[float64]bool{}
	for _, s := range steps {
		if seen[s.Level] && s.Purpose != "extend" {
			t.Errorf("step %d runs %g again as %s", s.Index, s.Level, s.Purpose)
		}
		seen[s.Level] = true
	}
	ls := o.levels(steps, "A")
	lo, hi := bracket(ls)
	if lo > 20 || lo < 20/(1+o.Search.Resolution) || hi <= 20 || hi > 24 || ls[hi].verdict != undecided {
		t.Errorf("bracket [%g, %g] (hi %s); want 20 within it, hi undecided", lo, hi, ls[hi].verdict)
	}
	_, why, _ := o.planNext(steps)
	if want := fmt.Sprintf("the limit lies in [%g, %g], within the resolution", lo, hi); !strings.HasPrefix(why, want) {
		t.Errorf("the search ends %q; want %q", why, want)
	}

	o = searchOptions(1)
	o.Recovery, o.StepDuration = false, time.Minute
	steps = simulate(t, o, func(level float64, _ int) (int, int) { n := int(level * 60); return n, n })
	_, why, _ = o.planNext(steps[:3])
	if want := "1 stayed undecided with nothing passing below it: shrink ÷2 to 0.5"; why != want {
		t.Errorf("after 1 stayed undecided: %q; want %q", why, want)
	}
	_, why, _ = o.planNext(steps)
	if !strings.HasPrefix(why, "no level down to 0.03125 was shown to meet the SLO (0.03125 stayed undecided)") || strings.Contains(why, "failed") {
		t.Errorf("the search ends %q", why)
	}
}

// TestExtensionsAlternate: two configurations whose fixed level stays
// undecided run their extensions alternating which goes first, as their
// repeats do (A B | B A | A B); before, A ran all of its extensions
// before B (A B | A A B B).
func TestExtensionsAlternate(t *testing.T) {
	for _, c := range []struct {
		levels  []float64
		repeats int
		want    string
	}{
		{[]float64{4}, 1, "A4 B4 B4 A4 A4 B4"},
		{[]float64{4}, 2, "A4 B4 B4 A4 A4 B4 B4 A4"},
		{[]float64{4, 8}, 1, "A4 B4 B4 A4 A4 B4 B8 A8 A8 B8 B8 A8"},
	} {
		o := DefaultOptions()
		o.Configs = []Config{{Name: "A"}, {Name: "B"}}
		o.Levels, o.Repeats, o.Recovery, o.MaxExtensions = c.levels, c.repeats, false, 2
		steps := simulate(t, o, func(float64, int) (int, int) { return 99, 100 }) // undecided however often
		var got []string
		for _, s := range steps {
			got = append(got, fmt.Sprintf("%s%g", s.Config, s.Level))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("levels %v × %d: order %v, want %s", c.levels, c.repeats, got, c.want)
		}
	}
}

// TestSearchLevelsFinalAfterOnePlusExtensions: a searched level runs once
// and then at most MaxExtensions times, as Search.BoundFor counts
// (before, Repeats runs were counted in, so search_bound_steps was
// understated), and a search with Repeats is refused: repeats are for
// fixed levels.
func TestSearchLevelsFinalAfterOnePlusExtensions(t *testing.T) {
	o := searchOptions(4)
	o.Repeats, o.MaxExtensions = 3, 2
	var done []Step
	for i := range 3 {
		done = append(done, Step{Index: i + 1, Config: "A", Level: 4, Purpose: "grow", Status: "done", Good: 99, Counted: 100})
	}
	if l := o.levels(done, "A")[4]; !l.final || l.verdict != undecided {
		t.Errorf("after 1 + 2 runs: %+v; want final and undecided", *l)
	}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "Repeats") {
		t.Errorf("a search with 3 repeats: %v; want it refused, naming Repeats", err)
	}
}
