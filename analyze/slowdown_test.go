package analyze

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// TestSessionSlowdown: against a baseline where sessions s1, s2, s3 took
// 100, 200 and 300 ms, the run's took 200, 600 and 300 ms: slowdowns 2,
// 3 and 1, so p50 and mean are 2 exactly and max 3 (type 7 on [1 2 3]).
// s4 is only in the run, s5 only in the baseline, s6 timed out in the
// run: each counted apart, none in the distribution. A streamed analysis
// reports the same.
func TestSessionSlowdown(t *testing.T) {
	var run, base sessionRows
	for _, s := range []struct {
		id                 string
		baseMs, runMs, gap int64
	}{{"s1", 100, 200, 0}, {"s2", 200, 600, 1000}, {"s3", 300, 300, 2000}} {
		base.add(s.id, s.gap, s.gap+50, trace.OutcomeOK)
		base.add(s.id, s.gap+60, s.gap+s.baseMs, trace.OutcomeOK)
		run.add(s.id, s.gap, s.gap+80, trace.OutcomeOK)
		run.add(s.id, s.gap+10, s.gap+s.runMs, trace.OutcomeOK)
	}
	run.pair("s4", 3000)
	base.pair("s5", 3000)
	for _, rows := range []*sessionRows{&run, &base} {
		rows.add("s6", 4000, 4100, trace.OutcomeOK)
	}
	run.add("s6", 4100, 4200, trace.OutcomeTimeout)
	base.add("s6", 4100, 4200, trace.OutcomeOK)
	runDir, baseDir := writeRunAndBaseline(t, run, base)

	rep, err := Analyze([]string{runDir}, Options{Percentiles: []float64{50, 90, 99}, Baseline: baseDir})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.SessionSlowdown
	if s == nil || s.Matched != 3 || s.OnlyInRun != 1 || s.OnlyInBaseline != 1 || s.Incomplete != 1 || s.Slowdown.N != 3 || s.Baseline != baseDir {
		t.Fatalf("%+v; want 3 matched, 1 only in the run, 1 only in the baseline, 1 incomplete", s)
	}
	d := s.Slowdown
	if q := d.Quantiles[0]; q.P != 50 || math.Abs(q.Value-2) > 1e-12 || math.Abs(d.Mean-2) > 1e-12 || d.Max != 3 {
		t.Errorf("slowdown p50 %v mean %v max %v; want 2, 2, 3", q.Value, d.Mean, d.Max)
	}
	if len(d.Quantiles) != 3 || d.Quantiles[0].Interval != intervalOrderName {
		t.Errorf("quantiles %+v; want p50, p90, p99 with order-statistic intervals", d.Quantiles)
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if txt := b.String(); !strings.Contains(txt, "session slowdown against "+baseDir) || !strings.Contains(txt, "p50 ≥2.00") ||
		!strings.Contains(txt, "1 only in the run, 1 only in the baseline, 1 with a request not ok") {
		t.Errorf("table lacks the slowdown line:\n%s", txt)
	}
	streamed, err := Analyze([]string{runDir}, Options{Percentiles: []float64{50}, Baseline: baseDir, InMemoryRows: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := streamed.SessionSlowdown; streamed.Streamed == nil || s == nil || s.Matched != 3 || s.Slowdown.Quantiles[0].Value != d.Quantiles[0].Value {
		t.Errorf("streamed: %+v; want the same slowdown", s)
	}
	without, err := Analyze([]string{runDir}, Options{})
	if err != nil || without.SessionSlowdown != nil {
		t.Errorf("without a baseline: %v; want no slowdown", err)
	}
}

// TestSessionSlowdownRefused: a baseline that is not a run directory, or
// that shares no session with the run, is an error naming the option.
func TestSessionSlowdownRefused(t *testing.T) {
	var run, other sessionRows
	run.pair("s1", 0)
	other.pair("x1", 0)
	runDir, otherDir := writeRunAndBaseline(t, run, other)
	for _, c := range []struct{ baseline, want string }{
		{filepath.Dir(runDir), "not a servetrace run directory"},
		{otherDir, "no session is complete in both runs"},
	} {
		_, err := Analyze([]string{runDir}, Options{Baseline: c.baseline})
		if oe, ok := opterr.As(err); !ok || oe.Field != "Baseline" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("baseline %s: %v; want a Baseline option error saying %q", c.baseline, err, c.want)
		}
	}
}

// pair adds a session of two ok requests of 100 ms each from atMs.
func (rows *sessionRows) pair(session string, atMs int64) {
	rows.add(session, atMs, atMs+100, trace.OutcomeOK)
	rows.add(session, atMs+100, atMs+200, trace.OutcomeOK)
}

// writeRunAndBaseline writes a run's rows and its baseline's as two run
// directories of one parent.
func writeRunAndBaseline(t *testing.T, run, base sessionRows) (runDir, baseDir string) {
	t.Helper()
	dir := t.TempDir()
	runDir, baseDir = filepath.Join(dir, "loaded"), filepath.Join(dir, "alone")
	writeRun(t, runDir, "loaded", run, 0)
	writeRun(t, baseDir, "alone", base, 0)
	return runDir, baseDir
}
