package synth

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/servetrace/servetrace/internal/procstat"
	"github.com/servetrace/servetrace/trace"
)

// BenchmarkFitAgentSessions fits a trace of agent sessions (a chain of
// three tool turns, and a planner with two sub-agents and a join, by
// turns; SERVETRACE_FIT_SESSIONS sessions, default 100,000) with 16-block
// prompts growing by a block a turn, and reports rows/s and peak RSS:
// the cost of the session and agent-graph fit.
func BenchmarkFitAgentSessions(b *testing.B) {
	sessions := 100_000
	if v, err := strconv.Atoi(os.Getenv("SERVETRACE_FIT_SESSIONS")); err == nil && v > 0 {
		sessions = v
	}
	var rows []trace.Request
	block := int64(0)
	for s := range sessions {
		t0 := int64(1_735_689_600_000_000) + int64(s)*200_000 // a session every 0.2 s, overlapping
		prefix := make([]int64, 16)
		for i := range prefix {
			block++
			prefix[i] = block
		}
		add := func(k int, dt int64, parents []int, tool float64) {
			in := int64(16+k) * 512
			blocks := append(append([]int64(nil), prefix...), make([]int64, k)...)
			for i := 16; i < len(blocks); i++ {
				block++
				blocks[i] = block
			}
			r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("s%d-%d", s, k), SessionID: fmt.Sprintf("s%d", s), Model: "m"},
				TS: t0 + dt, Shape: trace.Shape{InputTokens: in, OutputTokens: 100, MaxTokens: 100, N: 1, API: trace.APIChat, PrefixBlocks: blocks}}
			for _, p := range parents {
				r.ParentIDs = append(r.ParentIDs, fmt.Sprintf("s%d-%d", s, p))
			}
			if tool > 0 {
				r.ToolMs = &tool
			}
			rows = append(rows, r)
		}
		add(0, 0, nil, 0)
		if s%2 == 0 {
			add(1, 3_000_000, []int{0}, 2000)
			add(2, 6_000_000, []int{1}, 2000)
			continue
		}
		add(1, 1_000_000, []int{0}, 0)
		add(2, 1_000_000, []int{0}, 0)
		add(3, 3_000_000, []int{0, 1, 2}, 0)
	}
	slices.SortStableFunc(rows, func(a, b trace.Request) int { return cmp.Compare(a.TS, b.TS) })
	dir := writeBucket(b, rows, &trace.Manifest{BlockSize: 512})
	ctx := context.Background()
	var peak int64
	for b.Loop() {
		procstat.ResetPeakRSS()
		if _, err := Fit(ctx, dir, FitOptions{NoLatent: true}); err != nil {
			b.Fatal(err)
		}
		peak = max(peak, procstat.PeakRSS())
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
}
