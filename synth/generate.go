package synth

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// GenerateOptions controls Generate.
type GenerateOptions struct {
	// Duration of the workload (0: the fitted span, or to the end of a
	// ramp scenario).
	Duration time.Duration
	// Seed makes the workload reproducible: the same model, options and
	// seed give the same rows.
	Seed uint64
	// Start anchors the first arrival time (default 2024-01-01T00:00:00Z);
	// a Fourier intensity is read at Start's time of day and week.
	Start time.Time
	// RateScale multiplies the intensity (more load, same shape; default 1).
	RateScale float64
	// TimeScale plays the intensity's daily and weekly pattern that many
	// times faster (24: a day in an hour) while bursts keep their real-time
	// scale (default 1).
	TimeScale float64
	// API, Stream and Model override the model's mix when set.
	API    string
	Stream *bool
	Model  string
	// MaxInputTokens caps the prompt of every request (0 = no cap), such
	// as a server's context length: a first turn's input is cut to it; a
	// later turn or agent-graph call, which replay sends with the
	// conversation it continues, is not generated when that prompt would
	// pass it, nor is any request that waits on it (fitsInputCap).
	MaxInputTokens int64
	// Scenarios are layered on the workload in order.
	Scenarios []Scenario
}

// withDefaults fills the zero fields that have a default: rate and time
// scale 1, the default start.
func (o GenerateOptions) withDefaults() GenerateOptions {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if o.Start.IsZero() {
		o.Start = trace.DefaultStart
	}
	return o
}

// EffectiveDuration returns the workload length Generate will use
// (saturating at the longest time.Duration).
func (o *GenerateOptions) EffectiveDuration(m *Model) time.Duration {
	if o.Duration > 0 {
		return o.Duration
	}
	for i := range o.Scenarios {
		s := &o.Scenarios[i]
		if end, ok := s.hooks().length(s); ok {
			return secondsDuration(end)
		}
	}
	return secondsDuration(m.Source.SpanS() / o.withDefaults().TimeScale)
}

// secondsDuration converts seconds to a Duration, saturating; NaN is 0.
func secondsDuration(s float64) time.Duration {
	switch {
	case math.IsNaN(s):
		return 0
	case s >= float64(math.MaxInt64)/1e9:
		return math.MaxInt64
	case s <= float64(math.MinInt64)/1e9:
		return math.MinInt64
	}
	return time.Duration(s * float64(time.Second))
}

// maxSameInstant bounds consecutive arrivals at one instant: more means
// the gap law is degenerate (all zero) and time would never move on.
const maxSameInstant = 1_000_000

// bound refuses, before any row is drawn, a workload past the ceilings:
// a peak rate over MaxRatePerS, more than MaxGenerateRows rows expected, or
// an end after trace.MaxTS (2200).
func (o *GenerateOptions) bound(m *Model, dur time.Duration) error {
	if o.MaxInputTokens < 0 || o.MaxInputTokens > trace.MaxTokens {
		return opterr.New("MaxInputTokens", o.MaxInputTokens, "use a count of tokens from 1 to %d, or 0 for no cap", trace.MaxTokens)
	}
	durS := dur.Seconds()
	startS := float64(o.Start.UnixMicro()) / 1e6
	if o.Start.Before(time.UnixMicro(trace.MinTS)) || startS+durS > float64(trace.MaxTS)/1e6 {
		return opterr.New("Duration", dur.String(), "a workload from %s would end after 2200-01-01, past the last date a trace may hold; shorten it or start earlier",
			o.Start.UTC().Format(time.RFC3339))
	}
	mean := m.MeanRatePerS() * o.RateScale
	base := m.Arrivals.Intensity.peakRate() * o.RateScale
	b := rateBound{mean: mean, rateScale: o.RateScale, durS: durS, flash: 1, first: mean * durS}
	for i := range o.Scenarios {
		s := &o.Scenarios[i]
		s.Params.bound(s, &b)
	}
	ramp, flash, first := b.ramp, b.flash, b.first
	switch peak := max(base, ramp) * flash; {
	case peak <= MaxRatePerS:
	case max(base, ramp) <= MaxRatePerS:
		return fmt.Errorf("flash-crowd factor %g makes a peak rate of %.3g requests/s, more than %g (MaxRatePerS); lower its factor or the rate scale", flash, peak, float64(MaxRatePerS))
	case ramp > base:
		return fmt.Errorf("ramp: a step of %.3g requests/s (rate scale %g included), more than %g (MaxRatePerS); lower its rates or factors", ramp, o.RateScale, float64(MaxRatePerS))
	default:
		return opterr.New("RateScale", o.RateScale, "makes a peak rate of %.3g requests/s (the model's %.3g × %g), more than %g (MaxRatePerS: timestamps are microseconds); lower it",
			peak, base/o.RateScale, o.RateScale, float64(MaxRatePerS))
	}
	turns := m.meanTurns()
	if rows := first * turns; !(rows <= MaxGenerateRows) {
		return opterr.New("Duration", dur.String(), "about %.3g rows expected (%.3g first turns, %.3g turns per session), more than the %g a workload may hold (MaxGenerateRows); shorten it or lower the rate scale",
			rows, first, turns, float64(MaxGenerateRows))
	}
	return nil
}

// rateBound is what bound adds up over the scenarios: the inputs they
// read, the highest ramp step (requests/s), the flash crowds' product of
// factors and the expected first turns.
type rateBound struct {
	mean, rateScale, durS float64
	ramp, flash, first    float64
}

// overlap returns the seconds of [from, to) inside the workload.
func (b *rateBound) overlap(from, to float64) float64 { return max(0, min(to, b.durS)-max(from, 0)) }

// arrivalPlan is how the scenarios shape the arrival intensity: rate
// replaces it where it answers ok (the last scenario to set it wins),
// poisson drops the fitted burstiness, and scale multiplies the rate, in
// scenario order, after rate.
type arrivalPlan struct {
	rate    func(t float64) (float64, bool)
	poisson bool
	scale   []func(t, r float64) float64
}

// inputDraw is how a first turn's input is drawn: u maps the uniform draw
// (nil: the fitted law, a block at a time), then the input is multiplied
// by factor and capped at cap.
type inputDraw struct {
	u      func(float64) float64
	factor float64
	cap    int64
}

// meanTurns is the mean number of requests per session start.
func (m *Model) meanTurns() float64 {
	s := m.Sessions
	if s == nil {
		return 1
	}
	const n = 1024
	sum := 0.0
	for i := range n {
		sum += max(1, math.Round(s.Turns.Quantile((float64(i)+0.5)/n)))
	}
	if gr := s.Graph; gr != nil {
		return (1-gr.Share)*sum/n + gr.Share*gr.meanNodes()
	}
	return sum / n
}

// Generate draws a workload from m and calls emit for every request in
// arrival order. It returns the number of requests emitted. A workload past
// the ceilings (MaxRatePerS, MaxGenerateRows, MaxGenerateSteps, the year
// 2200) is refused before its first row; a cancelled ctx stops it within
// a few milliseconds.
func Generate(ctx context.Context, m *Model, opts GenerateOptions, emit func(trace.Request) error) (int64, error) {
	if err := m.Validate(); err != nil {
		return 0, err
	}
	opts = opts.withDefaults()
	if !(opts.RateScale > 0) || math.IsInf(opts.RateScale, 0) {
		return 0, fmt.Errorf("rate scale %v must be positive and finite", opts.RateScale)
	}
	if !(opts.TimeScale >= minTimeScale && opts.TimeScale <= maxTimeScale) {
		return 0, fmt.Errorf("time scale %v is outside [%g, %g]", opts.TimeScale, minTimeScale, maxTimeScale)
	}
	for i := range opts.Scenarios {
		if err := opts.Scenarios[i].Check(); err != nil {
			return 0, err
		}
	}
	dur := opts.EffectiveDuration(m)
	if dur <= 0 {
		return 0, fmt.Errorf("duration must be positive, got %v", dur)
	}
	if err := opts.bound(m, dur); err != nil {
		return 0, err
	}
	g := newGenerator(m, opts)
	limit := dur.Seconds()
	if steps := limit / g.arrivals.dt; steps > MaxGenerateSteps {
		return 0, opterr.New("Duration", dur.String(), "%.3g steps of the arrival process (%g s each), more than %g (MaxGenerateSteps); shorten it", steps, g.arrivals.dt, float64(MaxGenerateSteps))
	}
	g.arrivals.ctx = ctx
	var n int64
	idOf := func(k int64) string { return fmt.Sprintf("gen-%d-%d", opts.Seed, k) }
	full := func() error {
		if n >= MaxGenerateRows {
			return fmt.Errorf("generated %d rows, the most a workload may hold (MaxGenerateRows); shorten the duration", n)
		}
		return nil
	}
	emitRow := func(r trace.Request) error {
		if err := full(); err != nil {
			return err
		}
		if r.RequestID == "" { // an agent graph's rows are named by their session
			r.RequestID = idOf(n)
		}
		fan := g.follow
		if fan != nil && r.SessionID == "" {
			r.SessionID = "storm-" + r.RequestID // the graph is a session of its own
		}
		if err := emit(r); err != nil {
			return err
		}
		n++
		if fan != nil {
			// The graph's rows take the next ids, in order; it ends at
			// its first row over the input cap.
			g.follow = nil
			first := n
			made := map[string]*trace.Request{r.RequestID: &r}
			for _, c := range fan.graph(r, func(k int) string { return idOf(first + int64(k)) }) {
				if err := full(); err != nil {
					return err
				}
				if !g.fitsInputCap(c.InputTokens, parentRows(made, c.ParentIDs)...) {
					break
				}
				c.RequestID = idOf(n)
				made[c.RequestID] = &c
				g.toolDelay(&c, g.followAt)
				if err := emit(c); err != nil {
					return err
				}
				n++
			}
		}
		if n&1023 == 0 {
			return ctx.Err()
		}
		return nil
	}
	flush := func(upTo float64) error {
		for g.pending.Len() > 0 && g.pending[0].at <= upTo {
			p := heap.Pop(&g.pending).(*pendingTurn)
			if p.at >= limit {
				continue
			}
			var r trace.Request
			var ok bool
			if p.graph != nil {
				r, ok = g.graphTurn(p)
			} else {
				r, ok = g.nextTurn(p)
			}
			if !ok {
				continue // over the input cap: not generated
			}
			if err := emitRow(r); err != nil {
				return err
			}
		}
		return nil
	}
	last, same := math.NaN(), 0
	for {
		t, ok := g.arrivals.next(limit)
		if !ok {
			if err := g.arrivals.err; err != nil {
				return n, err
			}
			break
		}
		if same++; t != last {
			last, same = t, 0
		} else if same >= maxSameInstant {
			return n, fmt.Errorf("%d arrivals in a row at %.6f s: the model's gap law does not move time on (all its gaps are 0); refit with 'servetrace fit'", same, t)
		}
		if err := flush(t); err != nil {
			return n, err
		}
		if err := emitRow(g.firstTurn(t)); err != nil {
			return n, err
		}
	}
	if err := flush(math.Inf(1)); err != nil {
		return n, err
	}
	return n, nil
}

// generator holds the random streams and state of one generation. Each
// model part draws from its own stream, so changing one part does not
// reshuffle the others.
type generator struct {
	m        *Model
	opts     GenerateOptions
	arrivals *arrivalGen
	lengths  *rand.Rand
	attrs    *rand.Rand
	sessRng  *rand.Rand
	scenRng  *rand.Rand
	// contract draws the workload contract (nil without one); storm is
	// the contract scenarios' state.
	contract *contractDrawer
	storm    stormState
	prefix   *prefixGen
	classCum []float64
	pending  turnHeap
	sessions int64
	startUs  int64
	// blocks draws each class's lengths a block at a time.
	blocks []*lengthBlocks
	// follow is set by a scenario on a row that heads an agent graph
	// (subagent-storm, long-horizon): the rows of the graph follow it.
	// followAt is the head's time, at which its graph's rows are judged.
	follow   graphScenario
	followAt float64
	// graphs draws agent-graph sessions; nil without a graph model.
	graphs *graphDraw
}

type pendingTurn struct {
	at float64
	// turn counts the session's turns made so far (the next one's
	// 0-based turn number); turns is how many it has.
	turn     int32
	turns    int32
	session  string
	prev     trace.Request
	classIdx int
	// graph and node, on a request of an agent graph, say which.
	graph *graphRun
	node  int32
}

type turnHeap []*pendingTurn

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].session < h[j].session
}
func (h turnHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *turnHeap) Push(x any)   { *h = append(*h, x.(*pendingTurn)) }
func (h *turnHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newGenerator(m *Model, opts GenerateOptions) *generator {
	g := &generator{m: m, opts: opts,
		lengths: rand.New(rand.NewPCG(opts.Seed, 2)), attrs: rand.New(rand.NewPCG(opts.Seed, 3)),
		sessRng: rand.New(rand.NewPCG(opts.Seed, 4)), scenRng: rand.New(rand.NewPCG(opts.Seed, 5)),
		startUs: opts.Start.UnixMicro(), blocks: make([]*lengthBlocks, len(m.Lengths))}
	if m.Sessions != nil && m.Sessions.Graph != nil {
		g.graphs = newGraphDraw(m.Sessions.Graph, opts.Seed)
	}
	if m.Contract != nil {
		g.contract = newContractDrawer(m.Contract, rand.New(rand.NewPCG(opts.Seed, 6)))
	}
	total := 0.0
	for _, c := range m.Lengths {
		total += c.Share
		g.classCum = append(g.classCum, total)
	}
	in := &m.Arrivals.Intensity
	startS := float64(opts.Start.UnixMicro()) / 1e6
	profile := func(t float64) float64 {
		if in.Kind == "fourier" {
			return in.Rate(startS+t*opts.TimeScale) * opts.RateScale
		}
		return in.Rate(t*opts.TimeScale) * opts.RateScale
	}
	renewal, latent := m.Arrivals.Renewal, m.Arrivals.Latent
	var plan arrivalPlan
	for i := range opts.Scenarios {
		s := &opts.Scenarios[i]
		s.Params.arrivals(s, g, &plan)
	}
	if plan.poisson {
		renewal, latent = Renewal{Dist: "exponential", Shape: 1}, Latent{Kind: "none"}
	}
	base := func(t float64) float64 {
		r := profile(t)
		if plan.rate != nil {
			if v, ok := plan.rate(t); ok {
				r = v
			}
		}
		for _, f := range plan.scale {
			r = f(t, r)
		}
		return r
	}
	g.arrivals = newArrivalGen(base, &renewal, &latent, opts.Seed)
	if m.Prefix != nil && m.Prefix.BlockSize > 0 {
		g.prefix = newPrefixGen(m.Prefix, opts.Seed)
		for i := range opts.Scenarios {
			s := &opts.Scenarios[i]
			s.Params.prefix(s, g.prefix)
		}
	}
	return g
}

func (g *generator) pickClass() int {
	u := g.attrs.Float64() * g.classCum[len(g.classCum)-1]
	for i, c := range g.classCum {
		if u < c {
			return i
		}
	}
	return len(g.classCum) - 1
}

// hourAt returns the UTC hour of day the mix is read at for t.
func (g *generator) hourAt(t float64) int {
	abs := float64(g.startUs)/1e6 + t*g.opts.TimeScale
	return int(math.Mod(abs, daySeconds)/3600) % 24
}

// firstTurn draws a request arriving at t (seconds since the start) that
// starts a session (or stands alone).
func (g *generator) firstTurn(t float64) trace.Request {
	ci := g.pickClass()
	c := &g.m.Lengths[ci]
	d := inputDraw{factor: 1, cap: int64(c.Input.Knots[len(c.Input.Knots)-1])}
	for i := range g.opts.Scenarios {
		s := &g.opts.Scenarios[i]
		s.Params.input(s, t, &d)
	}
	var in, out int64
	if d.u == nil {
		if g.blocks[ci] == nil {
			g.blocks[ci] = newLengthBlocks(c, rand.New(rand.NewPCG(g.opts.Seed, 100+uint64(ci))))
		}
		in, out = g.blocks[ci].next()
	} else {
		// A storm reshapes the input law in its window: drawn one by one.
		in, out = c.sample(g.lengths.Float64(), g.lengths.Float64(), d.u)
	}
	if d.factor != 1 {
		in = min(max(1, int64(math.Round(float64(in)*d.factor))), max(d.cap, in))
	}
	if g.opts.MaxInputTokens > 0 {
		in = min(in, g.opts.MaxInputTokens)
	}
	r := trace.Request{TS: g.startUs + int64(math.Round(t*1e6)), Shape: trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, N: 1}}
	g.attributes(&r, c, t)
	if g.prefix != nil {
		r.PrefixBlocks = g.prefix.blocks(t, in)
	}
	g.applyScenarios(&r, t)
	g.cutToInputCap(&r)
	if g.graphs != nil && g.graphs.rng.Float64() < g.graphs.m.Share {
		g.startGraph(&r, t, ci)
		return r
	}
	if s := g.m.Sessions; s != nil {
		turns := int32(max(1, math.Round(s.Turns.Quantile(g.sessRng.Float64()))))
		if turns > 1 {
			g.sessions++
			r.SessionID = fmt.Sprintf("sess-%d-%d", g.opts.Seed, g.sessions)
			r.Turn = 0
			g.scheduleNext(pendingTurn{turn: 1, turns: turns, session: r.SessionID, prev: r, classIdx: ci}, t)
		}
	}
	return r
}

// scheduleNext queues the turn after p (its copy, with the time set) unless
// p was the session's last.
func (g *generator) scheduleNext(p pendingTurn, t float64) {
	if p.turn >= p.turns {
		return
	}
	p.at = t + g.m.Sessions.ThinkS.Quantile(g.sessRng.Float64())
	heap.Push(&g.pending, &p)
}

// nextTurn builds the next turn of a session: its input holds the previous
// turn's input and output plus new text, and its prefix blocks repeat the
// previous input's full blocks. A turn over the input cap is not made
// (ok false) and ends its session.
func (g *generator) nextTurn(p *pendingTurn) (r trace.Request, ok bool) {
	s := g.m.Sessions
	c := &g.m.Lengths[p.classIdx]
	prev := p.prev
	newTokens := max(1, int64(math.Round(s.NewTokens.Quantile(g.sessRng.Float64()))))
	in := min(prev.InputTokens+prev.OutputTokens+newTokens, MaxModelTokens)
	out := max(1, int64(math.Round(c.Output.Quantile(g.lengths.Float64()))))
	if !g.fitsInputCap(in, &prev) {
		return trace.Request{}, false
	}
	think := max(0, (p.at-float64(prev.TS-g.startUs)/1e6)*1000) // the previous TS was rounded to 1 µs
	r = trace.Request{Identity: trace.Identity{SessionID: p.session, Turn: p.turn, Tenant: prev.Tenant, Model: prev.Model, Adapter: prev.Adapter},
		TS:          g.startUs + int64(math.Round(p.at*1e6)),
		Shape:       trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, N: 1, API: prev.API, Stream: prev.Stream, Features: prev.Features},
		Temperature: prev.Temperature, TopP: prev.TopP, ThinkTimeMs: &think}
	copyContract(&r, &prev)
	if g.prefix != nil {
		r.PrefixBlocks = g.continueBlocks(&prev, nil, in, p.at)
	}
	g.applyScenarios(&r, p.at)
	if !g.fitsInputCap(r.InputTokens, &prev) { // a scenario made it longer
		g.follow = nil
		return trace.Request{}, false
	}
	next := *p
	next.turn++
	next.prev = r
	g.scheduleNext(next, p.at)
	return r, true
}

// fitsInputCap reports whether a request of in tokens that continues the
// conversation of parents fits MaxInputTokens as replay sends it: the
// first parent's prompt, every parent's answer, then at least one token of
// its own, so max(in, first's input + the answers + 1). Cutting such a
// request to the cap would not shorten what replay sends, hence the rule:
// over the cap it is not generated. Without a cap every request fits.
func (g *generator) fitsInputCap(in int64, parents ...*trace.Request) bool {
	limit := g.opts.MaxInputTokens
	if limit <= 0 {
		return true
	}
	need := in
	if len(parents) > 0 {
		sent := parents[0].InputTokens + 1
		for _, p := range parents {
			sent += p.OutputTokens
		}
		need = max(need, sent)
	}
	return need <= limit
}

// cutToInputCap cuts a first turn a scenario made longer to MaxInputTokens,
// with its prefix blocks: it continues no conversation, so what replay
// sends is its input.
func (g *generator) cutToInputCap(r *trace.Request) {
	limit := g.opts.MaxInputTokens
	if limit <= 0 || r.InputTokens <= limit {
		return
	}
	r.InputTokens = limit
	if bs := g.blockSize(); bs > 0 {
		r.PrefixBlocks = r.PrefixBlocks[:min(len(r.PrefixBlocks), int((limit+bs-1)/bs))]
	}
}

// blockSize is the prefix block size of the workload, 0 without prefix
// blocks.
func (g *generator) blockSize() int64 {
	if g.prefix == nil {
		return 0
	}
	return int64(g.prefix.m.BlockSize)
}

// parentRows looks up the rows named by ids among made.
func parentRows(made map[string]*trace.Request, ids []string) []*trace.Request {
	out := make([]*trace.Request, 0, len(ids))
	for _, id := range ids {
		if p, ok := made[id]; ok {
			out = append(out, p)
		}
	}
	return out
}

// attributes draws the categorical attributes of r from the mix.
func (g *generator) attributes(r *trace.Request, c *LengthClass, t float64) {
	mix := &g.m.Mix
	h := g.hourAt(t)
	r.Model = c.Model
	if r.Model == "" {
		r.Model = mix.Model.pick(g.attrs, h)
	}
	r.API = c.API
	if r.API == "" {
		r.API = mix.API.pick(g.attrs, h)
	}
	if r.API == "" {
		r.API = trace.APIChat
	}
	r.Adapter = mix.Adapter.pick(g.attrs, h)
	r.Tenant = mix.Tenant.pick(g.attrs, h)
	r.Stream = mix.Stream.pick(g.attrs, h) == "true"
	r.Temperature = parseFloatKey(mix.Temperature.pick(g.attrs, h))
	r.TopP = parseFloatKey(mix.TopP.pick(g.attrs, h))
	if f := mix.Features.pick(g.attrs, h); f != "" {
		r.Features = strings.Split(f, "+")
	}
	if g.contract != nil {
		g.contract.draw(r)
	}
	if g.opts.API != "" {
		r.API = g.opts.API
	}
	if g.opts.Stream != nil {
		r.Stream = *g.opts.Stream
	}
	if g.opts.Model != "" {
		r.Model = g.opts.Model
	}
}

// applyScenarios applies the scenarios that label r at t, in order (their
// draws share scenRng, so the order is part of the seed's workload), and
// joins their labels into its phase.
func (g *generator) applyScenarios(r *trace.Request, t float64) {
	var phases []string
	for i := range g.opts.Scenarios {
		s := &g.opts.Scenarios[i]
		phase := s.Params.phase(s, t)
		if phase == "" {
			continue
		}
		s.Params.apply(s, g, r, t)
		phases = append(phases, phase)
	}
	if len(phases) > 0 {
		r.Phase = strings.Join(phases, "+")
	}
	if g.follow != nil {
		g.followAt = t
	}
	g.toolDelay(r, t)
}

// toolDelay passes r's tool delay, where it has one, through every
// scenario's tool hook in order (tool-latency-shift), keeping it within
// [0, a week], the range a row may hold.
func (g *generator) toolDelay(r *trace.Request, t float64) {
	if r.ToolMs == nil {
		return
	}
	ms := *r.ToolMs
	for i := range g.opts.Scenarios {
		s := &g.opts.Scenarios[i]
		ms = s.Params.tool(s, t, ms)
	}
	r.ToolMs = new(min(max(ms, 0), trace.MaxClientMs))
}

// pickShare draws a key of shares in sorted key order (deterministic).
func pickShare(rng *rand.Rand, shares map[string]float64) string {
	keys := make([]string, 0, len(shares))
	total := 0.0
	for k, v := range shares {
		keys = append(keys, k)
		total += v
	}
	slices.Sort(keys)
	u := rng.Float64() * total
	for _, k := range keys {
		if u < shares[k] {
			return k
		}
		u -= shares[k]
	}
	return keys[len(keys)-1]
}

func applySampling(r *trace.Request, kind string) {
	zero, one, topP := 0.0, 1.0, 0.95
	switch kind {
	case "greedy":
		r.Temperature, r.TopP = &zero, nil
	case "sampling":
		r.Temperature, r.TopP = &one, &topP
	case "json_schema", "logprobs":
		if !slices.Contains(r.Features, kind) {
			r.Features = append(append([]string(nil), r.Features...), kind)
		}
	}
}

// GenerateToBucket generates a workload from the model at modelPath into a
// new bucket at outDir. The bucket is deterministic: the same model,
// options and seed give byte-identical files. On error nothing that could
// pass for a bucket is left.
func GenerateToBucket(ctx context.Context, modelPath, outDir string, opts GenerateOptions, force bool) (*trace.Manifest, error) {
	m, err := ReadModel(modelPath)
	if err != nil {
		return nil, err
	}
	w, err := trace.NewBucketWriter(outDir, trace.WriterOptions{Force: force, Deterministic: true, Inputs: []string{modelPath}, Context: ctx})
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	n, err := Generate(ctx, m, opts, w.Write)
	if err != nil {
		w.Abort()
		return nil, err
	}
	dur := opts.EffectiveDuration(m)
	if n == 0 {
		w.Abort()
		return nil, opterr.New("Duration", dur.String(), "no requests generated: at %.3g req/s it holds no arrival; make it longer", m.MeanRatePerS()*opts.RateScale)
	}
	gen := map[string]any{"model": modelPath, "seed": opts.Seed, "duration_s": dur.Seconds(),
		"arrivals": m.Arrivals.Chosen, "mean_rate_per_s": m.MeanRatePerS(), "rate_scale": opts.RateScale, "time_scale": opts.TimeScale}
	if len(opts.Scenarios) > 0 {
		gen["scenarios"] = opts.Scenarios
	}
	man := &trace.Manifest{Kind: "workload", TimesRelative: true, Anchor: opts.Start, PrefixIDs: trace.PrefixIDsNone, Generator: gen}
	if m.Prefix != nil {
		man.PrefixIDs, man.BlockSize = trace.PrefixIDsSynthetic, m.Prefix.BlockSize
	}
	if err := w.Close(man); err != nil {
		w.Abort()
		return nil, err
	}
	return man, nil
}
