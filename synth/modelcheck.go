package synth

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// Ceilings on a model's values (docs/model.md lists every range). A value
// past one is a corrupt or hostile model.json, not a workload.
const (
	// MaxRatePerS bounds a model's mean and peak arrival rate and a
	// generated workload's peak (requests/s): timestamps are microseconds.
	MaxRatePerS = 1e6
	// MaxModelTokens bounds every token length in a model (the trace's
	// own ceiling).
	MaxModelTokens = trace.MaxTokens
	// MaxThinkS bounds think times (seconds): a week, the trace's ceiling
	// on think_time_ms.
	MaxThinkS = trace.MaxClientMs / 1000
	// MaxModelSeconds bounds the other times in a model (gaps, reuse ages,
	// lifetimes, spans, correlation times): about 300 years.
	MaxModelSeconds = 1e10
	// MaxSessionTurns bounds the turns of one session; the fit counts a
	// longer session as this long.
	MaxSessionTurns = 100_000
	// MaxGenerateRows bounds the rows of one generated workload.
	MaxGenerateRows = 1e9
	// MaxGenerateSteps bounds the arrival process's time steps in one
	// generation (one step per second, finer with a fast latent layer).
	MaxGenerateSteps = 1e9
)

// Limits of the model's shape, beyond what a fit writes.
const (
	maxModelReadBytes   = 4 * MaxModelBytes // a hand-indented copy may grow
	maxHarmonics        = 12
	maxFourierCoef      = 100
	minRenewalShape     = 0.01
	maxRenewalShape     = 100
	maxLatentSigma      = 4
	maxLatentComponents = 4
	maxChainClasses     = 16
	maxChainOrder       = 4
	shareTolerance      = 1e-3
	maxRescaledGap      = 1e15 // a gap chain's gaps, in mean gaps
	minTimeScale        = 1e-6
	maxTimeScale        = 1e6
	maxProblems         = 3 // problems an error lists
)

// ModelError lists what makes a model unusable, each problem naming its
// JSON field.
type ModelError struct {
	Problems []string
	// Hint says what would fix them (default: correct or refit).
	Hint string
}

func (e *ModelError) Error() string {
	var b strings.Builder
	if len(e.Problems) > 1 {
		fmt.Fprintf(&b, "%d problems: ", len(e.Problems))
	}
	b.WriteString(strings.Join(e.Problems[:min(len(e.Problems), maxProblems)], "; "))
	if n := len(e.Problems) - maxProblems; n > 0 {
		fmt.Fprintf(&b, "; and %d more", n)
	}
	hint := e.Hint
	if hint == "" {
		hint = "correct the field or refit with 'servetrace fit'"
	}
	fmt.Fprintf(&b, " (%s)", hint)
	return b.String()
}

// checker collects problems by field path.
type checker struct {
	probs []string
	seen  map[string]bool
}

func (c *checker) bad(path, format string, a ...any) {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if c.seen[path] {
		return
	}
	c.seen[path] = true
	c.probs = append(c.probs, path+" "+fmt.Sprintf(format, a...))
}

// num formats v for a message: integers in full below 10^15.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// num checks lo ≤ v ≤ hi; unit names the quantity in the message.
func (c *checker) num(path string, v, lo, hi float64, unit string) bool {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		c.bad(path, "%s is not a finite number", num(v))
	case v > hi && hi >= 1000:
		c.bad(path, "%s", strings.TrimSpace(fmt.Sprintf("%s exceeds %s %s", num(v), num(hi), unit)))
	case v < lo || v > hi:
		c.bad(path, "%s", strings.TrimSpace(fmt.Sprintf("%s is outside [%s, %s] %s", num(v), num(lo), num(hi), unit)))
	default:
		return true
	}
	return false
}

func (c *checker) prob(path string, v float64) bool { return c.num(path, v, 0, 1, "(a probability)") }

// shares checks a probability vector; total is the mass it must sum to
// with other (1 for a distribution), or -1 for at most 1.
func (c *checker) shares(path string, v []float64, other float64, exact bool) {
	sum := other
	ok := true
	for i, p := range v {
		ok = c.prob(fmt.Sprintf("%s[%d]", path, i), p) && ok
		sum += p
	}
	if !ok {
		return
	}
	if exact && math.Abs(sum-1) > shareTolerance {
		c.bad(path, "sum to %s, want 1", num(sum))
	} else if !exact && sum > 1+shareTolerance {
		c.bad(path, "sum to %s, more than 1", num(sum))
	}
}

// marginal checks a quantile table: at least 2 knots when required,
// finite, non-decreasing and within [lo, hi], atoms within range.
func (c *checker) marginal(path string, m *Marginal, lo, hi float64, unit string, required bool) {
	k := m.Knots
	if len(k) < 2 && (required || len(k) > 0) {
		c.bad(path+".knots", "has %d knots, want at least 2", len(k))
	}
	for i, v := range k {
		if !c.num(fmt.Sprintf("%s.knots[%d]", path, i), v, lo, hi, unit) {
			break
		}
		if i > 0 && v < k[i-1] {
			c.bad(fmt.Sprintf("%s.knots[%d]", path, i), "%s is below knots[%d] %s: a quantile table must not decrease", num(v), i-1, num(k[i-1]))
			break
		}
	}
	if len(m.Atoms) > int(1/AtomShare) {
		c.bad(path+".atoms", "has %d atoms, at most %d fit (each holds at least %g of the mass)", len(m.Atoms), int(1/AtomShare), AtomShare)
		return
	}
	for i, a := range m.Atoms {
		p := fmt.Sprintf("%s.atoms[%d]", path, i)
		c.num(p+".value", a.Value, lo, hi, unit)
		if c.prob(p+".p_low", a.PLow) && c.prob(p+".p_high", a.PHigh) && a.PLow > a.PHigh {
			c.bad(p, "p_low %s is above p_high %s", num(a.PLow), num(a.PHigh))
		}
	}
}

// column checks a value a generated row will carry, by the trace's own
// rules for that column (set puts it in a probe row).
func (c *checker) column(path, v string, set func(r *trace.Request)) {
	r := trace.Request{Identity: trace.Identity{RequestID: "probe"}}
	set(&r)
	err := r.Validate()
	if err == nil {
		return
	}
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	var fe *trace.FieldError
	if errors.As(err, &fe) {
		c.bad(path, "%q cannot be a row's %s: %s", v, fe.Field, fe.Reason)
		return
	}
	c.bad(path, "%q: %v", v, err)
}

// columns maps each mix attribute to the row column it fills.
var columns = map[string]func(r *trace.Request, v string){
	"model":       func(r *trace.Request, v string) { r.Model = v },
	"adapter":     func(r *trace.Request, v string) { r.Adapter = v },
	"tenant":      func(r *trace.Request, v string) { r.Tenant = v },
	"api":         func(r *trace.Request, v string) { r.API = v },
	"stream":      func(*trace.Request, string) {},
	"temperature": func(r *trace.Request, v string) { r.Temperature = parseFloatKey(v) },
	"top_p":       func(r *trace.Request, v string) { r.TopP = parseFloatKey(v) },
	"features": func(r *trace.Request, v string) {
		if v != "" {
			r.Features = strings.Split(v, "+")
		}
	},
}

func (c *checker) categorical(path string, cat *Categorical, set func(r *trace.Request, v string)) {
	for i, v := range cat.Values {
		c.column(fmt.Sprintf("%s.values[%d]", path, i), v, func(r *trace.Request) { set(r, v) })
	}
	if len(cat.Values) > maxCategories {
		c.bad(path+".values", "has %d values, at most %d", len(cat.Values), maxCategories)
	}
	c.prob(path+".other", cat.Other)
	if len(cat.Shares) != len(cat.Values) {
		c.bad(path+".shares", "has %d entries for %d values: want one share per value", len(cat.Shares), len(cat.Values))
		return
	}
	if len(cat.Values) > 0 {
		c.shares(path+".shares", cat.Shares, cat.Other, true)
	}
	if n := len(cat.ByHour); n != 0 && n != 24 {
		c.bad(path+".by_hour", "has %d rows, want 24 (one per hour of the day) or none", n)
		return
	}
	for h, row := range cat.ByHour {
		p := fmt.Sprintf("%s.by_hour[%d]", path, h)
		if len(row) != len(cat.Values) {
			c.bad(p, "has %d entries for %d values: want one share per value", len(row), len(cat.Values))
			continue
		}
		c.shares(p, row, 0, false)
	}
}

// Validate checks that m can generate a workload: every number finite and
// every count non-negative, probabilities in [0, 1] and share vectors of
// matching lengths summing to 1, quantile tables non-decreasing within
// their documented ranges, rates under MaxRatePerS, transition matrices
// square and stochastic. The error (a *ModelError) names each field.
func (m *Model) Validate() error {
	if m.Version != ModelVersion {
		return fmt.Errorf("model version %d, this servetrace reads version %d; refit with 'servetrace fit'", m.Version, ModelVersion)
	}
	var c checker
	m.check(&c)
	walkNumbers(&c, "", reflect.ValueOf(m).Elem())
	if len(c.probs) > 0 {
		return &ModelError{Problems: c.probs}
	}
	return nil
}

func (m *Model) check(c *checker) {
	s := &m.Source
	if s.FirstTurns > s.Rows {
		c.bad("source.first_turns", "%d is more than source.rows %d", s.FirstTurns, s.Rows)
	}
	if s.End.Before(s.Start) {
		c.bad("source.end", "%s is before source.start %s", s.End.Format("2006-01-02T15:04:05Z07:00"), s.Start.Format("2006-01-02T15:04:05Z07:00"))
	}
	if c.prob("source.span_fraction[0]", s.SpanFraction[0]) && c.prob("source.span_fraction[1]", s.SpanFraction[1]) && s.SpanFraction[0] > s.SpanFraction[1] {
		c.bad("source.span_fraction", "%v: from is after to", s.SpanFraction)
	}
	c.num("source.span", s.SpanS(), 0, MaxModelSeconds, "s")
	m.Arrivals.check(c)
	if len(m.Lengths) == 0 {
		c.bad("lengths", "is empty: a model needs at least one length class")
	}
	sum := 0.0
	for i := range m.Lengths {
		sum += m.Lengths[i].Share
		m.Lengths[i].check(c, fmt.Sprintf("lengths[%d]", i))
	}
	if len(m.Lengths) > 0 && !math.IsNaN(sum) && math.Abs(sum-1) > shareTolerance {
		c.bad("lengths[].share", "sum to %s, want 1", num(sum))
	}
	if p := m.Prefix; p != nil {
		p.check(c)
	}
	if s := m.Sessions; s != nil {
		c.prob("sessions.multi_turn_share", s.MultiTurnShare)
		c.marginal("sessions.turns", &s.Turns, 0, MaxSessionTurns, "turns (MaxSessionTurns)", true)
		// Sessions that are all agent graphs leave the turn laws empty.
		linear := s.Graph == nil
		c.marginal("sessions.think_s", &s.ThinkS, 0, MaxThinkS, "s (MaxThinkS, a week)", linear)
		c.marginal("sessions.new_tokens", &s.NewTokens, 0, MaxModelTokens, "tokens (MaxModelTokens)", linear)
		if gr := s.Graph; gr != nil {
			gr.check(c)
		}
	}
	mx := &m.Mix
	for _, f := range []struct {
		name string
		c    *Categorical
	}{{"model", &mx.Model}, {"adapter", &mx.Adapter}, {"tenant", &mx.Tenant}, {"api", &mx.API}, {"stream", &mx.Stream},
		{"temperature", &mx.Temperature}, {"top_p", &mx.TopP}, {"features", &mx.Features}} {
		c.categorical("mix."+f.name, f.c, columns[f.name])
	}
	if ct := m.Contract; ct != nil {
		ct.check(c)
	}
}

// atoiOr parses a whole number, or returns bad (a value every column
// refuses) so that a value that does not parse is reported.
func atoiOr(s string, bad int64) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return bad
	}
	return n
}

// check checks every contract value by the trace's rules for the columns
// a draw fills from it, and the popularity laws' ranges.
func (ct *ContractModel) check(c *checker) {
	c.categorical("contract.image_count", &ct.ImageCount, func(r *trace.Request, v string) {
		r.ImageCount = int32(max(-1, min(atoiOr(v, -1), 1<<30)))
	})
	for k, cat := range ct.ImageSize {
		if k != "1" && k != "2-3" && k != "4+" {
			c.bad("contract.image_size."+k, "is not an image-count class (1, 2-3, 4+)")
		}
		cat := cat
		c.categorical("contract.image_size."+k, &cat, func(r *trace.Request, v string) {
			w, h, ok := strings.Cut(v, "x")
			r.ImageCount = 1
			r.ImageWidthsPx = []int32{int32(max(-1, min(atoiOr(w, -1), 1<<30)))}
			r.ImageHeightsPx = []int32{int32(max(-1, min(atoiOr(h, -1), 1<<30)))}
			if !ok {
				r.ImageWidthsPx[0] = -1
			}
		})
	}
	c.prob("contract.image_reuse", ct.ImageReuse)
	c.categorical("contract.audio_count", &ct.AudioCount, func(r *trace.Request, v string) {
		r.AudioCount = int32(max(-1, min(atoiOr(v, -1), 1<<30)))
	})
	c.categorical("contract.audio_ms", &ct.AudioMs, func(r *trace.Request, v string) {
		r.AudioCount, r.AudioMs = 1, []int64{atoiOr(v, -1)}
	})
	c.categorical("contract.tools", &ct.Tools, func(r *trace.Request, v string) {
		parts := strings.SplitN(v, "/", 3)
		if len(parts) != 3 {
			r.ToolCount = -1
			return
		}
		r.ToolCount = int32(max(-1, min(atoiOr(parts[0], -1), 1<<30)))
		r.ToolTokens, r.ToolChoice = atoiOr(parts[1], -1), parts[2]
	})
	c.categorical("contract.schema", &ct.Schema, func(r *trace.Request, v string) {
		f, tokens, _ := strings.Cut(v, "/")
		r.OutputFormat, r.SchemaTokens = f, atoiOr(tokens, -1)
	})
	for i, v := range ct.Sampling.Values {
		for _, p := range strings.Split(v, ";") {
			name, val, _ := strings.Cut(p, "=")
			switch {
			case name == "":
			case !slices.Contains(samplingKeys, name):
				c.bad(fmt.Sprintf("contract.sampling.values[%d]", i), "%q is not a sampling key (%s)", name, strings.Join(samplingKeys, ", "))
			case name == "n" || name == "top_k" || name == "top_logprobs" || name == "stop":
				if n := atoiOr(val, -2); n < -1 || n > trace.MaxTopK {
					c.bad(fmt.Sprintf("contract.sampling.values[%d]", i), "%s=%q is not a whole number from -1 to %d", name, val, trace.MaxTopK)
				}
			}
		}
	}
	c.categorical("contract.sampling", &ct.Sampling, func(r *trace.Request, v string) { applySamplingKey(r, v) })
	for _, z := range []struct {
		name string
		z    *Zipf
	}{{"contract.schemas", ct.Schemas}, {"contract.adapters", ct.Adapters}} {
		if z.z == nil {
			continue
		}
		if z.z.N < 1 || z.z.N > MaxZipfN {
			c.bad(z.name+".n", "%d, want 1 to %d", z.z.N, MaxZipfN)
		}
		c.num(z.name+".s", z.z.S, 0, 20, "(a Zipf exponent)")
	}
}

func (a *ArrivalModel) check(c *checker) {
	in := &a.Intensity
	const p = "arrivals.intensity."
	if in.MeanRatePerS <= 0 {
		c.bad(p+"mean_rate_per_s", "%s must be positive", num(in.MeanRatePerS))
	}
	c.num(p+"mean_rate_per_s", in.MeanRatePerS, 0, MaxRatePerS, "requests/s (MaxRatePerS)")
	c.num(p+"bin_s", in.BinSeconds, 0, MaxModelSeconds, "s")
	c.num(p+"span_s", in.SpanS, 0, MaxModelSeconds, "s")
	switch in.Kind {
	case "fourier":
		c.num(p+"daily_harmonics", float64(in.DailyHarmonics), 0, maxHarmonics, "")
		c.num(p+"weekly_harmonics", float64(in.WeeklyHarmonics), 0, maxHarmonics, "")
		if c.seen[p+"daily_harmonics"] || c.seen[p+"weekly_harmonics"] {
			break
		}
		if want := 1 + 2*in.DailyHarmonics + 2*in.WeeklyHarmonics; len(in.Coef) != want {
			c.bad(p+"coef", "has %d coefficients for %d daily and %d weekly harmonics, want %d", len(in.Coef), in.DailyHarmonics, in.WeeklyHarmonics, want)
			break
		}
		in.checkCoef(c)
		if n := len(in.CoefSE); n != 0 && n != len(in.Coef) {
			c.bad(p+"coef_se", "has %d entries for %d coefficients", n, len(in.Coef))
		}
	case "piecewise":
		for i, r := range in.PieceRates {
			c.num(fmt.Sprintf("%spiece_rates_per_s[%d]", p, i), r, 0, MaxRatePerS, "requests/s (MaxRatePerS)")
		}
	default:
		c.bad(p+"kind", "%q is not supported (want fourier or piecewise)", in.Kind)
	}
	r := &a.Renewal
	switch r.Dist {
	case "exponential":
	case "gamma", "weibull":
		c.num("arrivals.renewal.shape", r.Shape, minRenewalShape, maxRenewalShape, "")
	default:
		c.bad("arrivals.renewal.dist", "%q is not supported (want exponential, gamma or weibull)", r.Dist)
	}
	c.prob("arrivals.renewal.ks", r.KS)
	if r.Chain != nil {
		r.Chain.check(c, "arrivals.renewal.chain")
	}
	l := &a.Latent
	switch l.Kind {
	case "none", "lgcp":
	default:
		c.bad("arrivals.latent.kind", "%q is not supported (want none or lgcp)", l.Kind)
	}
	if len(l.Sigma) != len(l.TauS) || len(l.Sigma) > maxLatentComponents {
		c.bad("arrivals.latent.sigma", "has %d entries and tau_s %d: want as many, at most %d", len(l.Sigma), len(l.TauS), maxLatentComponents)
	} else if l.Kind == "lgcp" && len(l.Sigma) == 0 {
		c.bad("arrivals.latent.sigma", "is empty: an lgcp layer needs at least one component")
	}
	for j, s := range l.Sigma {
		c.num(fmt.Sprintf("arrivals.latent.sigma[%d]", j), s, 0, maxLatentSigma, "")
	}
	for j, tau := range l.TauS {
		if c.num(fmt.Sprintf("arrivals.latent.tau_s[%d]", j), tau, 0, MaxModelSeconds, "s") && tau == 0 {
			c.bad(fmt.Sprintf("arrivals.latent.tau_s[%d]", j), "must be positive")
		}
	}
	c.prob("arrivals.latent.floor", l.Floor)
	for i, d := range a.Dispersion {
		c.num(fmt.Sprintf("arrivals.dispersion[%d].window_s", i), d.WindowS, 0, MaxModelSeconds, "s")
	}
	for i, g := range a.GapQuantiles {
		c.prob(fmt.Sprintf("arrivals.gap_quantiles[%d].p", i), g.P)
		c.num(fmt.Sprintf("arrivals.gap_quantiles[%d].trace_s", i), g.TraceS, 0, MaxModelSeconds, "s")
		c.num(fmt.Sprintf("arrivals.gap_quantiles[%d].model_s", i), g.ModelS, 0, MaxModelSeconds, "s")
	}
}

func (g *GapChain) check(c *checker, p string) {
	k := len(g.Quantiles)
	switch {
	case g.Order < 1 || g.Order > maxChainOrder:
		c.bad(p+".order", "%d, want 1 to %d", g.Order, maxChainOrder)
		return
	case k < 2 || k > maxChainClasses:
		c.bad(p+".quantiles", "holds %d classes, want 2 to %d", k, maxChainClasses)
		return
	case len(g.Edges) != k-1:
		c.bad(p+".edges", "has %d edges for %d classes, want %d", len(g.Edges), k, k-1)
	}
	for i, e := range g.Edges {
		q := fmt.Sprintf("%s.edges[%d]", p, i)
		if c.num(q, e, 0, maxRescaledGap, "(mean gaps)") && i > 0 && e < g.Edges[i-1] {
			c.bad(q, "%s is below edges[%d] %s: edges must not decrease", num(e), i-1, num(g.Edges[i-1]))
		}
	}
	moves := false
	for j := range g.Quantiles {
		q := &Marginal{Knots: g.Quantiles[j]}
		c.marginal(fmt.Sprintf("%s.quantiles[%d]", p, j), q, 0, maxRescaledGap, "(mean gaps)", true)
		moves = moves || slices.Max(append([]float64{0}, q.Knots...)) > 0
	}
	if !moves {
		c.bad(p+".quantiles", "are all 0: arrivals would never move on")
	}
	if want := int(math.Pow(float64(k), float64(g.Order))); len(g.Transition) != want {
		c.bad(p+".transition", "has %d rows, want %d (%d classes to the power %d)", len(g.Transition), want, k, g.Order)
	}
	for s, row := range g.Transition {
		q := fmt.Sprintf("%s.transition[%d]", p, s)
		if len(row) != k {
			c.bad(q, "has %d entries, want %d (one per class)", len(row), k)
			continue
		}
		c.shares(q, row, 0, true)
	}
	if c.num(p+".scale", g.Scale, 0, maxRescaledGap, "") && g.Scale == 0 {
		c.bad(p+".scale", "must be positive")
	}
}

func (l *LengthClass) check(c *checker, p string) {
	c.column(p+".model", l.Model, func(r *trace.Request) { r.Model = l.Model })
	c.column(p+".api", l.API, func(r *trace.Request) { r.API = l.API })
	c.prob(p+".share", l.Share)
	c.marginal(p+".input_tokens", &l.Input, 0, MaxModelTokens, "tokens (MaxModelTokens)", true)
	c.marginal(p+".output_tokens", &l.Output, 0, MaxModelTokens, "tokens (MaxModelTokens)", true)
	c.num(p+".rho", l.Rho, -1, 1, "(a correlation)")
	c.num(p+".rho_ci95[0]", l.RhoCI95[0], -1, 1, "(a correlation)")
	c.num(p+".rho_ci95[1]", l.RhoCI95[1], -1, 1, "(a correlation)")
	c.num(p+".spearman", l.Spearman, -1, 1, "(a correlation)")
	if l.RhoSampler != nil {
		c.num(p+".rho_sampler", *l.RhoSampler, -1, 1, "(a correlation)")
	}
	if l.Sampler != "copula" && l.Sampler != "binned" {
		c.bad(p+".sampler", "%q is not supported (want copula or binned)", l.Sampler)
	}
	if len(l.Bins) > maxLengthBins {
		c.bad(p+".bins", "has %d bins, at most %d", len(l.Bins), maxLengthBins)
		return
	}
	for i := range l.Bins {
		b := &l.Bins[i]
		q := fmt.Sprintf("%s.bins[%d]", p, i)
		if c.num(q+".input_low", b.InputLow, 0, MaxModelTokens+1, "tokens") && c.num(q+".input_high", b.InputHigh, 0, MaxModelTokens+1, "tokens") {
			if b.InputLow >= b.InputHigh {
				c.bad(q, "input_low %s is not below input_high %s", num(b.InputLow), num(b.InputHigh))
			} else if i > 0 && b.InputHigh < l.Bins[i-1].InputHigh {
				c.bad(q, "input_high %s is below the previous bin's %s: bins must ascend", num(b.InputHigh), num(l.Bins[i-1].InputHigh))
			}
		}
		c.marginal(q+".output_tokens", &b.Output, 0, MaxModelTokens, "tokens (MaxModelTokens)", true)
	}
}

func (pm *PrefixModel) check(c *checker) {
	if pm.BlockSize < 1 || pm.BlockSize > MaxModelTokens {
		c.bad("prefix.block_size", "%d, want 1 to %d tokens", pm.BlockSize, MaxModelTokens)
	}
	reuse := c.prob("prefix.reuse_share", pm.ReuseShare) && pm.ReuseShare > 0
	if len(pm.ReuseByInputBin) > 16 || len(pm.ByInputBin) > 16 {
		c.bad("prefix.laws_by_input_bin", "%d and %d bins, at most 16 each", len(pm.ReuseByInputBin), len(pm.ByInputBin))
		return
	}
	for i, b := range pm.ReuseByInputBin {
		q := fmt.Sprintf("prefix.reuse_by_input_bin[%d]", i)
		if c.num(q+".input_high", b.InputHigh, 0, 1e12, "tokens") && b.InputHigh == 0 {
			c.bad(q+".input_high", "must be positive")
		}
		c.prob(q+".share", b.Share)
	}
	c.marginal("prefix.depth_share", &pm.Depth, 0, 1, "(a share of blocks)", reuse)
	c.marginal("prefix.reuse_age_s", &pm.AgeS, 0, MaxModelSeconds, "s", reuse)
	for i := range pm.ByInputBin {
		b := &pm.ByInputBin[i]
		q := fmt.Sprintf("prefix.laws_by_input_bin[%d]", i)
		if c.num(q+".input_high", b.InputHigh, 0, 1e12, "tokens") && b.InputHigh == 0 {
			c.bad(q+".input_high", "must be positive")
		}
		c.marginal(q+".depth_share", &b.Depth, 0, 1, "(a share of blocks)", true)
		c.marginal(q+".reuse_age_s", &b.AgeS, 0, MaxModelSeconds, "s", true)
		if b.DepthBlocks != nil {
			c.marginal(q+".depth_blocks", b.DepthBlocks, 0, maxPrefixBlocks, "blocks", true)
		}
	}
	if pm.DepthBlocks != nil {
		c.marginal("prefix.depth_blocks", pm.DepthBlocks, 0, maxPrefixBlocks, "blocks", reuse)
	}
	if len(pm.ReuseByFill) > fillBins {
		c.bad("prefix.reuse_by_fill", "%d bins, at most %d", len(pm.ReuseByFill), fillBins)
		return
	}
	for i, b := range pm.ReuseByFill {
		q := fmt.Sprintf("prefix.reuse_by_fill[%d]", i)
		if b.FillHigh < 0 || (i > 0 && b.FillHigh <= pm.ReuseByFill[i-1].FillHigh) {
			c.bad(q+".fill_high", "%d: want a count of blocks ≥ 0, bins ascending", b.FillHigh)
		}
		c.prob(q+".share", b.Share)
	}
	if pm.Distance != nil {
		c.marginal("prefix.reuse_distance_blocks", pm.Distance, 0, maxStackDistance, "blocks", reuse)
	}
	bounds := func(b DepthDistance) (int, int) { return b.Low, b.High }
	if !classes(c, "prefix.distance_by_depth", "blocks", pm.DistanceByDepth, bounds) {
		return
	}
	for i := range pm.DistanceByDepth {
		b := &pm.DistanceByDepth[i]
		q := fmt.Sprintf("prefix.distance_by_depth[%d]", i)
		c.marginal(q+".distance_blocks", &b.Distance, 0, maxStackDistance, "blocks", true)
		if b.Excess != nil {
			c.marginal(q+".parent_excess_share", b.Excess, 0, 1, "(a share of blocks)", true)
		}
	}
	if !classes(c, "prefix.depth_by_prompt_blocks", "prompt_blocks", pm.DepthByPrompt, func(b DepthLaw) (int, int) { return b.Low, b.High }) {
		return
	}
	for i := range pm.DepthByPrompt {
		b := &pm.DepthByPrompt[i]
		q := fmt.Sprintf("prefix.depth_by_prompt_blocks[%d]", i)
		c.marginal(q+".depth_blocks", &b.Blocks, 0, maxPrefixBlocks, "blocks", true)
		c.marginal(q+".depth_share", &b.Share, 0, 1, "(a share of blocks)", true)
		c.prob(q+".whole_share", b.Whole)
		if b.Tail != nil {
			c.marginal(q+".tail_blocks", b.Tail, 0, maxPrefixBlocks, "blocks", true)
		}
	}
	c.marginal("prefix.group_lifetime_s", &pm.GroupLifetimeS, 0, MaxModelSeconds, "s", false)
}

// classes checks a list of block classes (distance_by_depth,
// depth_by_prompt_blocks): at most depthClasses, each 1 ≤ low < high,
// ascending without overlap. It reports false when the list is too long
// to check further.
func classes[T any](c *checker, name, field string, list []T, bounds func(T) (int, int)) bool {
	if len(list) > depthClasses {
		c.bad(name, "%d classes, at most %d", len(list), depthClasses)
		return false
	}
	prevHigh := 0
	for i, b := range list {
		low, high := bounds(b)
		if low < 1 || high <= low || (i > 0 && low < prevHigh) {
			c.bad(fmt.Sprintf("%s[%d]", name, i), "%s_low %d and %s_high %d: want 1 ≤ low < high, classes ascending", field, low, field, high)
		}
		prevHigh = high
	}
	return true
}

// maxStackDistance bounds a stack distance in a model, in blocks: twice the
// blocks the fit remembers.
const maxStackDistance = 2 * maxTrackedBlocks

// checkCoef checks a Fourier intensity's coefficients (as many as its
// harmonics want): each within ±maxFourierCoef, the peak rate at most
// MaxRatePerS.
func (in *Intensity) checkCoef(c *checker) {
	const p = "arrivals.intensity."
	ok := true
	for i, v := range in.Coef {
		ok = c.num(fmt.Sprintf("%scoef[%d]", p, i), v, -maxFourierCoef, maxFourierCoef, "") && ok
	}
	if peak := in.peakRate(); ok && peak > MaxRatePerS {
		c.bad(p+"coef", "gives a peak rate of %.3g requests/s, more than %s (MaxRatePerS)", peak, num(MaxRatePerS))
	}
}

// peakRate is the intensity's highest rate: the largest piece, or the
// Fourier rate's maximum on a 5-minute grid over a week.
func (in *Intensity) peakRate() float64 {
	peak := in.MeanRatePerS
	if in.Kind != "fourier" {
		for _, r := range in.PieceRates {
			peak = max(peak, r)
		}
		return peak
	}
	for t := 0.0; t < weekSeconds; t += 300 {
		peak = max(peak, in.Rate(t))
	}
	return peak
}

// walkNumbers reports every non-finite float and negative integer under v
// (no model count is negative), by JSON field path.
func walkNumbers(c *checker, path string, v reflect.Value) {
	switch v.Kind() {
	case reflect.Float64, reflect.Float32:
		if x := v.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
			c.bad(path, "%s is not a finite number", num(x))
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		if v.Int() < 0 {
			c.bad(path, "%d must not be negative", v.Int())
		}
	case reflect.Pointer:
		if !v.IsNil() {
			walkNumbers(c, path, v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkNumbers(c, fmt.Sprintf("%s[%d]", path, i), v.Index(i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			walkNumbers(c, fmt.Sprintf("%s[%s]", path, k.String()), v.MapIndex(k))
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if path != "" {
				name = path + "." + name
			}
			walkNumbers(c, name, v.Field(i))
		}
	}
}

// checkFinite returns an error naming the first fields of v (a model or a
// part of one) that hold NaN or an infinity.
func checkFinite(v any) error {
	var c checker
	walkNumbers(&c, "", reflect.ValueOf(v).Elem())
	var bad []string
	for _, p := range c.probs {
		if strings.Contains(p, "finite") {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		return &ModelError{Problems: bad, Hint: "JSON cannot hold them; this is a bug in the fit, please report it"}
	}
	return nil
}
