package synth

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// ValidateOptions controls Validate.
type ValidateOptions struct {
	// RealSpan and SynthSpan restrict each side to a fraction of its span
	// (zero: all of it), e.g. {0.7, 1} for the last 30% held out of a fit.
	RealSpan, SynthSpan [2]float64
	// Thresholds override DefaultThresholds by check name.
	Thresholds map[string]float64
}

// DefaultThresholds are the pass limits of each check: absolute for KS,
// Spearman and hit-rate differences, relative for the rest.
var DefaultThresholds = map[string]float64{
	"ks_input_tokens": 0.05, "ks_output_tokens": 0.05,
	"input_p50": 0.10, "input_p90": 0.10, "input_p99": 0.15,
	"output_p50": 0.10, "output_p90": 0.10, "output_p99": 0.15,
	"spearman_input_output":         0.05,
	"median_output_by_input_decile": 0.25,
	"gap_p10":                       0.5, "gap_p50": 0.3, "gap_p90": 0.3, "gap_p99": 0.3,
	"dispersion_1s": 0.25, "dispersion_10s": 0.25, "dispersion_60s": 0.25,
	"rate_per_minute": 0.5,
	"lru_hit_0.1pct":  0.03, "lru_hit_0.3pct": 0.03, "lru_hit_1pct": 0.03, "lru_hit_3pct": 0.03,
	"lru_hit_10pct": 0.03, "lru_hit_30pct": 0.03, "lru_hit_60pct": 0.03, "lru_hit_100pct": 0.03,
	"stack_distance_ks": 0.05,
	"session_turns_ks":  0.05, "session_gap_p50": 0.3, "session_gap_p90": 0.3,
	// Agent graphs, checked where a side has one.
	"graph_fanout_ks": 0.05, "graph_depth_ks": 0.05, "graph_delay_ks": 0.05, "graph_growth_ks": 0.05,
	// The workload contract, checked where the real side carries it.
	"ks_images_per_request": 0.05, "ks_image_pixels": 0.05, "image_reuse": 0.05,
	"ks_audio_ms": 0.05, "ks_tool_tokens": 0.05, "ks_schema_tokens": 0.05,
	"adapter_zipf_s": 0.2, "sampling_extras_share": 0.05,
}

// LRUSizes are the prefix-cache sizes of the hit-rate checks, in percent of
// the real side's distinct blocks: from a cache that holds little but hot
// system prompts to one that holds every block (which then hits every
// reuse). A cache of C blocks hits the uses at stack distance below C.
var LRUSizes = []struct {
	Name    string
	Percent float64
}{{"0.1pct", 0.1}, {"0.3pct", 0.3}, {"1pct", 1}, {"3pct", 3}, {"10pct", 10}, {"30pct", 30}, {"60pct", 60}, {"100pct", 100}}

// Check is one fidelity comparison.
type Check struct {
	Name  string  `json:"name"`
	Real  float64 `json:"real"`
	Synth float64 `json:"synth"`
	// Diff is |synth − real| for absolute checks, |synth − real| / |real|
	// for relative ones, or the statistic itself (KS).
	Diff     float64 `json:"diff"`
	Relative bool    `json:"relative"`
	// Statistic marks a check whose Diff is a two-sample statistic (KS):
	// Real and Synth are then unused.
	Statistic bool    `json:"statistic,omitempty"`
	Threshold float64 `json:"threshold"`
	Pass      bool    `json:"pass"`
	// Halves, where set, is the same difference between the real trace's
	// first and second halves: how far the trace moves against itself, so
	// that a Diff near it is noise rather than a misfit.
	Halves *float64 `json:"real_halves,omitempty"`
}

// Validation is the result of Validate.
type Validation struct {
	Real, Synth string  `json:"-"`
	RealRows    int     `json:"real_rows"`
	SynthRows   int     `json:"synth_rows"`
	Checks      []Check `json:"checks"`
	Pass        bool    `json:"pass"`
	Failed      int     `json:"failed"`
	// LRUSizesBlocks are the cache sizes of the lru_hit checks, in blocks
	// of BlockSize tokens.
	LRUSizesBlocks []int64  `json:"lru_sizes_blocks,omitempty"`
	BlockSize      int      `json:"block_size,omitempty"`
	SkippedReason  []string `json:"skipped,omitempty"`
}

// workloadSample is what validation reads of one side.
type workloadSample struct {
	ts           []float64
	in, out      []float64
	blocks       [][]int64
	blockSize    int
	sessionTurns []float64
	// starts are the sessions' first arrivals (and lone requests'), in
	// time order: the session arrival process.
	starts     []float64
	multiTurn  bool
	start, end float64
	contract   contractSample
	graph      graphSample
}

func loadSample(ctx context.Context, dir string, span [2]float64) (*workloadSample, error) {
	b, err := trace.OpenBucket(dir)
	if err != nil {
		return nil, err
	}
	if span == [2]float64{} {
		span = [2]float64{0, 1}
	}
	from, to := spanBounds(b.Manifest, span)
	s := &workloadSample{blockSize: b.Manifest.BlockSize, start: float64(from) / 1e6, end: math.Min(float64(to), float64(b.Manifest.End.UnixMicro())) / 1e6}
	if s.blockSize <= 0 {
		s.blockSize = trace.DefaultBlockSize
	}
	turns := map[string]float64{}
	var order []string
	err = b.Scan(ctx, func(r *trace.Request) error {
		if r.TS < from || r.TS >= to {
			return nil
		}
		s.ts = append(s.ts, float64(r.TS)/1e6)
		s.in = append(s.in, float64(r.InputTokens))
		s.out = append(s.out, float64(r.OutputTokens))
		if len(r.PrefixBlocks) > 0 {
			s.blocks = append(s.blocks, r.PrefixBlocks)
		}
		s.contract.add(r)
		s.graph.add(r)
		if r.SessionID == "" {
			s.sessionTurns = append(s.sessionTurns, 1)
			s.starts = append(s.starts, float64(r.TS)/1e6)
			return nil
		}
		if _, ok := turns[r.SessionID]; !ok {
			order = append(order, r.SessionID)
			s.starts = append(s.starts, float64(r.TS)/1e6)
		}
		turns[r.SessionID]++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("validate %s: %w", dir, err)
	}
	if len(s.ts) < 2 {
		return nil, fmt.Errorf("validate %s: %d requests in the span; need at least 2", dir, len(s.ts))
	}
	for _, id := range order {
		s.sessionTurns = append(s.sessionTurns, turns[id])
		if turns[id] > 1 {
			s.multiTurn = true
		}
	}
	return s, nil
}

// Validate compares a synthetic workload with a real trace and checks each
// fidelity measure against its threshold.
func Validate(ctx context.Context, realDir, synthDir string, opts ValidateOptions) (*Validation, error) {
	real, err := loadSample(ctx, realDir, opts.RealSpan)
	if err != nil {
		return nil, err
	}
	syn, err := loadSample(ctx, synthDir, opts.SynthSpan)
	if err != nil {
		return nil, err
	}
	v := &Validation{Real: realDir, Synth: synthDir, RealRows: len(real.ts), SynthRows: len(syn.ts), Pass: true}
	// push files a check under its threshold.
	push := func(c Check) {
		c.Threshold = DefaultThresholds[c.Name]
		if x, ok := opts.Thresholds[c.Name]; ok {
			c.Threshold = x
		}
		c.Pass = c.Diff <= c.Threshold
		v.Checks = append(v.Checks, c)
	}
	// add files |s − r|, relative to |r| where asked; against a real value
	// of 0 a relative error is undefined and the absolute one is filed.
	add := func(name string, r, s float64, relative bool) {
		c := Check{Name: name, Real: r, Synth: s, Relative: relative && r != 0, Diff: math.Abs(s - r)}
		if c.Relative {
			c.Diff /= math.Abs(r)
		}
		push(c)
	}
	addKS := func(name string, a, b []float64) {
		push(Check{Name: name, Diff: rank.KS(a, b), Statistic: true})
	}
	// The checks below sort and count every row; ctx is checked between
	// them and inside the LRU replay.
	addKS("ks_input_tokens", real.in, syn.in)
	addKS("ks_output_tokens", real.out, syn.out)
	ri, si := sortedCopy(real.in), sortedCopy(syn.in)
	ro, so := sortedCopy(real.out), sortedCopy(syn.out)
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
		add("input_"+q.name, rank.Percentile(ri, q.p), rank.Percentile(si, q.p), true)
		add("output_"+q.name, rank.Percentile(ro, q.p), rank.Percentile(so, q.p), true)
	}
	add("spearman_input_output", rank.Spearman(real.in, real.out), rank.Spearman(syn.in, syn.out), false)
	rd, sd := medianOutputPerDecile(real.in, real.out), medianOutputPerDecile(syn.in, syn.out)
	worst := Check{Name: "median_output_by_input_decile", Relative: true}
	for d := range rd {
		if e := math.Abs(sd[d]-rd[d]) / rd[d]; rd[d] > 0 && e >= worst.Diff {
			worst.Diff, worst.Real, worst.Synth = e, rd[d], sd[d]
		}
	}
	push(worst)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rg, sg := gaps(real.ts), gaps(syn.ts)
	for _, q := range []struct {
		name string
		p    float64
	}{{"gap_p10", 0.1}, {"gap_p50", 0.5}, {"gap_p90", 0.9}, {"gap_p99", 0.99}} {
		add(q.name, rank.Percentile(rg, q.p), rank.Percentile(sg, q.p), true)
	}
	for _, w := range []float64{1, 10, 60} {
		rdI := DispersionIndex(real.ts, real.start, real.end, w)
		sdI := DispersionIndex(syn.ts, syn.start, syn.end, w)
		if math.IsNaN(rdI) || math.IsNaN(sdI) {
			v.SkippedReason = append(v.SkippedReason, fmt.Sprintf("dispersion at %gs: a side is shorter than two windows", w))
			continue
		}
		add(fmt.Sprintf("dispersion_%gs", w), rdI, sdI, true)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e, r, s, ok := perMinuteRateError(real, syn); ok {
		push(Check{Name: "rate_per_minute", Real: r, Synth: s, Diff: e, Relative: true})
	} else {
		v.SkippedReason = append(v.SkippedReason, "rate per minute: a side is shorter than a minute")
	}
	if real.blockSize != syn.blockSize && len(real.blocks) > 0 && len(syn.blocks) > 0 {
		v.SkippedReason = append(v.SkippedReason, fmt.Sprintf("LRU hit rate: blocks of %d tokens against %d; compare workloads with one block size", real.blockSize, syn.blockSize))
	} else if len(real.blocks) > 0 && len(syn.blocks) > 0 {
		if err := v.addReuse(ctx, real, syn, push); err != nil {
			return nil, err
		}
	} else {
		v.SkippedReason = append(v.SkippedReason, "LRU hit rate: a side has no prefix blocks")
	}
	if real.multiTurn || syn.multiTurn {
		addKS("session_turns_ks", real.sessionTurns, syn.sessionTurns)
		rs, ss := gaps(real.starts), gaps(syn.starts)
		if len(rs) == 0 || len(ss) == 0 {
			v.SkippedReason = append(v.SkippedReason, "session start gaps: a side has fewer than two sessions")
		} else {
			for _, q := range []struct {
				name string
				p    float64
			}{{"session_gap_p50", 0.5}, {"session_gap_p90", 0.9}} {
				add(q.name, rank.Percentile(rs, q.p), rank.Percentile(ss, q.p), true)
			}
		}
	}
	rf, rw, rg, rd := real.graph.laws()
	sf, sw, sg, sd := syn.graph.laws()
	if len(rw) > 0 || len(sw) > 0 {
		for _, c := range []struct {
			name string
			r, s []float64
		}{{"graph_fanout_ks", rf, sf}, {"graph_depth_ks", rd, sd}, {"graph_delay_ks", rw, sw}, {"graph_growth_ks", rg, sg}} {
			if len(c.r) == 0 || len(c.s) == 0 { // agent graphs on one side only
				push(Check{Name: c.name, Diff: 1, Statistic: true})
				continue
			}
			addKS(c.name, c.r, c.s)
		}
	}
	v.addContract(&real.contract, &syn.contract, add, addKS)
	for _, c := range v.Checks {
		if !c.Pass {
			v.Pass = false
			v.Failed++
		}
	}
	return v, nil
}

// addReuse files the prefix-reuse checks: the LRU hit rate at each of
// LRUSizes and the KS distance of the per-block stack distances (first
// uses at +Inf, so the KS distance is the largest hit-rate difference over
// every cache size), each beside the same figure between the real trace's
// two halves.
func (v *Validation) addReuse(ctx context.Context, real, syn *workloadSample, push func(Check)) error {
	rd, err := sortedDistances(ctx, real.blocks)
	if err != nil {
		return err
	}
	sd, err := sortedDistances(ctx, syn.blocks)
	if err != nil {
		return err
	}
	half := len(real.blocks) / 2
	h1, err := sortedDistances(ctx, real.blocks[:half])
	if err != nil {
		return err
	}
	h2, err := sortedDistances(ctx, real.blocks[half:])
	if err != nil {
		return err
	}
	v.BlockSize = real.blockSize
	sizes := func(d []float64) []float64 {
		distinct := len(d) - firstUse(d)
		out := make([]float64, len(LRUSizes))
		for i, c := range LRUSizes {
			out[i] = max(1, math.Round(c.Percent/100*float64(distinct)))
		}
		return out
	}
	caps := sizes(rd)
	for _, c := range caps {
		v.LRUSizesBlocks = append(v.LRUSizesBlocks, int64(c))
	}
	rh, sh := HitCurve(rd, caps), HitCurve(sd, caps)
	// Each half is measured at its own share of its own distinct blocks.
	hh1, hh2 := HitCurve(h1, sizes(h1)), HitCurve(h2, sizes(h2))
	for i, c := range LRUSizes {
		noise := math.Abs(hh1[i] - hh2[i])
		push(Check{Name: "lru_hit_" + c.Name, Real: rh[i], Synth: sh[i], Diff: math.Abs(sh[i] - rh[i]), Halves: &noise})
	}
	noise := rank.KS(h1, h2)
	push(Check{Name: "stack_distance_ks", Diff: rank.KS(rd, sd), Statistic: true, Halves: &noise})
	return nil
}

// sortedDistances returns the stack distances of the blocks' uses, sorted.
func sortedDistances(ctx context.Context, blocks [][]int64) ([]float64, error) {
	d, err := StackDistances(ctx, blocks)
	if err != nil {
		return nil, err
	}
	slices.Sort(d)
	return d, nil
}

// firstUse returns the index of the first +Inf (a block's first use) in
// sorted distances.
func firstUse(d []float64) int {
	i, _ := slices.BinarySearch(d, math.Inf(1))
	return i
}

func sortedCopy(x []float64) []float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s
}

func gaps(ts []float64) []float64 {
	g := make([]float64, 0, len(ts))
	for i := 1; i < len(ts); i++ {
		g = append(g, ts[i]-ts[i-1])
	}
	slices.Sort(g)
	return g
}

// perMinuteRateError compares per-minute arrival counts over the minutes
// both sides cover (aligned at each side's start): the mean absolute
// difference over the real side's mean count.
func perMinuteRateError(real, syn *workloadSample) (float64, float64, float64, bool) {
	n := int(math.Min(real.end-real.start, syn.end-syn.start) / 60)
	if n < 1 {
		return 0, 0, 0, false
	}
	count := func(s *workloadSample) []float64 {
		c := make([]float64, n)
		for _, t := range s.ts {
			if k := int((t - s.start) / 60); k >= 0 && k < n {
				c[k]++
			}
		}
		return c
	}
	rc, sc := count(real), count(syn)
	var diff, rsum, ssum float64
	for i := range rc {
		diff += math.Abs(rc[i] - sc[i])
		rsum += rc[i]
		ssum += sc[i]
	}
	if rsum == 0 {
		return 0, 0, 0, false
	}
	return diff / rsum, rsum / float64(n), ssum / float64(n), true
}

// WriteValidation writes v as a table.
func WriteValidation(w io.Writer, v *Validation) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "validate %s (%d rows) against real %s (%d rows)\n", v.Synth, v.SynthRows, v.Real, v.RealRows)
	fmt.Fprintln(tw, "check\treal\tsynth\tdiff\tthreshold\t\treal halves")
	num := func(x float64) string {
		if math.IsNaN(x) {
			return "-"
		}
		return fmt.Sprintf("%.4g", x)
	}
	for _, c := range v.Checks {
		mark := "ok"
		if !c.Pass {
			mark = "FAIL"
		}
		kind := ""
		if c.Relative {
			kind = " rel"
		}
		r, s := num(c.Real), num(c.Synth)
		if c.Statistic {
			r, s = "-", "-"
		}
		halves := ""
		if c.Halves != nil {
			halves = fmt.Sprintf("%.4f", *c.Halves)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f%s\t%.4g\t%s\t%s\n", c.Name, r, s, c.Diff, kind, c.Threshold, mark, halves)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(v.LRUSizesBlocks) > 0 {
		parts := make([]string, len(v.LRUSizesBlocks))
		for i, b := range v.LRUSizesBlocks {
			parts[i] = fmt.Sprintf("%s %d", LRUSizes[i].Name, b)
		}
		fmt.Fprintf(w, "lru sizes in blocks of %d tokens: %s\n", v.BlockSize, strings.Join(parts, ", "))
	}
	for _, s := range v.SkippedReason {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	if v.Pass {
		_, err := fmt.Fprintf(w, "PASS: %d checks within their thresholds\n", len(v.Checks))
		return err
	}
	var failed []string
	for _, c := range v.Checks {
		if !c.Pass {
			failed = append(failed, c.Name)
		}
	}
	_, err := fmt.Fprintf(w, "FAIL: %d of %d checks outside their thresholds: %s\n", v.Failed, len(v.Checks), strings.Join(failed, ", "))
	return err
}
