package analyze

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// writeRun writes rows as a run directory with the given id and offered
// rate.
func writeRun(t *testing.T, dir, id string, rows []trace.Result, offered float64) {
	t.Helper()
	w, err := trace.NewResultWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		r.RunID = id
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: id, Complete: true, OfferedRate: offered, Parts: w.Parts(), WorkloadSHA256: "w"}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		t.Fatal(err)
	}
}

// TestEnvelopeSweep: a FIFO server of 20 req/s (50 ms service), steps of
// 30 s at 5, 10, 15, 19, 25 and 30 req/s, then 10 req/s again, SLO TTFT
// 200 ms. Below capacity nothing queues (every request meets the SLO); above
// it the queue grows without bound. So: completed and goodput grow to 19,
// the knee is the 19 req/s step, the highest passing rate is 19 with the
// limit in [19, 25), and the last step shows recovery.
func TestEnvelopeSweep(t *testing.T) {
	dir := t.TempDir()
	var dirs []string
	for i, rate := range []float64{5, 10, 15, 19, 25, 30, 10} {
		rows := queueRun(50*time.Millisecond, []struct {
			until time.Duration
			rate  float64
		}{{30 * time.Second, rate}})
		d := filepath.Join(dir, fmt.Sprintf("step%d", i))
		writeRun(t, d, fmt.Sprintf("run-%d", i), rows, rate)
		dirs = append(dirs, d)
	}
	// At 95% attainment: a step passes once its interval's lower end
	// clears it, and the 150 requests of the 5 req/s step, all good,
	// give 97.6% (99% would need 368).
	env, err := FindEnvelope(dirs, EnvelopeOptions{Options: Options{SLO: SLO{TTFT: 200 * time.Millisecond}}, Attainment: 0.95})
	if err != nil {
		t.Fatal(err)
	}
	var rates []float64
	for _, s := range env.Steps {
		rates = append(rates, s.OfferedRate)
	}
	t.Logf("offered %v", rates)
	if len(env.Steps) != 7 || env.Steps[0].OfferedRate != 5 || env.Steps[6].OfferedRate != 30 {
		t.Fatalf("steps not ordered by offered rate: %v", rates)
	}
	if k := env.Knee; k < 0 || env.Steps[k].OfferedRate != 19 {
		t.Errorf("knee at step %d, want the 19 req/s step", k)
	}
	if env.MaxRateMeetingSLO == nil || *env.MaxRateMeetingSLO != 19 || env.MaxRateInterval != [2]float64{19, 25} {
		t.Errorf("max rate meeting the SLO %v in %v, want 19 in [19, 25)", env.MaxRateMeetingSLO, env.MaxRateInterval)
	}
	for _, s := range env.Steps {
		if s.OfferedRate <= 19 && (s.Attainment != 1 || s.CompletedRate < 0.9*s.OfferedRate) {
			t.Errorf("step %s at %v req/s: attainment %.3f, completed %.2f/s", s.Name, s.OfferedRate, s.Attainment, s.CompletedRate)
		}
		if s.OfferedRate >= 25 && s.MeetsSLO {
			t.Errorf("overloaded step at %v req/s met the SLO", s.OfferedRate)
		}
	}
	if !strings.HasPrefix(env.Recovery, "recovered") {
		t.Errorf("recovery: %s", env.Recovery)
	}
}

// TestBinomialCI checks the exact interval against values computed from
// the beta quantiles by hand (R: binom.test), and its edges.
func TestBinomialCI(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{
		// binom.test(0, 10): [0, 0.3084971]; binom.test(10, 10): [0.6915029, 1]
		{0, 10, 0, 0.3084971}, {10, 10, 0.6915029, 1},
		// binom.test(5, 10): [0.1870860, 0.8129140]
		{5, 10, 0.1870860, 0.8129140},
		// binom.test(99, 100): [0.9455406, 0.9997469]
		{99, 100, 0.9455406, 0.9997469},
	} {
		got := BinomialCI(c.k, c.n, 0.95)
		if math.Abs(got[0]-c.lo) > 1e-6 || math.Abs(got[1]-c.hi) > 1e-6 {
			t.Errorf("BinomialCI(%d, %d) = %v, want [%.7f, %.7f]", c.k, c.n, got, c.lo, c.hi)
		}
	}
	if got := BinomialCI(0, 0, 0.95); got != [2]float64{0, 1} {
		t.Errorf("no trials: %v, want [0, 1]", got)
	}
}

// TestEnvelopeUndecidedStepNotCounted (issue 46, item 14): a step of 99
// good requests in 100 meets a 99% target by its point estimate, but its
// exact 95% interval [94.55%, 99.97%] straddles it: undecided, it is not
// counted as meeting the SLO, and the highest rate meeting it is the step
// below (before, 10 req/s was counted).
func TestEnvelopeUndecidedStepNotCounted(t *testing.T) {
	dir := t.TempDir()
	var dirs []string
	for i, c := range []struct {
		rate     float64
		n, slow  int
		wantVerd string
	}{{5, 400, 0, "pass"}, {10, 100, 1, "undecided"}, {15, 100, 50, "fail"}} {
		var rows []trace.Result
		for k := range c.n {
			sent := int64(float64(k) / c.rate * 1e9)
			ttft := int64(50e6)
			if k < c.slow {
				ttft = 500e6
			}
			first, done := sent+ttft, sent+ttft+10e6
			rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", k)}, ScheduledNs: sent, AdmittedNs: sent,
				Shape:  trace.Shape{InputTokens: 4, OutputTokens: 2, MaxTokens: 2, API: trace.APIChat, Stream: true, N: 1},
				SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{ttft, ttft + 10e6},
				ObservedOutputTokens: 2, Outcome: trace.OutcomeOK})
		}
		d := filepath.Join(dir, fmt.Sprintf("step%d", i))
		writeRun(t, d, fmt.Sprintf("run-%d", i), rows, c.rate)
		dirs = append(dirs, d)
	}
	env, err := FindEnvelope(dirs, EnvelopeOptions{Options: Options{SLO: SLO{TTFT: 200 * time.Millisecond}}, Attainment: 0.99})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range env.Steps {
		got = append(got, s.Verdict)
	}
	if strings.Join(got, " ") != "pass undecided fail" || !env.Steps[0].MeetsSLO || env.Steps[1].MeetsSLO {
		t.Errorf("verdicts %v; want pass undecided fail, only the first meeting the SLO", got)
	}
	if env.MaxRateMeetingSLO == nil || *env.MaxRateMeetingSLO != 5 || env.MaxRateInterval != [2]float64{5, 10} {
		t.Errorf("max rate meeting the SLO %v in %v; want 5 in [5, 10]", env.MaxRateMeetingSLO, env.MaxRateInterval)
	}
	var b strings.Builder
	if err := WriteEnvelopeTable(&b, env); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"undecided", "the limit lies in [5.00, 10.00]", "step run-1 (10.00 req/s) is undecided: its attainment interval [94.55%, 99.97%] straddles 99.0%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// ttftSteps writes a run per step: n requests sent evenly at rate, all
// with TTFT 50 ms but the first slow ones, 500 ms.
func ttftSteps(t *testing.T, steps []struct {
	rate    float64
	n, slow int
}) []string {
	t.Helper()
	dir := t.TempDir()
	var dirs []string
	for i, c := range steps {
		var rows []trace.Result
		for k := range c.n {
			sent := int64(float64(k) / c.rate * 1e9)
			ttft := int64(50e6)
			if k < c.slow {
				ttft = 500e6
			}
			first, done := sent+ttft, sent+ttft+10e6
			rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", k)}, ScheduledNs: sent, AdmittedNs: sent,
				Shape:  trace.Shape{InputTokens: 4, OutputTokens: 2, MaxTokens: 2, API: trace.APIChat, Stream: true, N: 1},
				SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{ttft, ttft + 10e6},
				ObservedOutputTokens: 2, Outcome: trace.OutcomeOK})
		}
		d := filepath.Join(dir, fmt.Sprintf("step%d", i))
		writeRun(t, d, fmt.Sprintf("run-%d", i), rows, c.rate)
		dirs = append(dirs, d)
	}
	return dirs
}

// TestEnvelopeBracketRule: the envelope brackets the limit as a sweep
// does. Steps of one offered rate are pooled; lo is the highest rate that
// passed below the lowest failing one, hi that failing rate or, if lower,
// the lowest undecided rate above lo; an undecided rate below lo bounds
// nothing. Before, the first step that did not pass ended the search for
// the highest rate meeting the SLO: a short, undecided step at a low rate
// hid every pass above it ("no step met the SLO ... the limit is below
// 1.00 req/s"), and of two steps at one rate only the first was looked at.
func TestEnvelopeBracketRule(t *testing.T) {
	type step = struct {
		rate    float64
		n, slow int
	}
	for _, c := range []struct {
		name      string
		steps     []step
		max       float64 // 0: none
		interval  [2]float64
		undecided string
		want      []string
		wantNot   []string
	}{
		{"undecided low rates bound nothing", []step{{1, 60, 0}, {2, 120, 0}, {5, 400, 0}, {10, 400, 200}}, 5, [2]float64{5, 10}, "[1 2]",
			[]string{"highest rate meeting the SLO: 5.00 req/s; the limit lies in [5.00, 10.00) at this sweep's resolution", "below 5.00 req/s, the highest rate that passed, it bounds nothing"},
			[]string{"no step met the SLO", "below 1.00"}},
		{"a rate's steps pooled", []step{{5, 400, 0}, {10, 400, 0}, {10, 100, 1}, {15, 100, 50}}, 5, [2]float64{5, 10}, "[10]",
			[]string{"the limit lies in [5.00, 10.00] at this sweep's resolution (10.00 undecided)"}, nil},
		{"nothing passed or failed", []step{{1, 60, 0}, {2, 120, 0}}, 0, [2]float64{0, 1}, "[1 2]",
			[]string{"no step was shown to meet the SLO (undecided: 1.00, 2.00 req/s)"}, []string{"the limit is below", "no step met"}},
		{"nothing passed", []step{{1, 100, 50}, {2, 100, 50}}, 0, [2]float64{0, 1}, "[]",
			[]string{"no step met the SLO at 99.0% attainment: the limit is below 1.00 req/s"}, nil},
	} {
		env, err := FindEnvelope(ttftSteps(t, c.steps), EnvelopeOptions{Options: Options{SLO: SLO{TTFT: 200 * time.Millisecond}}, Attainment: 0.99})
		if err != nil {
			t.Fatal(err)
		}
		got := 0.0
		if env.MaxRateMeetingSLO != nil {
			got = *env.MaxRateMeetingSLO
		}
		if got != c.max || env.MaxRateInterval != c.interval || fmt.Sprint(env.UndecidedRates) != c.undecided {
			t.Errorf("%s: max rate %g in %v, undecided %v; want %g in %v, %s", c.name, got, env.MaxRateInterval, env.UndecidedRates, c.max, c.interval, c.undecided)
		}
		var b strings.Builder
		if err := WriteEnvelopeTable(&b, env); err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: table lacks %q:\n%s", c.name, want, b.String())
			}
		}
		for _, bad := range c.wantNot {
			if strings.Contains(b.String(), bad) {
				t.Errorf("%s: table says %q:\n%s", c.name, bad, b.String())
			}
		}
	}
}

// TestEnvelopeIntervalKeys: a step's attainment_ci95 is its 95% interval
// whatever the confidence asked, and attainment_ci the interval at that
// confidence, which judges it (before, attainment_ci95 held the interval
// at the confidence asked).
func TestEnvelopeIntervalKeys(t *testing.T) {
	dirs := ttftSteps(t, []struct {
		rate    float64
		n, slow int
	}{{5, 100, 1}, {10, 100, 50}})
	env, err := FindEnvelope(dirs, EnvelopeOptions{Options: Options{SLO: SLO{TTFT: 200 * time.Millisecond}}, Attainment: 0.9, Confidence: 0.99})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env.Steps[0])
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		CI95 [2]float64 `json:"attainment_ci95"`
		CI   [2]float64 `json:"attainment_ci"`
	}
	json.Unmarshal(b, &got)
	// binom.test(99, 100, conf.level = 0.95): [0.9455406, 0.9997469];
	// conf.level = 0.99: [0.9280423, …].
	if math.Abs(got.CI95[0]-0.9455406) > 1e-6 || math.Abs(got.CI[0]-0.9280423) > 1e-6 || env.Confidence != 0.99 {
		t.Errorf("attainment_ci95 %v, attainment_ci %v, confidence %v; want [0.9455, …], [0.9280, …] and 0.99", got.CI95, got.CI, env.Confidence)
	}
}
