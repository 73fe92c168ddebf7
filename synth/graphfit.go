package synth

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// GraphModel describes the sessions that are agent graphs: which requests
// wait on which (the graph's shape, drawn whole, so turns per session and
// fan-out width keep their joint law), how long a request waits after its
// last parent's answer, and how much its input grows over its first
// parent's. Lengths of a graph's first request come from the length
// model, like any first turn's.
type GraphModel struct {
	// Sessions counts the agent-graph sessions fitted; Share is their
	// share of all sessions.
	Sessions int64   `json:"sessions"`
	Share    float64 `json:"share"`
	// Shapes are the graphs' shapes, each with how many of the sampled
	// sessions had it.
	Shapes []GraphShape `json:"shapes"`
	// DelayS is the wait after the last parent's answer, in seconds: the
	// logged tool_ms plus think_time_ms, else the gap after the latest
	// parent's arrival (an upper bound: it holds the parent's service).
	DelayS Marginal `json:"delay_s"`
	// ServiceS is how long a parent took, its arrival to its answer, in
	// seconds, where the trace logged both a child's arrival and its wait
	// (the gap less the wait); nil where it did not, the wait then holding
	// the parent's service. A generated child arrives at its parents'
	// arrival, plus this, plus its wait.
	ServiceS *Marginal `json:"service_s,omitempty"`
	// ToolShare is the share of those waits that were a tool's run.
	ToolShare float64 `json:"tool_share"`
	// SiblingRho is the correlation, in a Gaussian copula, of the waits
	// of requests with one parent (from the rank correlation of sibling
	// pairs): sub-agents a planner starts together arrive together, and
	// the prefix cache sees their shared context as close reuses.
	SiblingRho float64 `json:"sibling_rho"`
	// SharedAnswerShare is the share of a parent's later children whose
	// prompt shares more with the child before them than the parent's
	// prompt: both quote the parent's answer (sub-agents handed a
	// planner's plan), which the prefix cache sees as reuse.
	SharedAnswerShare float64 `json:"shared_answer_share"`
	// GrowthTokens is a request's input beyond its first parent's input
	// and output; negative where it keeps less (a sub-agent that does not
	// read the planner's answer).
	GrowthTokens Marginal `json:"growth_tokens"`
	// ByKind holds the wait and growth laws of each kind of request
	// (graphKinds) that the fit saw at least minKindSamples of: a tool's
	// run, a planner's dispatch to sub-agents and a join's gathering
	// differ, and the prefix cache sees how soon each reuses its parent.
	// A kind without laws here draws from the pooled ones.
	ByKind []GraphKind `json:"by_kind,omitempty"`
}

// GraphKind is the laws of one kind of request in an agent graph.
type GraphKind struct {
	Kind         string   `json:"kind"`
	DelayS       Marginal `json:"delay_s"`
	GrowthTokens Marginal `json:"growth_tokens"`
	// ToolShare is the share of the kind's waits that were a tool's run.
	ToolShare float64 `json:"tool_share"`
}

// The kinds of request of an agent graph: the only child of its first
// parent (a chain: a tool follow-up, a user's next turn), one of several
// (a fan-out), and a join (several parents).
const (
	kindChain = iota
	kindFan
	kindJoin
)

var graphKinds = [...]string{"chain", "fan-out", "join"}

// minKindSamples is the fewest requests of a kind that get laws of their own.
const minKindSamples = 50

// kindOf classifies node i of a graph.
func kindOf(parents, children [][]int32, i int) int {
	switch {
	case len(parents[i]) > 1:
		return kindJoin
	case len(children[parents[i][0]]) > 1:
		return kindFan
	}
	return kindChain
}

// childrenOf returns each node's children.
func childrenOf(parents [][]int32) [][]int32 {
	children := make([][]int32, len(parents))
	for i, ps := range parents {
		for _, p := range ps {
			children[p] = append(children[p], int32(i))
		}
	}
	return children
}

// GraphShape is one shape of agent graph: Parents lists, for each request
// after the first in arrival order, how far back its parents are ("1" the
// request just before it, "3,2,1" a join of the three before it),
// separated by spaces; "" is a lone request.
type GraphShape struct {
	Weight  int64  `json:"w"`
	Parents string `json:"p"`
}

// maxGraphNodes bounds the requests of one session whose shape a fit
// keeps; a longer session counts in the turns histogram.
const maxGraphNodes = 1024

// maxHeldBlocks bounds the prefix block ids a fit holds over its open
// sessions to compare siblings' prompts; past it a request's blocks are
// not kept and its sibling comparison is skipped.
const maxHeldBlocks = 1 << 25

// maxGraphShapes bounds the sessions whose shapes a fit samples, and
// maxShapeBytes the text the model's shapes take.
const (
	maxGraphShapes = 8192
	maxShapeBytes  = 160 << 10
)

// graphNodes is one open session's requests, in arrival order, while
// their count is within maxGraphNodes.
type graphNodes struct {
	ids     map[string]int32
	ts      []float64
	in, out []int64
	parents [][]int32
	// childWait is the wait of each request's latest child (NaN: none);
	// blocks each request's prefix blocks and childBlocks its latest
	// child's.
	childWait           []float64
	blocks, childBlocks [][]int64
	// wait and grow are each request's wait and growth (NaN: a root),
	// service its parents' service where its wait was logged (else NaN),
	// sibling the wait of the sibling before it (NaN: none), shared
	// whether it shares more with that sibling than with the parent (−1:
	// not compared); tool says the wait was a tool's run.
	wait, grow, service, sibling []float64
	shared                       []int8
	tool                         []bool
	// budget is the block ids the fit may still hold over all open
	// sessions (maxHeldBlocks); heldBlocks those this session holds.
	budget     *int
	heldBlocks int
	tooLong    bool
}

// add appends r with its parents (those of this session it names; the
// request before it when it names none), its wait after them and its
// growth over its first parent, and how it compares with the sibling
// before it. explicit says it named a parent of this session; false
// past maxGraphNodes, when nothing is kept.
func (n *graphNodes) add(r *trace.Request, t float64) (explicit, kept bool) {
	if n.tooLong || len(n.ts) >= maxGraphNodes {
		n.tooLong = true
		return false, false
	}
	if n.ids == nil {
		n.ids = map[string]int32{}
	}
	var parents []int32
	for _, id := range r.ParentIDs {
		if i, ok := n.ids[id]; ok && !slices.Contains(parents, i) {
			parents = append(parents, i)
		}
	}
	explicit = len(parents) > 0
	if !explicit && len(n.ts) > 0 {
		parents = []int32{int32(len(n.ts) - 1)}
	}
	var blocks []int64
	if n.budget != nil && *n.budget >= len(r.PrefixBlocks) {
		blocks = slices.Clone(r.PrefixBlocks)
		*n.budget -= len(blocks)
		n.heldBlocks += len(blocks)
	}
	wait, grow, service, sibling, shared := math.NaN(), math.NaN(), math.NaN(), math.NaN(), int8(-1)
	if len(parents) > 0 {
		latest := math.Inf(-1)
		for _, p := range parents {
			latest = max(latest, n.ts[p])
		}
		gap := t - latest
		wait = gap
		if r.ToolMs != nil || r.ThinkTimeMs != nil {
			wait = 0
			if r.ToolMs != nil {
				wait += *r.ToolMs / 1000
			}
			if r.ThinkTimeMs != nil {
				wait += *r.ThinkTimeMs / 1000
			}
			service = min(max(gap-wait, 0), MaxThinkS)
		}
		if !(wait >= 0) { // backwards or NaN
			wait = 0
		}
		wait = min(wait, MaxThinkS)
		first := parents[0]
		grow = float64(r.InputTokens - n.in[first] - n.out[first])
		sibling, n.childWait[first] = n.childWait[first], wait
		if prev := n.childBlocks[first]; prev != nil && len(blocks) > 0 && len(n.blocks[first]) > 0 {
			shared = 0
			if commonPrefix(prev, blocks) > commonPrefix(n.blocks[first], blocks) {
				shared = 1
			}
		}
		n.childBlocks[first] = blocks
	}
	n.ids[r.RequestID] = int32(len(n.ts))
	n.ts = append(n.ts, t)
	n.in = append(n.in, r.InputTokens)
	n.out = append(n.out, r.OutputTokens)
	n.parents = append(n.parents, parents)
	n.childWait = append(n.childWait, math.NaN())
	n.blocks = append(n.blocks, blocks)
	n.childBlocks = append(n.childBlocks, nil)
	n.wait = append(n.wait, wait)
	n.grow = append(n.grow, grow)
	n.service = append(n.service, service)
	n.sibling = append(n.sibling, sibling)
	n.shared = append(n.shared, shared)
	n.tool = append(n.tool, r.ToolMs != nil)
	return explicit, true
}

// shape encodes the graph as GraphShape.Parents.
func (n *graphNodes) shape() string {
	var b strings.Builder
	for i, ps := range n.parents {
		if i == 0 {
			continue
		}
		if i > 1 {
			b.WriteByte(' ')
		}
		for k, p := range ps {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i - int(p)))
		}
	}
	return b.String()
}

// graphFitter accumulates the agent-graph sessions: their shapes, and
// each request's wait and growth over its parents.
type graphFitter struct {
	shapes        *reservoir[string]
	delay, growth *reservoir[float64]
	// service holds the parents' service times, where a wait was logged.
	service *reservoir[float64]
	// siblings pairs the waits of consecutive children of one parent;
	// laterSiblings counts the children after a first, sharedAnswers those
	// sharing more with the child before than with the parent.
	siblings                     *reservoir[[2]float64]
	kindDelay, kindGrowth        [len(graphKinds)]*reservoir[float64]
	kindTools                    [len(graphKinds)]int64
	tools                        int64
	laterSiblings, sharedAnswers int64
}

func newGraphFitter() *graphFitter {
	f := &graphFitter{shapes: newReservoir[string](maxGraphShapes, 12),
		delay: newReservoir[float64](maxPairs, 13), growth: newReservoir[float64](maxPairs, 14), siblings: newReservoir[[2]float64](maxPairs, 15),
		service: newReservoir[float64](maxPairs, 32)}
	for k := range graphKinds {
		f.kindDelay[k] = newReservoir[float64](maxKindPairs, 16+uint64(k))
		f.kindGrowth[k] = newReservoir[float64](maxKindPairs, 24+uint64(k))
	}
	return f
}

// maxKindPairs bounds each kind's wait and growth samples.
const maxKindPairs = maxPairs / 4

// close counts a finished agent-graph session; false when its shape was
// too long to keep.
func (f *graphFitter) close(n *graphNodes) bool {
	if n.tooLong {
		return false
	}
	f.shapes.add(n.shape())
	children := childrenOf(n.parents)
	for i := 1; i < len(n.parents); i++ {
		k := kindOf(n.parents, children, i)
		f.delay.add(n.wait[i])
		f.growth.add(n.grow[i])
		f.kindDelay[k].add(n.wait[i])
		f.kindGrowth[k].add(n.grow[i])
		if n.tool[i] {
			f.tools++
			f.kindTools[k]++
		}
		if !math.IsNaN(n.service[i]) {
			f.service.add(n.service[i])
		}
		if !math.IsNaN(n.sibling[i]) {
			f.siblings.add([2]float64{n.sibling[i], n.wait[i]})
		}
		if n.shared[i] >= 0 {
			f.laterSiblings++
			f.sharedAnswers += int64(n.shared[i])
		}
	}
	return true
}

// sessions is the number of agent-graph sessions closed: each left its
// shape in the sample.
func (f *graphFitter) sessions() int64 { return int64(f.shapes.seen) }

func (f *graphFitter) merge(o *graphFitter, rng *rand.Rand) {
	f.tools += o.tools
	f.shapes.merge(o.shapes, rng)
	f.delay.merge(o.delay, rng)
	f.growth.merge(o.growth, rng)
	f.service.merge(o.service, rng)
	f.siblings.merge(o.siblings, rng)
	for k := range graphKinds {
		f.kindDelay[k].merge(o.kindDelay[k], rng)
		f.kindGrowth[k].merge(o.kindGrowth[k], rng)
		f.kindTools[k] += o.kindTools[k]
	}
	f.laterSiblings += o.laterSiblings
	f.sharedAnswers += o.sharedAnswers
}

// commonPrefix is how many leading ids a and b share.
func commonPrefix(a, b []int64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// fit returns the graph model, nil without an agent-graph session; all
// is the number of sessions of every kind.
func (f *graphFitter) fit(all int64) *GraphModel {
	sessions, delays := f.sessions(), int64(f.delay.seen)
	if sessions == 0 || delays == 0 {
		return nil
	}
	m := &GraphModel{Sessions: sessions, Share: float64(sessions) / float64(all),
		Shapes:    shapeTable(f.shapes.items, rand.New(rand.NewPCG(foldSeed, 12))),
		DelayS:    floatMarginal(f.delay, 257),
		ToolShare: float64(f.tools) / float64(delays), GrowthTokens: floatMarginal(f.growth, 257)}
	for k, name := range graphKinds {
		if f.kindDelay[k].seen >= minKindSamples {
			m.ByKind = append(m.ByKind, GraphKind{Kind: name, DelayS: floatMarginal(f.kindDelay[k], 257), GrowthTokens: floatMarginal(f.kindGrowth[k], 257),
				ToolShare: float64(f.kindTools[k]) / float64(f.kindDelay[k].seen)})
		}
	}
	if f.service.seen > 0 {
		m.ServiceS = new(floatMarginal(f.service, 257))
	}
	if f.laterSiblings > 0 {
		m.SharedAnswerShare = float64(f.sharedAnswers) / float64(f.laterSiblings)
	}
	if len(f.siblings.items) >= 2 {
		a, b := make([]float64, len(f.siblings.items)), make([]float64, len(f.siblings.items))
		for i, p := range f.siblings.items {
			a[i], b[i] = p[0], p[1]
		}
		// Pearson's correlation of the Gaussian copula with this Spearman's.
		rs := rank.Spearman(a, b)
		m.SiblingRho = min(max(2*math.Sin(math.Pi*rs/6), 0), 0.999)
	}
	return m
}

// shapeTable counts the distinct shapes sampled, most common first; past
// maxShapeBytes of text it keeps a uniform half of the sample, again and
// again, so the model stays small and unbiased.
func shapeTable(sample []string, rng *rand.Rand) []GraphShape {
	sample = slices.Clone(sample)
	for {
		counts := map[string]int64{}
		for _, s := range sample {
			counts[s]++
		}
		size := 0
		for s := range counts {
			size += len(s) + 16
		}
		if size <= maxShapeBytes || len(sample) < 2 {
			out := make([]GraphShape, 0, len(counts))
			for s, w := range counts {
				out = append(out, GraphShape{Weight: w, Parents: s})
			}
			slices.SortFunc(out, func(a, b GraphShape) int {
				return cmp.Or(cmp.Compare(b.Weight, a.Weight), cmp.Compare(a.Parents, b.Parents))
			})
			return out
		}
		rng.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
		sample = sample[:len(sample)/2]
	}
}

// decodeShape turns GraphShape.Parents into each request's parents.
func decodeShape(s string) ([][]int32, error) {
	parents := [][]int32{nil}
	if s == "" {
		return parents, nil
	}
	for i, node := range strings.Split(s, " ") {
		self := i + 1
		var ps []int32
		for _, f := range strings.Split(node, ",") {
			d, err := strconv.Atoi(f)
			if err != nil || d < 1 || d > self {
				return nil, errShape(s, self)
			}
			ps = append(ps, int32(self-d))
		}
		if len(ps) > trace.MaxParents {
			return nil, errShape(s, self)
		}
		parents = append(parents, ps)
	}
	if len(parents) > maxGraphNodes {
		return nil, errShape(s, maxGraphNodes)
	}
	return parents, nil
}

func errShape(s string, node int) error {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Errorf("graph shape %q: request %d names no earlier request as parent, or more than %d, or the shape has more than %d requests", s, node, trace.MaxParents, maxGraphNodes)
}

// graphJSON is a graphFitter in a partial fit.
type graphJSON struct {
	Tools      int64                  `json:"tools"`
	Shapes     *reservoir[string]     `json:"shapes"`
	Delay      *reservoir[float64]    `json:"delay_s"`
	Growth     *reservoir[float64]    `json:"growth_tokens"`
	Siblings   *reservoir[[2]float64] `json:"siblings"`
	Service    *reservoir[float64]    `json:"service_s"`
	Later      int64                  `json:"later_siblings,omitempty"`
	KindDelay  []*reservoir[float64]  `json:"kind_delay_s"`
	KindGrowth []*reservoir[float64]  `json:"kind_growth_tokens"`
	KindTools  []int64                `json:"kind_tools"`
	Shared     int64                  `json:"shared_answers,omitempty"`
}

func (f *graphFitter) MarshalJSON() ([]byte, error) {
	return json.Marshal(graphJSON{Tools: f.tools, Shapes: f.shapes, Delay: f.delay, Growth: f.growth, Siblings: f.siblings, Service: f.service, Later: f.laterSiblings, Shared: f.sharedAnswers,
		KindDelay: f.kindDelay[:], KindGrowth: f.kindGrowth[:], KindTools: f.kindTools[:]})
}

func (f *graphFitter) UnmarshalJSON(b []byte) error {
	var w graphJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if err := errors.Join(capacityIs("graph shapes", w.Shapes, maxGraphShapes, false), capacityIs("delay_s", w.Delay, maxPairs, false),
		capacityIs("growth_tokens", w.Growth, maxPairs, false), capacityIs("siblings", w.Siblings, maxPairs, false),
		capacityIs("service_s", w.Service, maxPairs, false)); err != nil {
		return err
	}
	// Each count is the number of values its reservoir saw, or bounded by one.
	delays := int64(w.Delay.seen)
	if w.Tools < 0 || w.Tools > delays || w.Later < 0 || w.Later > delays || w.Shared < 0 || w.Shared > w.Later {
		return fmt.Errorf("graphs: %d sessions, %d waits of which %d tools, %d later siblings of which %d shared",
			w.Shapes.seen, delays, w.Tools, w.Later, w.Shared)
	}
	if len(w.KindDelay) != len(graphKinds) || len(w.KindGrowth) != len(graphKinds) || len(w.KindTools) != len(graphKinds) {
		return fmt.Errorf("graphs: %d and %d kinds of wait and growth, want %d", len(w.KindDelay), len(w.KindGrowth), len(graphKinds))
	}
	for k := range graphKinds {
		if err := errors.Join(capacityIs("kind_delay_s", w.KindDelay[k], maxKindPairs, false), capacityIs("kind_growth_tokens", w.KindGrowth[k], maxKindPairs, false)); err != nil {
			return err
		}
		if w.KindTools[k] < 0 || w.KindTools[k] > int64(w.KindDelay[k].seen) {
			return fmt.Errorf("graphs: %d tool waits of %d %s requests", w.KindTools[k], w.KindDelay[k].seen, graphKinds[k])
		}
	}
	for _, s := range w.Shapes.items {
		if _, err := decodeShape(s); err != nil {
			return err
		}
	}
	*f = graphFitter{tools: w.Tools, shapes: w.Shapes, delay: w.Delay, growth: w.Growth, siblings: w.Siblings, service: w.Service, laterSiblings: w.Later, sharedAnswers: w.Shared}
	copy(f.kindDelay[:], w.KindDelay)
	copy(f.kindGrowth[:], w.KindGrowth)
	copy(f.kindTools[:], w.KindTools)
	return nil
}

// check reports what makes the graph model unusable.
func (m *GraphModel) check(c *checker) {
	c.prob("sessions.graph.share", m.Share)
	c.prob("sessions.graph.tool_share", m.ToolShare)
	c.prob("sessions.graph.shared_answer_share", m.SharedAnswerShare)
	c.num("sessions.graph.sibling_rho", m.SiblingRho, 0, 0.999, "(a correlation)")
	if len(m.Shapes) == 0 {
		c.bad("sessions.graph.shapes", "is empty: refit with 'servetrace fit'")
	}
	for i, s := range m.Shapes {
		if s.Weight <= 0 {
			c.bad(fmt.Sprintf("sessions.graph.shapes[%d].w", i), "is %d, want a positive count", s.Weight)
		}
		if _, err := decodeShape(s.Parents); err != nil {
			c.bad(fmt.Sprintf("sessions.graph.shapes[%d].p", i), "%v", err)
		}
	}
	c.marginal("sessions.graph.delay_s", &m.DelayS, 0, MaxThinkS, "s (MaxThinkS, a week)", true)
	c.marginal("sessions.graph.growth_tokens", &m.GrowthTokens, -MaxModelTokens, MaxModelTokens, "tokens (MaxModelTokens)", true)
	if m.ServiceS != nil {
		c.marginal("sessions.graph.service_s", m.ServiceS, 0, MaxThinkS, "s (MaxThinkS, a week)", true)
	}
	for i := range m.ByKind {
		k := &m.ByKind[i]
		path := fmt.Sprintf("sessions.graph.by_kind[%d]", i)
		if !slices.Contains(graphKinds[:], k.Kind) {
			c.bad(path+".kind", "is %q, want one of %s", k.Kind, strings.Join(graphKinds[:], ", "))
		}
		c.prob(path+".tool_share", k.ToolShare)
		c.marginal(path+".delay_s", &k.DelayS, 0, MaxThinkS, "s (MaxThinkS, a week)", true)
		c.marginal(path+".growth_tokens", &k.GrowthTokens, -MaxModelTokens, MaxModelTokens, "tokens (MaxModelTokens)", true)
	}
}
