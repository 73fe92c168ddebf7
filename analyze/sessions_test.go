package analyze

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
)

// TestSessionMakespans: sessions of 400 and 700 ms (first send to last
// answer, worked out by hand), one left out for a failed request, one of
// a single request and requests of no session not counted; p50 550 ms.
func TestSessionMakespans(t *testing.T) {
	var rows sessionRows
	add := rows.add
	add("s1", 0, 50, trace.OutcomeOK)
	add("s1", 100, 400, trace.OutcomeOK)
	add("s2", 1000, 1200, trace.OutcomeOK)
	add("s2", 1250, 1500, trace.OutcomeOK)
	add("s2", 1300, 1700, trace.OutcomeOK)
	add("s3", 2000, 2100, trace.OutcomeOK)
	add("s3", 2200, 2300, trace.OutcomeTimeout)
	add("s4", 3000, 3100, trace.OutcomeOK)
	add("", 3000, 9000, trace.OutcomeOK)
	dir := t.TempDir()
	writeRun(t, dir, "run", rows, 0)
	tallies := newProbeSessionTap(0)
	tp := tallies.tap()
	if err := forEachResultBatch([]string{dir}, tp.columns, tp.fn); err != nil {
		t.Fatal(err)
	}
	s := tallies.sessions.result([]float64{50})
	if s == nil || s.Sessions != 3 || s.Requests != 7 || s.Incomplete != 1 || s.MakespanMs.N != 2 {
		t.Fatalf("%+v; want 3 sessions of 7 requests, 1 incomplete, 2 measured", s)
	}
	if q := s.MakespanMs.Quantiles[0]; math.Abs(q.Value-550) > 1e-9 || math.Abs(s.MakespanMs.Mean-550) > 1e-9 || s.MakespanMs.Max != 700 {
		t.Errorf("makespan p50 %v mean %v max %v; want 550, 550, 700", q.Value, s.MakespanMs.Mean, s.MakespanMs.Max)
	}
	if txt := sessionsText(s); !strings.Contains(txt, "3 of 7 requests") || !strings.Contains(txt, "1 with a request not ok") {
		t.Errorf("text %q", txt)
	}
}

// sessionRows builds result rows of sessions, each request given as its
// session, sent and done in ms, and outcome.
type sessionRows []trace.Result

func (rows *sessionRows) add(session string, sentMs, doneMs int64, outcome string) {
	sent, done := sentMs*1e6, doneMs*1e6
	*rows = append(*rows, trace.Result{Identity: trace.Identity{RequestID: "r" + string(rune('a'+len(*rows))), SessionID: session},
		Shape:  trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, N: 1},
		SentNs: &sent, DoneNs: &done, Outcome: outcome})
}

// TestBreakdownByRole: --by role groups requests by their part in an
// agent graph, those without one as "(none)".
func TestBreakdownByRole(t *testing.T) {
	var rows []trace.Result
	for i, role := range []string{"planner", "sub-agent", "sub-agent", "", "sub-agent", "planner", "sub-agent", "", "sub-agent", "planner"} {
		sent, first, done := int64(i)*100e6, int64(i)*100e6+20e6, int64(i)*100e6+50e6
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: "r" + string(rune('a'+i))}, Role: role,
			Shape:  trace.Shape{InputTokens: 4, OutputTokens: 2, MaxTokens: 2, API: trace.APIChat, Stream: true, N: 1},
			SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{20e6, 50e6},
			ObservedOutputTokens: 2, Outcome: trace.OutcomeOK})
	}
	dir := t.TempDir()
	writeRun(t, dir, "run", rows, 0)
	rep, err := Analyze([]string{dir}, Options{By: []string{"role"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, g := range rep.Breakdowns["role"] {
		got[g.Value] = g.Counted
	}
	if got["planner"] != 3 || got["sub-agent"] != 5 || got["(none)"] != 2 {
		t.Errorf("groups %v; want planner 3, sub-agent 5, (none) 2", got)
	}
}

// TestPrefixCacheHitByTurn: the share of prompt tokens the server's cache
// served, by turn, from usage (hand-computed: turn 0 none of 2,000;
// turn 1 1,536 of 2,048; turn 2's only ok request said nothing), the
// same whether the rows are held or streamed.
func TestPrefixCacheHitByTurn(t *testing.T) {
	var rows []trace.Result
	for i, r := range []struct {
		turn           int32
		prompt, cached int64
		ok             bool
	}{{0, 1000, 0, true}, {0, 1000, 0, true}, {1, 1024, 512, true}, {1, 1024, 1024, true}, {1, 1024, 1024, false}, {2, 900, -1, true}} {
		sent, first, done := int64(i)*100e6, int64(i)*100e6+20e6, int64(i)*100e6+50e6
		res := trace.Result{Identity: trace.Identity{RequestID: fmt.Sprint("r", i), SessionID: "s", Turn: r.turn},
			Shape:  trace.Shape{InputTokens: r.prompt, OutputTokens: 2, MaxTokens: 2, API: trace.APIChat, Stream: true, N: 1},
			SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{20e6, 50e6},
			ObservedOutputTokens: 2, Outcome: trace.OutcomeOK, UsagePromptTokens: new(r.prompt)}
		if r.cached >= 0 {
			res.UsageCachedTokens = new(r.cached)
		}
		if !r.ok {
			res.Outcome, res.Error = trace.OutcomeTimeout, "timed out"
		}
		rows = append(rows, res)
	}
	dir := t.TempDir()
	writeRun(t, dir, "run", rows, 0)
	for _, inMemory := range []int{0, 1} {
		rep, err := Analyze([]string{dir}, Options{By: []string{"turn"}, InMemoryRows: inMemory})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, g := range rep.Breakdowns["turn"] {
			got[g.Value] = -1
			if g.PrefixCacheHit != nil {
				got[g.Value] = *g.PrefixCacheHit
			}
		}
		if want := map[string]float64{"0": 0, "1": 0.75, "2": -1}; !maps.Equal(got, want) {
			t.Errorf("in-memory rows %d: cache hit by turn %v, want %v", inMemory, got, want)
		}
		var text strings.Builder
		if err := WriteTable(&text, rep); err != nil || !strings.Contains(text.String(), "cache hit %") || !strings.Contains(text.String(), "75.0") {
			t.Errorf("the table shows no cache hit column (%v):\n%s", err, text.String())
		}
	}
}

// TestLongSessionsHeldFixedSize (issue 46, item 5): 150,000 sessions of
// two requests with distinct session ids of 1,000 bytes, streamed, and
// matched against themselves as the baseline, within 640 MiB: a session
// is held as a hash of its id, whatever the id's length (405 MB of RSS;
// before, each id was a map key twice over, the run's and the
// baseline's: 908 MB).
func TestLongSessionsHeldFixedSize(t *testing.T) {
	memcap.Run(t, 640<<20, func(t *testing.T) {
		const sessions = 150_000
		dir := filepath.Join(t.TempDir(), "run")
		w, err := trace.NewResultWriter(dir, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 * sessions {
			sent, done := int64(i)*1e6, int64(i)*1e6+5e5
			if err := w.Write(trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", i), SessionID: fmt.Sprintf("%01000d", i/2)},
				Shape:  trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, N: 1},
				SentNs: &sent, DoneNs: &done, Outcome: trace.OutcomeOK, RunID: "run"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		ri := trace.RunInfo{SchemaVersion: 1, RunID: "run", Complete: true, Parts: w.Parts()}
		if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
			t.Fatal(err)
		}
		rep, err := Analyze([]string{dir}, Options{InMemoryRows: 10_000, Baseline: dir, Bootstrap: BootstrapOptions{Resamples: 100}})
		if err != nil {
			t.Fatal(err)
		}
		if s := rep.Sessions; s == nil || s.Sessions != sessions || s.MakespanMs.N != sessions || s.MakespanMs.Max != 1.5 {
			t.Errorf("sessions %+v; want %d of makespan 1.5 ms", s, sessions)
		}
		if s := rep.SessionSlowdown; s == nil || s.Matched != sessions || s.Slowdown.Max != 1 {
			t.Errorf("slowdown %+v; want %d matched, each 1", s, sessions)
		}
	})
}
