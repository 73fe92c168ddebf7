package analyze

import (
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestProbeAccuracyByWindow: 100 probes in the first 10 s all right, 100
// in the next with 30 wrong, 5 failed and a warmup probe beside them:
// 170 of 200 graded right overall, 100% then 70% by window, the failures
// counted apart, the workload's own requests not graded.
func TestProbeAccuracyByWindow(t *testing.T) {
	var rows []trace.Result
	add := func(at time.Duration, kind string, outcome string, correct *bool, warm bool) {
		sent, first, done := int64(at), int64(at+20*time.Millisecond), int64(at+50*time.Millisecond)
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: "r" + time.Duration(len(rows)).String()},
			Shape:  trace.Shape{InputTokens: 10, OutputTokens: 4, MaxTokens: 4, API: trace.APIChat, Stream: true, N: 1},
			SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{20e6, 30e6, 40e6, 50e6},
			ObservedOutputTokens: 4, Outcome: outcome, Probe: kind, ProbeCorrect: correct, Warmup: warm})
	}
	yes, no := true, false
	for i := range 100 {
		add(time.Duration(i)*100*time.Millisecond, "sort", trace.OutcomeOK, &yes, false)
		add(time.Duration(i)*100*time.Millisecond+time.Millisecond, "", trace.OutcomeOK, nil, false)
	}
	for i := range 100 {
		c := &yes
		if i%10 < 3 {
			c = &no
		}
		add(10*time.Second+time.Duration(i)*100*time.Millisecond, "copy", trace.OutcomeOK, c, false)
	}
	for i := range 5 {
		add(15*time.Second+time.Duration(i)*time.Millisecond, "copy", trace.OutcomeTimeout, nil, false)
	}
	add(0, "copy", trace.OutcomeOK, &no, true)
	dir := t.TempDir()
	writeRun(t, dir, "probes", rows, 0)
	rep, err := Analyze([]string{dir}, Options{Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Probes
	if p == nil {
		t.Fatal("no probes in the report")
	}
	if p.Sent != 205 || p.Failed != 5 || p.Graded != 200 || p.Correct != 170 {
		t.Errorf("sent %d failed %d graded %d correct %d; want 205, 5, 200, 170", p.Sent, p.Failed, p.Graded, p.Correct)
	}
	if len(p.Windows) != 2 || p.Windows[0].Correct != 100 || p.Windows[1].Correct != 70 || p.Windows[1].Graded != 100 {
		t.Fatalf("windows %+v; want 100/100 then 70/100", p.Windows)
	}
	if w := p.Windows[1]; w.Lo > 0.7 || w.Hi < 0.7 || w.Hi > 0.8 {
		t.Errorf("second window's interval [%g, %g]; want it around 0.7 and under 0.8", w.Lo, w.Hi)
	}
	if k := p.ByKind["sort"]; k == nil || k.Correct != 100 {
		t.Errorf("by kind %+v", p.ByKind)
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "sent from 10 s: 70.0%") || !strings.Contains(b.String(), "85.0%") {
		t.Errorf("the table does not say the accuracy by window:\n%s", b.String())
	}
}
