package analyze

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/trace"
)

// TestPhasesSplitByHand: 101 ok requests 100 ms apart. The first 90 take
// a TTFT of 100 ms (queue 10, prefill 80, the server's rest 9, outside the
// server 1) and an E2E of 2,000 ms (decode 1,908, 2 outside); the next 10
// a TTFT of 1,000 ms (queue 900, prefill 90, rest 9, outside 1) and an E2E
// of 3,000 ms (decode 2,008); the last has no span. By hand: over all 100
// joined, queue's mean share of TTFT is (90·0.1 + 10·0.9)/100 = 0.18 and
// prefill's (90·0.8 + 10·0.09)/100 = 0.729; the slowest 10% are the 10 slow
// ones, queue 0.9, prefill 0.09, rest 0.009, outside 0.001; of E2E they
// are queue 0.3, prefill 0.03, decode 2008/3000, outside 2/3000. The
// slowest 1% is one request: too few for a band.
func TestPhasesSplitByHand(t *testing.T) {
	dir := t.TempDir()
	var rows []trace.Result
	var phases []trace.ServerPhases
	for i := range 101 {
		slow := i >= 90 && i < 100
		ttft, e2e := int64(100e6), int64(2000e6)
		q, pf, dc := 0.010, 0.080, 1.908
		if slow {
			ttft, e2e = 1000e6, 3000e6
			q, pf, dc = 0.900, 0.090, 2.008
		}
		sent := int64(i) * 100e6
		first, done := sent+ttft, sent+e2e
		id := fmt.Sprintf("req-%d", i)
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: id}, ScheduledNs: sent, AdmittedNs: sent, SentNs: &sent,
			FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{ttft, e2e}, ObservedOutputTokens: 2,
			Outcome: trace.OutcomeOK, Shape: trace.Shape{Stream: true}})
		if i == 100 {
			continue
		}
		serverTTFT := float64(ttft)/1e9 - 0.001
		serverE2E := float64(e2e)/1e9 - 0.002
		phases = append(phases, trace.ServerPhases{TraceID: traceid.For("run-p", id).String(), Source: "vllm",
			QueueS: trace.Ptr(q), PrefillS: trace.Ptr(pf), DecodeS: trace.Ptr(dc), TTFTS: trace.Ptr(serverTTFT), E2ES: trace.Ptr(serverE2E)})
	}
	phases = append(phases, trace.ServerPhases{TraceID: traceid.For("another-run", "req-1").String(), Source: "vllm", TTFTS: trace.Ptr(5.0)})
	writeRun(t, dir, "run-p", rows, 10)
	if err := trace.WriteServerPhases(dir, phases); err != nil {
		t.Fatal(err)
	}
	rep, err := Analyze([]string{dir}, Options{Bootstrap: BootstrapOptions{Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Phases
	if p == nil || p.OK != 101 || p.Joined != 100 {
		t.Fatalf("phases %+v, want 100 of 101 ok requests joined", p)
	}
	if !within(p.ResidualMs.P50, 1, 1e-9) || !within(p.ResidualMs.P99, 1, 1e-9) {
		t.Errorf("residual %+v, want 1 ms", p.ResidualMs)
	}
	check := func(bands []PhaseBand, band string, n int, want map[string]float64) {
		t.Helper()
		for _, b := range bands {
			if b.Band != band {
				continue
			}
			if b.Requests != n {
				t.Errorf("%s: %d requests, want %d", band, b.Requests, n)
			}
			for _, s := range b.Shares {
				if w, ok := want[s.Phase]; ok && !within(s.Share, w, 1e-9) {
					t.Errorf("%s: %s share %.6f, want %.6f", band, s.Phase, s.Share, w)
				}
				if !(s.CI95[0] <= s.Share+1e-12 && s.Share <= s.CI95[1]+1e-12) {
					t.Errorf("%s: %s share %.4f outside its interval %v", band, s.Phase, s.Share, s.CI95)
				}
			}
			return
		}
		t.Errorf("no %s band in %+v", band, bands)
	}
	check(p.TTFT, "all", 100, map[string]float64{"queue": 0.18, "prefill": 0.729})
	check(p.TTFT, "slowest 10%", 10, map[string]float64{"queue": 0.9, "prefill": 0.09, "server_other": 0.009, "residual": 0.001})
	check(p.E2E, "slowest 10%", 10, map[string]float64{"queue": 0.3, "prefill": 0.03, "decode": 2008.0 / 3000, "server_other": 0, "residual": 2.0 / 3000})
	for _, b := range p.TTFT {
		if b.Band == "slowest 1%" {
			t.Errorf("a slowest-1%% band of %d requests", b.Requests)
		}
	}
	if !strings.Contains(p.Verdict, "90%") || !strings.Contains(p.Verdict, "queue") {
		t.Errorf("verdict %q, want the queue's 90%% named", p.Verdict)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "100 of 101 ok requests") {
		t.Errorf("notes %q do not say one request has no span", rep.Notes)
	}
	var text strings.Builder
	err = WriteTable(&text, rep)
	t.Log(text.String())
	if err != nil || !strings.Contains(text.String(), "where the time went") {
		t.Error("the text report has no \"where the time went\" block")
	}
}

// within reports whether a is within tol of b.
func within(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestCompareNamesThePhaseThatMoved: B's server queues 200 ms longer
// than A's at every request while prefill, decode and what lies outside
// the server stay as they were; compare finds server_queue_ms worse and
// the other phases not distinguishable.
func TestCompareNamesThePhaseThatMoved(t *testing.T) {
	side := func(id string, extraQueue float64) string {
		dir := t.TempDir()
		var rows []trace.Result
		var phases []trace.ServerPhases
		for i := range 400 {
			jitter := float64(i%7) * 0.001 // 0-6 ms, the same on both sides
			q, pf, dc := 0.010+jitter+extraQueue, 0.050+jitter, 0.500
			ttft := int64((q + pf + 0.002) * 1e9)
			e2e := ttft + int64(dc*1e9)
			sent := int64(i) * 50e6
			first, done := sent+ttft, sent+e2e
			rid := fmt.Sprintf("r%d", i)
			rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: rid}, ScheduledNs: sent, AdmittedNs: sent, SentNs: &sent,
				FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{ttft, e2e}, ObservedOutputTokens: 2,
				Outcome: trace.OutcomeOK, Shape: trace.Shape{Stream: true}})
			phases = append(phases, trace.ServerPhases{TraceID: traceid.For(id, rid).String(), Source: "vllm", QueueS: trace.Ptr(q),
				PrefillS: trace.Ptr(pf), DecodeS: trace.Ptr(dc), TTFTS: trace.Ptr(q + pf + 0.001)})
		}
		writeRun(t, dir, id, rows, 20)
		if err := trace.WriteServerPhases(dir, phases); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	c, err := Compare([]string{side("run-a", 0)}, []string{side("run-b", 0.2)}, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range c.Rows {
		if r.Stat != "p50" {
			continue
		}
		seen[r.Metric] = true
		want := VerdictInconclusive
		if r.Metric == "server_queue_ms" || r.Metric == "ttft_ms" || r.Metric == "e2e_ms" {
			want = VerdictWorse
		}
		if r.Verdict != want {
			t.Errorf("%s p50: %s (A %.2f, B %.2f), want %s", r.Metric, r.Verdict, r.A, r.B, want)
		}
	}
	for _, m := range PhaseMetrics {
		if !seen[m] {
			t.Errorf("no row for %s", m)
		}
	}
}
