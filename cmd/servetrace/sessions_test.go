package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// TestSessionMakespanGrowsWithLoad (issue 38): agent sessions (a planner,
// three sub-agents after it, a join after them) replayed against a
// simulator that runs two sequences at once take longer end to end when
// they come ten times as often, and analyze says so per session, with
// intervals; against the light run as its unloaded baseline, the heavy
// run's sessions are slower, each against itself, p50's interval above 1.
func TestSessionMakespanGrowsWithLoad(t *testing.T) {
	url := startFastSim(t, func(o *sim.Options) {
		o.Engine.Cost = sim.CostModel{IterBase: 2 * time.Millisecond}
		o.Engine.MaxNumSeqs = 2
	})
	dir := t.TempDir()
	var reqs []trace.Request
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	shape := trace.Shape{InputTokens: 16, OutputTokens: 8, MaxTokens: 8, API: trace.APIChat, Stream: true, N: 1}
	for s := range 20 {
		at := t0.Add(time.Duration(s) * 200 * time.Millisecond).UnixMicro()
		id := func(part string) string { return fmt.Sprintf("s%02d-%s", s, part) }
		session := fmt.Sprintf("s%02d", s)
		reqs = append(reqs, trace.Request{Identity: trace.Identity{RequestID: id("plan"), SessionID: session}, TS: at, Shape: shape})
		for k := range 3 {
			reqs = append(reqs, trace.Request{Identity: trace.Identity{RequestID: id(fmt.Sprint("sub", k)), SessionID: session, Turn: 1}, TS: at + 1,
				Shape: shape, ParentIDs: []string{id("plan")}})
		}
		reqs = append(reqs, trace.Request{Identity: trace.Identity{RequestID: id("join"), SessionID: session, Turn: 2}, TS: at + 2,
			Shape: shape, ParentIDs: []string{id("sub0"), id("sub1"), id("sub2")}})
	}
	wl := tracetest.WriteWorkload(t, reqs)
	makespan := func(name, speed string) analyze.Distribution {
		t.Helper()
		run := filepath.Join(dir, name)
		if code, _, errOut := runCLI(t, "replay", wl, "--target", url, "--speed", speed, "--out", run); code != 0 {
			t.Fatalf("replay %s: %s", name, errOut)
		}
		rep := analyzeJSON(t, run)
		if rep.Sessions == nil {
			t.Fatalf("analyze %s: no sessions", name)
		}
		if rep.Sessions.Sessions != 20 || rep.Sessions.MakespanMs.N != 20 {
			t.Errorf("%s: %+v; want 20 sessions measured", name, rep.Sessions)
		}
		return rep.Sessions.MakespanMs
	}
	p50 := func(d analyze.Distribution) analyze.Quantile {
		for _, q := range d.Quantiles {
			if q.P == 50 {
				return q
			}
		}
		t.Fatalf("no p50 in %+v", d)
		return analyze.Quantile{}
	}
	light, heavy := p50(makespan("light", "1")), p50(makespan("heavy", "10"))
	if light.CIHi == nil || heavy.CILo == nil || *heavy.CILo <= *light.CIHi {
		t.Errorf("session makespan p50: %.1f ms [%v] at one session per 200 ms, %.1f ms [%v] at one per 20 ms; want the second's interval above the first's",
			light.Value, light.CIHi, heavy.Value, heavy.CILo)
	}

	lightRun, heavyRun := filepath.Join(dir, "light"), filepath.Join(dir, "heavy")
	s := analyzeJSON(t, heavyRun, "--baseline", lightRun).SessionSlowdown
	if s == nil || s.Matched != 20 || s.OnlyInRun+s.OnlyInBaseline+s.Incomplete != 0 {
		t.Fatalf("slowdown against the light run: %+v; want 20 sessions matched, none apart", s)
	}
	if q := p50(s.Slowdown); q.CILo == nil || *q.CILo <= 1 {
		t.Errorf("session slowdown p50 %.2f, interval from %v; want it above 1", q.Value, q.CILo)
	} else {
		t.Logf("session slowdown p50 %.2f, interval from %.2f; mean %.2f, max %.2f", q.Value, *q.CILo, s.Slowdown.Mean, s.Slowdown.Max)
	}
	// Slowdown grows with load: at one session per 50 ms it is below the
	// overloaded run's.
	makespan("medium", "4")
	m := analyzeJSON(t, filepath.Join(dir, "medium"), "--baseline", lightRun).SessionSlowdown
	if m == nil || p50(m.Slowdown).Value >= p50(s.Slowdown).Value {
		t.Errorf("session slowdown at one session per 50 ms %+v; want its p50 below the p50 at one per 20 ms, %.2f", m, p50(s.Slowdown).Value)
	} else {
		t.Logf("session slowdown p50 %.2f at one session per 50 ms, %.2f at one per 20 ms", p50(m.Slowdown).Value, p50(s.Slowdown).Value)
	}
	if code, out, _ := runCLI(t, "analyze", heavyRun, "--baseline", lightRun); code != 0 || !strings.Contains(out, "session slowdown against "+lightRun) {
		t.Errorf("analyze --baseline: exit %d, no slowdown line:\n%s", code, out)
	}
	if code, _, errOut := runCLI(t, "analyze", heavyRun, "--baseline", dir); code == 0 || !strings.Contains(errOut, "--baseline") || !strings.Contains(errOut, "not a servetrace run directory") {
		t.Errorf("analyze --baseline of a directory without run.json: exit %d, %q; want an error naming --baseline", code, errOut)
	}
}
