package analyze

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// WriteMarkdown writes the report as GitHub-flavoured Markdown, for pull
// requests and issues: the same figures as the table, intervals included.
func WriteMarkdown(w io.Writer, rep *Report) error {
	var b strings.Builder
	b.WriteString("## servetrace report\n\n")
	for _, r := range rep.Runs {
		if r.Tool != "" {
			fmt.Fprintf(&b, "- run `%s` (%s result) against `%s`: offered %s, %s; no client health recorded\n", r.RunID, r.Tool, orNotRecorded(r.Target), offeredText(r), achievedText(r))
			continue
		}
		state := "complete"
		if !r.Complete {
			state = "**partial: " + r.Reason + "**"
		}
		fmt.Fprintf(&b, "- run `%s` (%s) against `%s`: offered %.2f req/s, sent %.2f req/s, client lateness p99 %.2f ms\n",
			r.RunID, state, r.Target, r.OfferedRate, r.AchievedRate, r.Lateness.P99Ms)
		if w := r.TruncationWarning(); w != "" {
			fmt.Fprintf(&b, "- **%s**\n", w)
		}
	}
	c, t := rep.Requests, rep.Throughput
	fmt.Fprintf(&b, "- requests: %d counted (%d warmup excluded), success %.1f%%: %s\n", c.Counted, c.Warmup, 100*c.SuccessRate, countsText(c.Outcomes))
	fmt.Fprintf(&b, "- throughput over %.1f s: %.2f req/s [%.2f, %.2f], %.1f output tok/s [%.1f, %.1f], %.1f total tok/s\n",
		t.DurationS, t.RequestsPerS, t.RequestsPerSCI[0], t.RequestsPerSCI[1], t.OutputTokensPerS, t.OutputTokensPerSCI[0], t.OutputTokensPerSCI[1], t.TotalTokensPerS)
	if line := FeaturesText(rep.Features); line != "" {
		fmt.Fprintf(&b, "- %s\n", line)
	}
	if r := rep.Reasoning; r != nil {
		fmt.Fprintf(&b, "- %s\n", reasoningText(r))
	}
	if s := rep.SpecDecode; s != nil {
		fmt.Fprintf(&b, "- %s\n", specDecodeText(s))
	}
	if p := rep.Phases; p != nil && p.Joined > 0 {
		fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(phasesText(p), "\n  ", "\n  - "))
	}
	if p := rep.Probes; p != nil {
		fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(probesText(p), "\n  ", "\n  - "))
	}
	if s := rep.Sessions; s != nil {
		fmt.Fprintf(&b, "- %s\n", sessionsText(s))
	}
	if s := rep.SessionSlowdown; s != nil {
		fmt.Fprintf(&b, "- %s\n", slowdownText(s))
	}
	if e := rep.Energy; e != nil {
		fmt.Fprintf(&b, "- %s\n", energyText(e))
	}
	if g := rep.Goodput; g != nil {
		fmt.Fprintf(&b, "- goodput (%s): %.2f req/s [%.2f, %.2f], %.1f%% of requests met it, error budget used %d\n",
			sloText(g.SLO), g.RequestsPerS, g.CI95[0], g.CI95[1], 100*g.MetShare, g.ErrorBudgetUsed)
	}
	fmt.Fprintf(&b, "\nLatency in ms, TTFT mode %s; each percentile with its headline interval (≥x: the sample cannot bound it, only say it is at least x). %s.\n\n", rep.TTFTMode, intervalLegend(rep.Interval))
	var header []string
	for _, name := range MetricOrder {
		if d, ok := rep.Metrics[name]; ok && len(d.Quantiles) > 0 {
			for _, q := range d.Quantiles {
				header = append(header, fmt.Sprintf("p%g", q.P))
			}
			break
		}
	}
	fmt.Fprintf(&b, "| metric | n | interval | mean | %s | max |\n|---|--:|---|--:|%s--:|\n", strings.Join(header, " | "), strings.Repeat("--:|", len(header)))
	for _, name := range MetricOrder {
		d, ok := rep.Metrics[name]
		if !ok || d.N == 0 {
			continue
		}
		cells := make([]string, len(d.Quantiles))
		for i, q := range d.Quantiles {
			cells[i] = quantileCell(q)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", strings.TrimSuffix(name, "_ms"), d.N, intervalText(d), num(d.Mean), strings.Join(cells, " | "), num(d.Max))
	}
	if sm := rep.Smoothness; rep.Metrics["itl_ms"].N > 0 {
		fmt.Fprintf(&b, "\nStreaming: ITL CV %.2f, %d stalls above %s ms (%.2f per 1,000 tokens), longest gap %s ms.\n", sm.ITLCV, sm.Stalls, num(sm.StallMs), sm.StallsPer1kTokens, num(sm.LongestStallMs))
	}
	for _, dim := range slices.Sorted(maps.Keys(rep.Breakdowns)) {
		cache := anyCacheHit(rep.Breakdowns[dim])
		head, rule := "| group | counted | ok % | req/s | ttft | tpot | itl | e2e |", "|---|--:|--:|--:|--:|--:|--:|--:|"
		if cache {
			head, rule = head+" cache hit % |", rule+"--:|"
		}
		fmt.Fprintf(&b, "\n### by %s (p50 / p99, ms)\n\n%s\n%s\n", dim, head, rule)
		for _, g := range rep.Breakdowns[dim] {
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.2f | %s | %s | %s | %s |", g.Value, g.Counted, 100*g.SuccessRate, g.RequestsPerS,
				p50p99(g.Metrics["ttft_ms"]), p50p99(g.Metrics["tpot_ms"]), p50p99(g.Metrics["itl_ms"]), p50p99(g.Metrics["e2e_ms"]))
			if cache {
				fmt.Fprintf(&b, " %s |", percentOrDash(g.PrefixCacheHit))
			}
			b.WriteString("\n")
		}
	}
	if ser := rep.Series; ser != nil && ser.Recovery != nil {
		r := ser.Recovery
		fmt.Fprintf(&b, "\nOverload: first broken window at %s s", num(r.FirstBreakS))
		if r.RecoveryS != nil {
			fmt.Fprintf(&b, "; recovery took %s s", num(*r.RecoveryS))
		}
		fmt.Fprintf(&b, " (%s).\n", r.Note)
	}
	writeGivenMarkdown(&b, rep)
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "> **note:** %s\n>\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
