package analyze

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// Verdicts of a comparison row.
const (
	VerdictBetter       = "better"
	VerdictWorse        = "worse"
	VerdictInconclusive = "inconclusive"
)

// CompareOptions controls Compare.
type CompareOptions struct {
	// TTFTMode as in Options.
	TTFTMode TTFTMode
	// Confidence of the intervals and of the family of verdicts (default
	// 0.95): Holm's correction keeps the chance of any false "better" or
	// "worse" across the rows under 1 − Confidence.
	Confidence float64
	// Bootstrap configures the standard errors of the percentiles.
	Bootstrap BootstrapOptions
	// Testing names the run.json label under test: it may differ between
	// A and B; any other label or server fingerprint difference makes the
	// comparison inconclusive.
	Testing string
	// MaxKS is the largest Kolmogorov–Smirnov distance between A's and B's
	// prompt and output token distributions for the runs to be comparable
	// (default 0.05).
	MaxKS float64
	// InMemoryRows bounds the result rows each side may hold (default
	// DefaultInMemoryRows): a comparison holds every row of both.
	InMemoryRows int
}

// ComparedMetrics are the per-request metrics compare tests, at p50 and p99.
var ComparedMetrics = []string{"ttft_ms", "tpot_ms", "e2e_ms"}

// comparedPercentiles are the statistics compared per metric.
var comparedPercentiles = []float64{50, 99}

// Comparison is the result of comparing B against A.
type Comparison struct {
	A          []RunSummary `json:"a"`
	B          []RunSummary `json:"b"`
	Confidence float64      `json:"confidence"`
	// Comparable is false when the runs differ in something other than the
	// configuration under test; Reasons says what, and every verdict is then
	// inconclusive.
	Comparable bool     `json:"comparable"`
	Reasons    []string `json:"reasons,omitempty"`
	// Warnings do not block verdicts but qualify them.
	Warnings []string        `json:"warnings,omitempty"`
	Rows     []ComparisonRow `json:"rows"`
	// KS holds the token-distribution distances checked.
	KS map[string]float64 `json:"ks_distance"`
	// Outputs compares the answers, where asked (CompareOutputs).
	Outputs *OutputComparison `json:"outputs,omitempty"`
}

// ComparisonRow compares one statistic of one metric. Diff is B − A and
// Ratio is B / A, each with an interval at the comparison's confidence.
type ComparisonRow struct {
	Metric  string  `json:"metric"`
	Stat    string  `json:"stat"`
	A       float64 `json:"a"`
	B       float64 `json:"b"`
	NA      int     `json:"n_a"`
	NB      int     `json:"n_b"`
	Diff    float64 `json:"diff"`
	DiffLo  float64 `json:"diff_lo"`
	DiffHi  float64 `json:"diff_hi"`
	Ratio   float64 `json:"ratio"`
	RatioLo float64 `json:"ratio_lo"`
	RatioHi float64 `json:"ratio_hi"`
	// PValue is the two-sided p-value of no difference; PHolm the same
	// after Holm's step-down correction across the rows.
	PValue  float64 `json:"p_value"`
	PHolm   float64 `json:"p_holm"`
	Verdict string  `json:"verdict"`
	// Why explains an inconclusive verdict that is not just a small effect.
	Why string `json:"why,omitempty"`
}

// Compare reads run directories for A and B (each one or more repeats) and
// says, per metric and statistic, whether B is better, worse or not
// distinguishable from A. Lower latency is better.
func Compare(aDirs, bDirs []string, o CompareOptions) (*Comparison, error) {
	if len(aDirs) == 0 || len(bDirs) == 0 {
		return nil, fmt.Errorf("compare needs at least one run directory on each side")
	}
	if o.TTFTMode == "" {
		o.TTFTMode = TTFTFirstContent
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if !(o.Confidence > 0.5 && o.Confidence < 1) {
		return nil, opterr.New("Confidence", o.Confidence, "use a level between 0.5 and 1, e.g. 0.95")
	}
	if o.MaxKS == 0 {
		o.MaxKS = 0.05
	}
	la, err := loadCompared(aDirs, o.InMemoryRows)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	lb, err := loadCompared(bDirs, o.InMemoryRows)
	if err != nil {
		return nil, fmt.Errorf("side B: %w", err)
	}
	xa, xb := extract(la.cols, Options{TTFTMode: o.TTFTMode}), extract(lb.cols, Options{TTFTMode: o.TTFTMode})
	cmpn := &Comparison{A: la.runs, B: lb.runs, Confidence: o.Confidence, Comparable: true, KS: map[string]float64{}}
	cmpn.checkComparable(la, lb, xa, xb, o)
	a, b := map[string][]float64{}, map[string][]float64{}
	for _, m := range ComparedMetrics {
		a[m], b[m] = xa.values(m), xb.values(m)
	}
	pa, err := phaseSamples(la, o.TTFTMode)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	pb, err := phaseSamples(lb, o.TTFTMode)
	if err != nil {
		return nil, fmt.Errorf("side B: %w", err)
	}
	for _, m := range PhaseMetrics {
		if len(pa[m]) > 0 && len(pb[m]) > 0 {
			a[m], b[m] = pa[m], pb[m]
		}
	}
	cmpn.Rows = compareSamples(a, b, o)
	if !cmpn.Comparable {
		for i := range cmpn.Rows {
			if cmpn.Rows[i].Verdict != VerdictInconclusive {
				cmpn.Rows[i].Verdict, cmpn.Rows[i].Why = VerdictInconclusive, "runs not comparable (see reasons)"
			}
		}
	}
	return cmpn, nil
}

// loadCompared loads one side of a comparison, which needs per-request
// results: a peer tool's summary has only its own figures.
func loadCompared(dirs []string, limit int) (*loaded, error) {
	if err := holdable(dirs, limit, "a comparison"); err != nil {
		return nil, err
	}
	l, err := loadColumns(dirs, hasServerPhases(dirs))
	if err != nil {
		return nil, err
	}
	if err := l.needRecords("a comparison"); err != nil {
		return nil, err
	}
	return l, nil
}

// needRecords refuses summaries where what needs per-request results
// would silently leave them out, naming the first and where its records
// would come from.
func (l *loaded) needRecords(what string) error {
	if len(l.given) == 0 {
		return nil
	}
	g := l.given[0]
	return fmt.Errorf("%s is a %s summary without per-request results, and %s needs them: %s (%d summaries in all)", g.Source, g.Tool, what, g.Remedy, len(l.given))
}

// checkComparable records why A and B may not be compared.
func (c *Comparison) checkComparable(la, lb *loaded, xa, xb *extracted, o CompareOptions) {
	block := func(format string, args ...any) {
		c.Comparable = false
		c.Reasons = append(c.Reasons, fmt.Sprintf(format, args...))
	}
	shas := func(l *loaded) []string {
		var out []string
		for _, ri := range l.infos {
			if !slices.Contains(out, ri.WorkloadSHA256) {
				out = append(out, ri.WorkloadSHA256)
			}
		}
		slices.Sort(out)
		return out
	}
	if sa, sb := shas(la), shas(lb); len(la.infos) > 0 && len(lb.infos) > 0 && !slices.Equal(sa, sb) {
		block("different workloads (sha256 %v vs %v): replay the same workload on both sides", short(sa), short(sb))
	}
	for i, l := range []*loaded{la, lb} {
		if side := "AB"[i : i+1]; len(l.infos) < len(l.runs) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("side %s holds another tool's results, which record no workload sha256: that both sides served the same work rests on the token distributions alone", side))
		}
	}
	for name, pair := range map[string][2][]int64{"prompt_tokens": {xa.prompts, xb.prompts}, "output_tokens": {xa.outputs, xb.outputs}} {
		d := rank.KS(pair[0], pair[1])
		c.KS[name] = d
		if d > o.MaxKS {
			block("%s distributions differ (Kolmogorov–Smirnov distance %.3f > %.2f): the two sides served different work", name, d, o.MaxKS)
		}
	}
	if ea, eb, differ := errorRatesDiffer(xa.counts, xb.counts, o.Confidence); differ {
		block("error rates differ (A %.2f%%, B %.2f%%): latency of the successes alone would mislead", 100*ea, 100*eb)
	}
	for side, l := range map[string]*loaded{"A": la, "B": lb} {
		for _, r := range l.runs {
			if r.ClientSaturated {
				block("run %s (%s) had a saturated client: its latencies may be the load generator's", r.Dir, side)
			}
		}
	}
	for _, d := range fingerprintDiffs(la.infos, lb.infos, o.Testing) {
		block("%s differs between the sides, and it is not the label under test (%q)", d, o.Testing)
	}
	lastA, firstB, lastB, firstA := int64(math.MinInt64), int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64)
	for _, ri := range la.infos {
		lastA, firstA = max(lastA, ri.EndUnixNs), min(firstA, ri.StartUnixNs)
	}
	for _, ri := range lb.infos {
		firstB, lastB = min(firstB, ri.StartUnixNs), max(lastB, ri.EndUnixNs)
	}
	if len(la.infos) > 0 && len(lb.infos) > 0 && (lastA <= firstB || lastB <= firstA) {
		c.Warnings = append(c.Warnings, "every run of one side came before every run of the other: a drift in time (thermal, neighbours, cache state) is confounded with the change; interleave repeats A B A B")
	}
}

// short abbreviates sha256 hex strings for messages.
func short(shas []string) []string {
	out := make([]string, len(shas))
	for i, s := range shas {
		out[i] = s[:min(12, len(s))]
	}
	return out
}

// fingerprintDiffs lists the run.json labels and server fingerprint
// fields that differ between the sides, except the label under test.
func fingerprintDiffs(a, b []*trace.RunInfo, testing string) []string {
	if len(a) == 0 || len(b) == 0 {
		return nil // a vLLM result file carries no fingerprint
	}
	labels := func(infos []*trace.RunInfo) map[string][]string {
		out := map[string][]string{}
		for _, ri := range infos {
			for k, v := range ri.Labels {
				if !slices.Contains(out[k], v) {
					out[k] = append(out[k], v)
				}
			}
		}
		return out
	}
	la, lb := labels(a), labels(b)
	var diffs []string
	keys := slices.Sorted(maps.Keys(la))
	for k := range lb {
		if _, ok := la[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		va, vb := la[k], lb[k]
		slices.Sort(va)
		slices.Sort(vb)
		if k != testing && !slices.Equal(va, vb) {
			diffs = append(diffs, fmt.Sprintf("label %s (%v vs %v)", k, va, vb))
		}
	}
	if testing != "server" {
		if !reflect.DeepEqual(a[0].ServerHeader, b[0].ServerHeader) {
			diffs = append(diffs, fmt.Sprintf("server header (%q vs %q)", a[0].ServerHeader, b[0].ServerHeader))
		}
		if !reflect.DeepEqual(a[0].ServerModels, b[0].ServerModels) {
			diffs = append(diffs, "the server's /v1/models answer")
		}
		diffs = append(diffs, identityDiffs(a[0].Server, b[0].Server)...)
	}
	return diffs
}

// identityDiffs lists the server identity fields (engine, version,
// weights, context length) that differ; runs recorded before identities
// were (nil) are not compared on them.
func identityDiffs(a, b *trace.ServerIdentity) []string {
	if a == nil || b == nil {
		return nil
	}
	var diffs []string
	for _, f := range []struct{ name, a, b string }{
		{"server engine", a.Engine, b.Engine}, {"server version", a.Version, b.Version}, {"server weights", a.Model, b.Model},
		{"server context length", strconv.FormatInt(a.ContextTokens, 10), strconv.FormatInt(b.ContextTokens, 10)},
	} {
		if f.a != f.b {
			diffs = append(diffs, fmt.Sprintf("%s (%s vs %s)", f.name, f.a, f.b))
		}
	}
	return diffs
}

// errorRatesDiffer tests the two failure rates with a two-proportion z test
// at the confidence level, and asks for at least half a point of
// difference, so that a huge run does not flag a trivial one.
func errorRatesDiffer(a, b Counts, conf float64) (ea, eb float64, differ bool) {
	if a.Counted == 0 || b.Counted == 0 {
		return 0, 0, false
	}
	fa, fb := float64(a.Counted-a.Outcomes[trace.OutcomeOK]), float64(b.Counted-b.Outcomes[trace.OutcomeOK])
	na, nb := float64(a.Counted), float64(b.Counted)
	ea, eb = fa/na, fb/nb
	pool := (fa + fb) / (na + nb)
	se := math.Sqrt(pool * (1 - pool) * (1/na + 1/nb))
	if se == 0 {
		return ea, eb, false
	}
	return ea, eb, math.Abs(ea-eb)/se > zFor(conf) && math.Abs(ea-eb) > 0.005
}

// compareSamples compares per-request metric samples (time-ordered) of A
// and B at comparedPercentiles, with Holm's correction across every row:
// ComparedMetrics, and PhaseMetrics where both sides have server phases,
// so that the row that moved names the phase.
//
// Each side's percentile has a standard error from a Woodruff interval
// (the standard error of the empirical CDF at the estimate, mapped through
// the sorted sample): batch means where the side's series is correlated in
// time, the bootstrap where it is not. The sides are independent, so the
// difference has se = √(se_A² + se_B²) and the log ratio
// √((se_A/A)² + (se_B/B)²), judged against Student t with the
// Welch–Satterthwaite degrees of freedom.
func compareSamples(a, b map[string][]float64, o CompareOptions) []ComparisonRow {
	var rows []ComparisonRow
	ps := make([]float64, len(comparedPercentiles))
	for i, pc := range comparedPercentiles {
		ps[i] = pc / 100
	}
	for _, m := range append(slices.Clone(ComparedMetrics), PhaseMetrics...) {
		if _, ok := a[m]; !ok && slices.Contains(PhaseMetrics, m) {
			continue // the runs have no server phases
		}
		sa, sb := a[m], b[m]
		ea, eb := percentileSEs(sa, ps, o.Bootstrap), percentileSEs(sb, ps, o.Bootstrap)
		for i, pc := range comparedPercentiles {
			row := ComparisonRow{Metric: m, Stat: fmt.Sprintf("p%g", pc), NA: len(sa), NB: len(sb), PValue: 1, Verdict: VerdictInconclusive}
			row.A, row.B = ea[i].value, eb[i].value
			switch {
			case len(sa) < 2 || len(sb) < 2:
				row.Why = "too few samples"
			case !ea[i].ok || !eb[i].ok:
				row.Why = fmt.Sprintf("too few samples to bound p%g (a 95%% interval needs at least %d per side)", pc, minSamplesForUpper(pc/100))
			default:
				row.Diff = eb[i].value - ea[i].value
				se := math.Hypot(ea[i].se, eb[i].se)
				df := welchDF(ea[i].se*ea[i].se, ea[i].df, eb[i].se*eb[i].se, eb[i].df)
				crit := criticalValue(o.Confidence, df)
				row.DiffLo, row.DiffHi = row.Diff-crit*se, row.Diff+crit*se
				if ea[i].value > 0 && eb[i].value > 0 {
					row.Ratio = eb[i].value / ea[i].value
					sl := math.Hypot(ea[i].se/ea[i].value, eb[i].se/eb[i].value)
					row.RatioLo, row.RatioHi = row.Ratio*math.Exp(-crit*sl), row.Ratio*math.Exp(crit*sl)
				}
				switch {
				case se > 0:
					row.PValue = twoSidedP(row.Diff/se, df)
				case row.Diff != 0:
					row.PValue = 0
				}
			}
			rows = append(rows, row)
		}
	}
	holm(rows, 1-o.Confidence)
	return rows
}

// percentileEstimate is a percentile with its standard error on the value
// scale and the degrees of freedom of that error (+Inf: known as well as a
// normal approximation allows); ok is false when the sample cannot bound
// it.
type percentileEstimate struct {
	value, se, df float64
	ok            bool
}

// percentileSEs estimates the ascending ps-quantiles of timeOrdered and
// their standard errors from 95% Woodruff intervals: the batch-means
// interval (k−1 degrees of freedom) where the series is correlated in
// time, as the report's headline is, and the bootstrap interval otherwise.
func percentileSEs(timeOrdered []float64, ps []float64, o BootstrapOptions) []percentileEstimate {
	out := make([]percentileEstimate, len(ps))
	if len(timeOrdered) < 2 {
		for i := range out {
			if len(timeOrdered) == 1 {
				out[i].value = timeOrdered[0]
			}
		}
		return out
	}
	s := newSample(timeOrdered)
	if dep := s.dependenceOf(); !dep.Independent && len(timeOrdered) >= minBatchSamples {
		t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(dep.Batches - 1)}.Quantile(0.975)
		for i, bi := range s.batchMeans(ps, dep.Batches, 0.95) {
			out[i] = percentileEstimate{value: Percentile(s.sorted, ps[i]), df: float64(dep.Batches - 1), ok: bi.loOK && bi.hiOK}
			if out[i].ok {
				out[i].se = (bi.hi - bi.lo) / (2 * t)
			}
		}
		return out
	}
	se, _ := s.cdfStandardErrors(ps, o)
	for i, p := range ps {
		lo, hi, loOK, hiOK := s.woodruff(p, se[i], 0.95)
		out[i] = percentileEstimate{value: Percentile(s.sorted, p), df: math.Inf(1), ok: loOK && hiOK}
		if out[i].ok {
			out[i].se = (hi - lo) / (2 * zFor(0.95))
		}
	}
	return out
}

// welchDF is the Welch–Satterthwaite degrees of freedom of a sum of two
// independent variance estimates with their own degrees of freedom.
func welchDF(va, dfa, vb, dfb float64) float64 {
	den := 0.0
	if !math.IsInf(dfa, 1) {
		den += va * va / dfa
	}
	if !math.IsInf(dfb, 1) {
		den += vb * vb / dfb
	}
	if den == 0 {
		return math.Inf(1)
	}
	return (va + vb) * (va + vb) / den
}

// criticalValue is the two-sided critical value at level conf with df
// degrees of freedom (the normal's for +Inf).
func criticalValue(conf, df float64) float64 {
	if math.IsInf(df, 1) {
		return zFor(conf)
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(1 - (1-conf)/2)
}

// twoSidedP is the two-sided p-value of a statistic z with df degrees of
// freedom.
func twoSidedP(z, df float64) float64 {
	if math.IsInf(df, 1) {
		return 2 * distuv.UnitNormal.Survival(math.Abs(z))
	}
	return 2 * distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Survival(math.Abs(z))
}

// holm applies Holm's step-down correction and sets the verdicts: a row
// whose adjusted p-value is below alpha is better (B lower) or worse.
func holm(rows []ComparisonRow, alpha float64) {
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool { return rows[idx[x]].PValue < rows[idx[y]].PValue })
	m := len(rows)
	running := 0.0
	for rank, i := range idx {
		adj := math.Min(1, float64(m-rank)*rows[i].PValue)
		running = math.Max(running, adj)
		rows[i].PHolm = running
		if rows[i].Why != "" {
			continue
		}
		if running < alpha {
			if rows[i].Diff < 0 {
				rows[i].Verdict = VerdictBetter
			} else {
				rows[i].Verdict = VerdictWorse
			}
		}
	}
}
