package analyze

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/servetrace/servetrace/trace"
)

// WriteTable prints the report as an aligned text table: every percentile as
// "value [ci95 low, high]", with "—" for a bound the sample cannot give.
func WriteTable(w io.Writer, rep *Report) error {
	var b strings.Builder
	if len(rep.Runs) == 0 && len(rep.Given) > 0 {
		writeGiven(&b, rep)
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "note: %s\n", n)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	for _, r := range rep.Runs {
		if r.Tool != "" {
			fmt.Fprintf(&b, "run %s (%s result) against %s: offered %s, %s; no client health recorded\n",
				r.RunID, r.Tool, orNotRecorded(r.Target), offeredText(r), achievedText(r))
			continue
		}
		state := "complete"
		if !r.Complete {
			state = "PARTIAL"
		}
		shard := ""
		if r.ShardCount > 1 {
			shard = fmt.Sprintf(" shard %d/%d", r.Shard, r.ShardCount)
		}
		fmt.Fprintf(&b, "run %s%s (%s) against %s: offered %.2f req/s, sent %.2f req/s, client lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms; client CPU %.0f%%, scheduler latency p99 %.2f ms\n",
			r.RunID, shard, state, r.Target, r.OfferedRate, r.AchievedRate, r.Lateness.P50Ms, r.Lateness.P99Ms, r.Lateness.MaxMs, 100*r.Client.CPUUtilization, r.Client.SchedLatencyP99Ms)
		if w := r.TruncationWarning(); w != "" {
			b.WriteString(w + "\n")
		}
	}
	c := rep.Requests
	fmt.Fprintf(&b, "requests: %d counted", c.Counted)
	if c.Warmup > 0 {
		fmt.Fprintf(&b, " (%d warmup excluded)", c.Warmup)
	}
	fmt.Fprintf(&b, ", success rate %.1f%%:", 100*c.SuccessRate)
	for _, o := range trace.Outcomes {
		if n := c.Outcomes[o]; n > 0 {
			fmt.Fprintf(&b, " %s %d", o, n)
		}
	}
	b.WriteString("\n")
	t := rep.Throughput
	if untimed(rep.Runs) {
		b.WriteString("throughput: not reported (no send times or duration in the result files)\n")
	} else {
		fmt.Fprintf(&b, "throughput (ok requests, %.1f s): %.2f req/s, %.1f output tok/s, %.1f total tok/s\n", t.DurationS, t.RequestsPerS, t.OutputTokensPerS, t.TotalTokensPerS)
	}
	if e := rep.Energy; e != nil {
		b.WriteString(energyText(e) + "\n")
	}
	if line := FeaturesText(rep.Features); line != "" {
		b.WriteString(line + "\n")
	}
	if r := rep.Reasoning; r != nil {
		b.WriteString(reasoningText(r) + "\n")
	}
	if s := rep.SpecDecode; s != nil {
		b.WriteString(specDecodeText(s) + "\n")
	}
	if p := rep.Phases; p != nil && p.Joined > 0 {
		b.WriteString(phasesText(p) + "\n")
	}
	if p := rep.Probes; p != nil {
		b.WriteString(probesText(p) + "\n")
	}
	if s := rep.Sessions; s != nil {
		b.WriteString(sessionsText(s) + "\n")
	}
	if s := rep.SessionSlowdown; s != nil {
		b.WriteString(slowdownText(s) + "\n")
	}
	if g := rep.Goodput; g != nil {
		fmt.Fprintf(&b, "goodput (ok and %s): %.2f req/s [95%% %.2f, %.2f]; %d of %d requests met it (%.1f%%), error budget used %d\n",
			sloText(g.SLO), g.RequestsPerS, g.CI95[0], g.CI95[1], g.Met, g.Eligible, 100*g.MetShare, g.ErrorBudgetUsed)
	}
	fmt.Fprintf(&b, "latency in ms; TTFT mode %s; %s; \"≥x\": the sample cannot bound that percentile, only say it is at least x\n\n", rep.TTFTMode, intervalLegend(rep.Interval))

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	var pcts []float64
	for _, name := range MetricOrder {
		if d, ok := rep.Metrics[name]; ok && len(d.Quantiles) > 0 {
			for _, q := range d.Quantiles {
				pcts = append(pcts, q.P)
			}
			break
		}
	}
	fmt.Fprint(tw, "metric\tn\tinterval\tmean\t")
	for _, p := range pcts {
		fmt.Fprintf(tw, "p%g\t", p)
	}
	fmt.Fprint(tw, "max\t\n")
	for _, name := range MetricOrder {
		d, ok := rep.Metrics[name]
		if !ok || d.N == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t", strings.TrimSuffix(name, "_ms"), d.N, intervalText(d), num(d.Mean))
		for _, q := range d.Quantiles {
			fmt.Fprintf(tw, "%s\t", quantileCell(q))
		}
		fmt.Fprintf(tw, "%s\t\n", num(d.Max))
	}
	tw.Flush()
	// Bootstrap intervals of the per-request metrics.
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, name := range MetricOrder {
		d, ok := rep.Metrics[name]
		if !ok || d.Block == 0 {
			continue
		}
		if !header {
			fmt.Fprint(&b, "\nbootstrap 95% intervals (moving blocks of the given length, in requests; 1 = independent)\n")
			fmt.Fprint(tw, "metric\tblock\t")
			for _, q := range d.Quantiles {
				fmt.Fprintf(tw, "p%g\t", q.P)
			}
			fmt.Fprint(tw, "\n")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%d\t", strings.TrimSuffix(name, "_ms"), d.Block)
		for _, q := range d.Quantiles {
			fmt.Fprintf(tw, "[%s, %s]\t", bound(q.BootLo), bound(q.BootHi))
		}
		fmt.Fprint(tw, "\n")
	}
	tw.Flush()
	writeSentAndSmoothness(&b, rep)
	writeBreakdowns(&b, rep)
	writeSeries(&b, rep)
	writeRepeats(&b, rep)
	writeVsLogged(&b, rep)
	writeGiven(&b, rep)
	b.WriteString("\n")
	for _, name := range MetricOrder {
		if _, ok := rep.Metrics[name]; ok {
			fmt.Fprintf(&b, "  %-22s %s\n", strings.TrimSuffix(name, "_ms"), metricHelp[name])
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// quantileCell prints a percentile with its headline 95% interval. Where
// the sample cannot bound it from above, it says so instead of printing a
// number: only the lower bound is known, and how many samples would bound
// it (p99 under order statistics needs 368; under batch means, as many as
// the series' dependence asks).
func quantileCell(q Quantile) string {
	if q.Hi == nil {
		if q.Interval == intervalBatchName && q.SamplesToBound != nil {
			return "≥" + bound(q.Lo) + " (bound needs ~" + count(*q.SamplesToBound) + ")"
		}
		return "≥" + bound(q.Lo) + " (n too small)"
	}
	return fmt.Sprintf("%s [%s, %s]", num(q.Value), bound(q.Lo), bound(q.Hi))
}

// count prints a sample count compactly (12k, 3.4M).
func count(n int) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// intervalText names a metric's headline interval for a table cell:
// "order" or "batch" with the lag-1 rank autocorrelation that chose it.
func intervalText(d Distribution) string {
	name := "order"
	if len(d.Quantiles) > 0 && d.Quantiles[0].Interval == intervalBatchName {
		name = "batch"
	}
	if d.Dependence == nil {
		if name == "batch" {
			return "batch (requests)"
		}
		return name + " (pooled)"
	}
	return fmt.Sprintf("%s (r1 %.2f)", name, d.Dependence.Lag1)
}

// intervalLegend says which intervals the latency tables show and why.
func intervalLegend(m IntervalMethod) string {
	switch m {
	case IntervalOrder:
		return "95% order-statistic intervals for every metric, as asked: they assume requests independent in time, and where the r1 column is beyond ±2/√n they cover less than 95%"
	case IntervalBatch:
		return "95% batch-means intervals (n/500 consecutive batches, 10 to 30, Student t) for every metric, as asked"
	}
	return "95% intervals: order statistics where a metric's series looks independent in time (lag-1 rank autocorrelation r1 within ±2/√n), batch means (n/500 consecutive batches, 10 to 30, Student t) where it does not: queueing makes neighbouring requests alike, and the order-statistic interval then covers far less than 95%"
}

func bound(p *float64) string {
	if p == nil {
		return "—"
	}
	return num(*p)
}

func sloText(s SLO) string {
	var parts []string
	if s.TTFT > 0 {
		parts = append(parts, "TTFT <= "+s.TTFT.String())
	}
	if s.TPOT > 0 {
		parts = append(parts, "TPOT <= "+s.TPOT.String())
	}
	if s.E2E > 0 {
		parts = append(parts, "E2E <= "+s.E2E.String())
	}
	return strings.Join(parts, ", ")
}

// WriteComparisonTable prints a comparison: the reasons it cannot conclude,
// warnings, then one line per metric and statistic.
func WriteComparisonTable(w io.Writer, c *Comparison) error {
	var b strings.Builder
	side := func(name string, runs []RunSummary) {
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.RunID
		}
		fmt.Fprintf(&b, "%s: %d run(s) %s\n", name, len(runs), strings.Join(ids, ", "))
	}
	side("A", c.A)
	side("B", c.B)
	if !c.Comparable {
		b.WriteString("NOT COMPARABLE, every verdict is inconclusive:\n")
		for _, r := range c.Reasons {
			fmt.Fprintf(&b, "  - %s\n", r)
		}
	}
	for _, wn := range c.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	fmt.Fprintf(&b, "B against A at %.0f%% confidence (Holm-corrected across %d rows; lower is better):\n", 100*c.Confidence, len(c.Rows))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tstat\tA\tB\tB−A [interval]\tB/A [interval]\tp (Holm)\tverdict")
	for _, r := range c.Rows {
		diff, ratio := "—", "—"
		if r.Why == "" {
			diff = fmt.Sprintf("%+.2f [%+.2f, %+.2f]", r.Diff, r.DiffLo, r.DiffHi)
			if r.Ratio > 0 {
				ratio = fmt.Sprintf("%.3f [%.3f, %.3f]", r.Ratio, r.RatioLo, r.RatioHi)
			}
		}
		verdict := r.Verdict
		if r.Why != "" {
			verdict += " (" + r.Why + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%s\t%s\t%.3g\t%s\n", r.Metric, r.Stat, r.A, r.B, diff, ratio, r.PHolm, verdict)
	}
	tw.Flush()
	fmt.Fprintf(&b, "token distributions (Kolmogorov–Smirnov distance): prompt %.3f, output %.3f\n", c.KS["prompt_tokens"], c.KS["output_tokens"])
	if o := c.Outputs; o != nil {
		writeOutputComparison(&b, o)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeOutputComparison prints whether B's answers are A's.
func writeOutputComparison(b *strings.Builder, o *OutputComparison) {
	fmt.Fprintf(b, "\nanswers (%d ok requests paired by id, salt %s):\n", o.Paired, o.SaltFingerprint)
	fmt.Fprintf(b, "  greedy:  %s: %s\n", strings.ToUpper(o.Greedy.Verdict), o.Greedy.Why)
	if len(o.Greedy.FirstChanged) > 0 {
		fmt.Fprintf(b, "           changed first: %s\n", strings.Join(o.Greedy.FirstChanged, ", "))
	}
	if p := o.Greedy.PartedAt; p != nil {
		fmt.Fprintf(b, "           the changed answers part at streamed event %d to %d, median %.0f (%d answers with per-event hashes)\n", p.Min, p.Max, p.P50, p.Answers)
	}
	fmt.Fprintf(b, "  sampled: %s: %s\n", strings.ToUpper(o.Sampled.Verdict), o.Sampled.Why)
	for _, n := range o.Notes {
		fmt.Fprintf(b, "  note: %s\n", n)
	}
}

func writeSentAndSmoothness(b *strings.Builder, rep *Report) {
	s := rep.Sent
	tok := func(name string, t TokenStats) {
		if t.N > 0 {
			fmt.Fprintf(b, "  %-24s p10 %s  p50 %s  p90 %s  p99 %s  max %s  (n %d)\n", name, num(t.P10), num(t.P50), num(t.P90), num(t.P99), num(t.Max), t.N)
		}
	}
	b.WriteString("\nwhat was sent (tokens):\n")
	tok("input", s.InputTokens)
	tok("requested output", s.RequestedOutputTokens)
	tok("output (ok requests)", s.OutputTokens)
	if s.PromptGap != nil {
		tok("served − intended prompt", *s.PromptGap)
	}
	if len(s.FinishReasons) > 0 {
		fmt.Fprintf(b, "  finish reasons: %s\n", countsText(s.FinishReasons))
	}
	if s.PrefixKnown > 0 {
		fmt.Fprintf(b, "  reused prefix: %.1f%% of prompt blocks were sent before (%d requests with block ids)\n", 100*s.ReusedPrefixShare, s.PrefixKnown)
	}
	if len(s.FeatureShares) > 0 {
		var parts []string
		for _, f := range slices.Sorted(maps.Keys(s.FeatureShares)) {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", f, 100*s.FeatureShares[f]))
		}
		fmt.Fprintf(b, "  features: %s\n", strings.Join(parts, ", "))
	}
	if sm := rep.Smoothness; rep.Metrics["itl_ms"].N > 0 {
		fmt.Fprintf(b, "streaming smoothness: ITL CV %.2f; %d stalls above %s ms (%.2f per 1,000 tokens); longest gap %s ms\n",
			sm.ITLCV, sm.Stalls, num(sm.StallMs), sm.StallsPer1kTokens, num(sm.LongestStallMs))
	}
}

func countsText(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func writeBreakdowns(b *strings.Builder, rep *Report) {
	for _, dim := range slices.Sorted(maps.Keys(rep.Breakdowns)) {
		fmt.Fprintf(b, "\nby %s (p50 / p99 in ms; intervals in --json):\n", dim)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		cache := anyCacheHit(rep.Breakdowns[dim])
		fmt.Fprint(tw, "group\tcounted\tok %\treq/s\tout tok/s\tttft\ttpot\titl\te2e\t")
		if cache {
			fmt.Fprint(tw, "cache hit %\t")
		}
		fmt.Fprint(tw, "\n")
		for _, g := range rep.Breakdowns[dim] {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.1f\t", g.Value, g.Counted, 100*g.SuccessRate, g.RequestsPerS, g.OutputTokensPerS)
			for _, m := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} {
				fmt.Fprintf(tw, "%s\t", p50p99(g.Metrics[m]))
			}
			if cache {
				fmt.Fprintf(tw, "%s\t", percentOrDash(g.PrefixCacheHit))
			}
			fmt.Fprint(tw, "\n")
		}
		tw.Flush()
	}
}

// anyCacheHit says a breakdown has a prefix-cache hit share to show.
func anyCacheHit(groups []Group) bool {
	return slices.ContainsFunc(groups, func(g Group) bool { return g.PrefixCacheHit != nil })
}

// percentOrDash prints a share as a percentage, "—" for none.
func percentOrDash(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f", 100**v)
}

// p50p99 prints a distribution's p50 / p99 where they were computed.
func p50p99(d Distribution) string {
	if d.N == 0 {
		return "—"
	}
	var p50, p99 = "—", "—"
	for _, q := range d.Quantiles {
		switch q.P {
		case 50:
			p50 = num(q.Value)
		case 99:
			p99 = num(q.Value)
			if q.Hi == nil {
				p99 += "≥" // the sample cannot bound it: a floor
			}
		}
	}
	return p50 + " / " + p99
}

func writeSeries(b *strings.Builder, rep *Report) {
	ser := rep.Series
	if ser == nil {
		return
	}
	fmt.Fprintf(b, "\ntime series (%s s windows; TTFT of requests sent in the window):\n", num(ser.WindowS))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	opt := func(p *float64) string {
		if p == nil {
			return "—"
		}
		return num(*p)
	}
	// Engine counters and GPU gauges get columns only where scraped.
	var engine, gpu, agg bool
	for _, w := range ser.Windows {
		engine = engine || w.Preemptions != nil || w.PrefixHitRate != nil
		gpu = gpu || w.GPUUtilPct != nil || w.GPUPowerW != nil
		agg = agg || w.AggE2EMs != nil
	}
	head := "start s\tsent/s\tdone/s\tfailed\tout tok/s\tttft p50\tttft p99\tin flight\trunning\twaiting\tkv\t"
	if engine {
		head += "preempt\tprefix hit\t"
	}
	if gpu {
		head += "gpu %\tpower W\tmem MiB\t"
	}
	if agg {
		head += "agg queue\tagg prefill\tagg decode\tagg e2e\t"
	}
	fmt.Fprint(tw, head+"region\t\n")
	for _, w := range ser.Windows {
		region := w.Region
		if w.BreaksSLO {
			region += " (SLO broken)"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%.0f\t%s\t%s\t%d\t%s\t%s\t%s\t", num(w.StartS), w.SendRate, w.CompletionRate, w.Failed, w.OutputTokensPerS,
			opt(w.TTFTP50Ms), opt(w.TTFTP99Ms), w.InFlight, opt(w.Running), opt(w.Waiting), opt(w.KVUsage))
		if engine {
			fmt.Fprintf(tw, "%s\t%s\t", opt(w.Preemptions), opt(w.PrefixHitRate))
		}
		if gpu {
			fmt.Fprintf(tw, "%s\t%s\t%s\t", opt(w.GPUUtilPct), opt(w.GPUPowerW), opt(w.GPUMemUsedMiB))
		}
		if agg {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", opt(w.AggQueueMs), opt(w.AggPrefillMs), opt(w.AggDecodeMs), opt(w.AggE2EMs))
		}
		fmt.Fprintf(tw, "%s\t\n", region)
	}
	tw.Flush()
	if agg {
		b.WriteString("agg: the engine's request-phase histograms, the mean ms of the requests that finished in the window (aggregate: no request's own split; spans give that)\n")
	}
	if len(ser.RegionTTFT) > 0 {
		fmt.Fprint(b, "TTFT by region (requests sent in its windows; a whole-run percentile mixes them):\n")
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, region := range []string{RegionCold, RegionWarm, RegionSteady, RegionSaturated, RegionRecovering} {
			d, ok := ser.RegionTTFT[region]
			if !ok || d.N == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t", region, d.N, intervalText(d))
			for _, q := range d.Quantiles {
				fmt.Fprintf(tw, "p%g %s\t", q.P, quantileCell(q))
			}
			fmt.Fprint(tw, "\n")
		}
		tw.Flush()
	}
	if r := ser.Recovery; r != nil {
		fmt.Fprintf(b, "overload: first broken window at %s s", num(r.FirstBreakS))
		if r.LoadDropS != nil {
			fmt.Fprintf(b, ", load dropped at %s s", num(*r.LoadDropS))
		}
		if r.RecoveryS != nil {
			fmt.Fprintf(b, ", recovered at %s s: recovery took %s s", num(*r.RecoveredS), num(*r.RecoveryS))
		}
		fmt.Fprintf(b, " (%s)\n", r.Note)
	}
}

func writeRepeats(b *strings.Builder, rep *Report) {
	r := rep.Repeats
	if r == nil {
		return
	}
	fmt.Fprintf(b, "\nrepeats: %d runs as the unit (t interval across run estimates; ms):\n", len(r.Runs))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "metric\tstat\tmean [95%]\tbetween-run sd\twithin-run se\theterogeneity p\tper run\t\n")
	for _, m := range repeatMetrics {
		for _, st := range r.Metrics[m] {
			per := make([]string, len(st.PerRun))
			for i, v := range st.PerRun {
				per[i] = num(v)
			}
			het := "—"
			if st.Heterogeneity >= 0 {
				het = fmt.Sprintf("%.3g", st.Heterogeneity)
			}
			mean := fmt.Sprintf("%s [%s, %s]", num(st.Mean), num(st.CI95[0]), num(st.CI95[1]))
			if st.Unbounded {
				mean += " (a run cannot bound it)"
			}
			fmt.Fprintf(tw, "%s\tp%g\t%s\t%s\t%s\t%s\t%s\t\n", strings.TrimSuffix(m, "_ms"), st.P, mean, num(st.BetweenSD), num(st.WithinSE), het, strings.Join(per, " "))
		}
	}
	tw.Flush()
	for _, m := range repeatMetrics {
		for _, st := range r.Metrics[m] {
			if st.Heterogeneity >= 0 && st.Heterogeneity < 0.05 {
				fmt.Fprintf(b, "note: %s p%g differs between runs beyond their sampling noise (heterogeneity p %.2g): more runs narrow it, longer runs do not\n",
					strings.TrimSuffix(m, "_ms"), st.P, st.Heterogeneity)
			}
		}
	}
}

func writeVsLogged(b *strings.Builder, rep *Report) {
	v := rep.VsLogged
	if v == nil {
		return
	}
	fmt.Fprintf(b, "\nreplayed vs logged in %s (%d ok replayed requests, joined by request id):\n", v.Source, v.Replayed)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "metric\tpaired\tlogged p50\treplayed p50\tratio\tlogged p99\treplayed p99\tratio\tmedian diff\tspearman\t\n")
	for _, name := range []string{"ttft_ms", "e2e_ms"} {
		m, ok := v.Metrics[name]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.2f\t%s\t%s\t%.2f\t%+.1f\t%.2f\t\n", strings.TrimSuffix(name, "_ms"), m.Paired, num(m.Logged.Median), num(m.Replayed.Median),
			m.RatioP50, pct(m.Logged, 99), pct(m.Replayed, 99), m.RatioP99, m.MedianDiffMs, m.Spearman)
	}
	tw.Flush()
	fmt.Fprintf(b, "note: %s\n", v.Note)
}
