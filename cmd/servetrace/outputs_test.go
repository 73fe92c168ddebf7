package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// TestCompareOutputsAgainstTheSimulator (issue 40): two simulators of one
// seed answer every greedy request alike, and compare --outputs says
// "identical"; a simulator corrupting a fifth of its answers is found
// changed, the injected share inside the reported interval, the streamed
// ones parting at their first event.
func TestCompareOutputsAgainstTheSimulator(t *testing.T) {
	dir := t.TempDir()
	const n = 300
	var reqs []trace.Request
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	zero := 0.0
	for i := range n {
		r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("q%03d", i)}, TS: t0.Add(time.Duration(i) * 2 * time.Millisecond).UnixMicro(),
			Shape:       trace.Shape{InputTokens: int64(20 + i%40), OutputTokens: 8, MaxTokens: 8, API: trace.APIChat, Stream: i%2 == 0, N: 1},
			Temperature: &zero}
		reqs = append(reqs, r)
	}
	wl := tracetest.WriteWorkload(t, reqs)
	salt := writeFile(t, dir, "salt.hex", []byte("00112233445566778899aabbccddeeff"))
	replayTo := func(name string, mod func(*sim.Options)) string {
		url := startFastSim(t, func(o *sim.Options) {
			o.Seed = 7
			if mod != nil {
				mod(o)
			}
		})
		run := filepath.Join(dir, name)
		if code, _, errOut := runCLI(t, "replay", wl, "--target", url, "--salt-file", salt, "--out", run); code != 0 {
			t.Fatalf("replay %s: %s", name, errOut)
		}
		return run
	}
	a, b := replayTo("a", nil), replayTo("b", nil)
	bad := replayTo("corrupt", func(o *sim.Options) { o.CorruptShare = 0.2 })
	compare := func(x, y string) analyze.GreedyAnswers {
		code, out, errOut := runCLI(t, "analyze", "compare", x, y, "--outputs", "--json")
		if code != 0 {
			t.Fatalf("compare: %s", errOut)
		}
		var c analyze.Comparison
		if err := json.Unmarshal([]byte(out), &c); err != nil || c.Outputs == nil {
			t.Fatalf("compare --json: %v, %.300s", err, out)
		}
		return c.Outputs.Greedy
	}
	if g := compare(a, b); g.Compared != n || g.Verdict != analyze.OutputsIdentical {
		t.Errorf("same seed: %d compared, verdict %s (%s); want %d, identical", g.Compared, g.Verdict, g.Why, n)
	}
	g := compare(a, bad)
	if g.Verdict != analyze.OutputsChanged || g.ChangedLo > 0.2 || g.ChangedHi < 0.2 {
		t.Errorf("a fifth corrupted: verdict %s, changed %.3f [%.3f, %.3f]; want changed, the interval holding 0.2", g.Verdict, g.ChangedShare, g.ChangedLo, g.ChangedHi)
	}
	// A corrupted answer is other words from the first: the streamed ones
	// (every other request) part at the first event.
	if p := g.PartedAt; p == nil || p.Answers == 0 || p.Answers > g.Compared-g.Identical || p.P50 != 0 {
		t.Errorf("where the corrupted answers part: %+v; want the streamed ones at event 0", p)
	}
}
