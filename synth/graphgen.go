package synth

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// graphDraw draws agent-graph sessions from a GraphModel: a shape, then
// each request's wait, input growth and lengths as its parents are built.
type graphDraw struct {
	m        *GraphModel
	shapes   [][][]int32
	children [][][]int32
	cum      []float64
	rng      *rand.Rand
	// delay, growth and tool are the laws of each kind (graphKinds).
	delay, growth [len(graphKinds)]*Marginal
	tool          [len(graphKinds)]float64
}

func newGraphDraw(m *GraphModel, seed uint64) *graphDraw {
	d := &graphDraw{m: m, rng: rand.New(rand.NewPCG(seed, 7))}
	for k := range graphKinds {
		d.delay[k], d.growth[k], d.tool[k] = &m.DelayS, &m.GrowthTokens, m.ToolShare
	}
	for i := range m.ByKind {
		if k := slices.Index(graphKinds[:], m.ByKind[i].Kind); k >= 0 {
			d.delay[k], d.growth[k], d.tool[k] = &m.ByKind[i].DelayS, &m.ByKind[i].GrowthTokens, m.ByKind[i].ToolShare
		}
	}
	total := 0.0
	for _, s := range m.Shapes {
		parents, err := decodeShape(s.Parents)
		if err != nil {
			continue // Validate refused the model already
		}
		children := childrenOf(parents)
		total += float64(s.Weight)
		d.shapes = append(d.shapes, parents)
		d.children = append(d.children, children)
		d.cum = append(d.cum, total)
	}
	return d
}

// meanNodes is the mean number of requests of a graph session: a shape
// lists every request after the first, space-separated.
func (m *GraphModel) meanNodes() float64 {
	var n, w float64
	for _, s := range m.Shapes {
		nodes := 1.0
		if s.Parents != "" {
			nodes += float64(strings.Count(s.Parents, " ") + 1)
		}
		n += nodes * float64(s.Weight)
		w += float64(s.Weight)
	}
	if w == 0 {
		return 1
	}
	return n / w
}

// graphRun is one agent-graph session being generated.
type graphRun struct {
	session  string
	parents  [][]int32
	children [][]int32
	waiting  []int32 // parents not built yet
	rows     []trace.Request
	// at is each node's arrival, end its answer's (at plus a drawn
	// service time where the model has one).
	at, end []float64
	// lastChild is each node's latest child built, or -1.
	lastChild []int32
	classIdx  int
	// made counts the nodes built; the rows are let go once all are.
	made int
}

// startGraph makes root, drawn at t, the first request of an agent-graph
// session and queues the requests that wait on it alone.
func (g *generator) startGraph(root *trace.Request, t float64, classIdx int) {
	d := g.graphs
	k, _ := slices.BinarySearch(d.cum, d.rng.Float64()*d.cum[len(d.cum)-1])
	k = min(k, len(d.cum)-1)
	g.sessions++
	run := &graphRun{session: fmt.Sprintf("sess-%d-%d", g.opts.Seed, g.sessions), parents: d.shapes[k], children: d.children[k], classIdx: classIdx}
	n := len(run.parents)
	run.rows = make([]trace.Request, n)
	run.at = make([]float64, n)
	run.end = make([]float64, n)
	run.waiting = make([]int32, n)
	run.lastChild = make([]int32, n)
	for i := range run.lastChild {
		run.lastChild[i] = -1
	}
	for i, ps := range run.parents {
		run.waiting[i] = int32(len(ps))
	}
	root.SessionID, root.Turn, root.RequestID = run.session, 0, run.session+"-0"
	if len(run.children[0]) > 1 {
		root.Role = trace.RolePlanner
	}
	run.rows[0], run.at[0], run.made = *root, t, 1
	g.built(run, 0)
}

// built draws node i's service time and queues the requests whose last
// parent it is, each due its wait after the latest parent's answer.
func (g *generator) built(run *graphRun, i int32) {
	d := g.graphs
	rho := d.m.SiblingRho
	shared := 0.0
	if len(run.children[i]) > 1 && rho > 0 {
		shared = d.rng.NormFloat64()
	}
	run.end[i] = run.at[i]
	if sv := d.m.ServiceS; sv != nil {
		run.end[i] += sv.Quantile(d.rng.Float64())
	}
	for _, c := range run.children[i] {
		if run.waiting[c]--; run.waiting[c] > 0 {
			continue
		}
		at := math.Inf(-1)
		for _, p := range run.parents[c] {
			at = max(at, run.end[p])
		}
		u := d.rng.Float64()
		if shared != 0 { // siblings' waits in a Gaussian copula
			z := math.Sqrt(rho)*shared + math.Sqrt(1-rho)*d.rng.NormFloat64()
			u = 0.5 * math.Erfc(-z/math.Sqrt2)
		}
		run.at[c] = at + d.delay[kindOf(run.parents, run.children, int(c))].Quantile(u)
		heap.Push(&g.pending, &pendingTurn{at: run.at[c], session: run.session, graph: run, node: c})
	}
}

// graphTurn builds node p.node of its graph: its input grows over its
// first parent's input and output, its prefix blocks repeat that
// parent's full blocks, and it waits the drawn time after its parents.
// A node over the input cap is not made (ok false), so the nodes that
// wait on it are never due.
func (g *generator) graphTurn(p *pendingTurn) (r trace.Request, ok bool) {
	run, i, d := p.graph, p.node, g.graphs
	parents := run.parents[i]
	prev := &run.rows[parents[0]]
	c := &g.m.Lengths[run.classIdx]
	kind := kindOf(run.parents, run.children, int(i))
	growth := int64(math.Round(d.growth[kind].Quantile(d.rng.Float64())))
	in := min(max(1, prev.InputTokens+prev.OutputTokens+growth), MaxModelTokens)
	out := max(1, int64(math.Round(c.Output.Quantile(g.lengths.Float64()))))
	latest := math.Inf(-1)
	ids := make([]string, len(parents))
	rows := make([]*trace.Request, len(parents))
	for k, q := range parents {
		latest = max(latest, run.end[q])
		ids[k], rows[k] = run.rows[q].RequestID, &run.rows[q]
	}
	if !g.fitsInputCap(in, rows...) {
		return trace.Request{}, false
	}
	wait := max(0, (p.at-latest)*1000)
	r = trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("%s-%d", run.session, i), SessionID: run.session, Turn: prev.Turn + 1,
		Tenant: prev.Tenant, Model: prev.Model, Adapter: prev.Adapter},
		TS:          g.startUs + int64(math.Round(p.at*1e6)),
		Shape:       trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, N: 1, API: prev.API, Stream: prev.Stream, Features: prev.Features},
		Temperature: prev.Temperature, TopP: prev.TopP, ParentIDs: ids}
	tool := d.rng.Float64() < d.tool[kind]
	switch {
	case d.m.ServiceS == nil:
		// The trace logged arrivals only, its waits holding the parents'
		// service: the request keeps its time (replay sends it then, or
		// when its parents end if later), as the trace's own would.
	case tool:
		r.ToolMs = &wait
	default:
		r.ThinkTimeMs = &wait
	}
	switch {
	case len(parents) > 1 || len(run.children[i]) > 1:
		r.Role = trace.RolePlanner
	case len(run.children[parents[0]]) > 1:
		r.Role = trace.RoleSubAgent
	case tool:
		r.Role = trace.RoleToolFollowUp
	default:
		r.Role = trace.RoleChat
	}
	copyContract(&r, prev)
	if g.prefix != nil {
		var sibling *trace.Request
		if k := run.lastChild[parents[0]]; k >= 0 && d.rng.Float64() < d.m.SharedAnswerShare {
			sibling = &run.rows[k]
		}
		r.PrefixBlocks = g.continueBlocks(prev, sibling, in, p.at)
	}
	g.applyScenarios(&r, p.at)
	if !g.fitsInputCap(r.InputTokens, rows...) { // a scenario made it longer
		g.follow = nil
		return trace.Request{}, false
	}
	// Only a child that is made may be a later sibling's: a dropped one's
	// row stays empty.
	run.lastChild[parents[0]] = i
	run.rows[i] = r
	g.built(run, i)
	if run.made++; run.made == len(run.rows) {
		run.rows = nil // the session's rows are no longer needed
	}
	return r, true
}

// continueBlocks returns the prefix blocks of a request of in tokens that
// continues prev's conversation: prev's full blocks, then fresh ones; with
// a sibling (an earlier child of prev that quoted prev's answer too), the
// sibling's blocks as far as prev's prompt and answer reach, then fresh.
func (g *generator) continueBlocks(prev, sibling *trace.Request, in int64, at float64) []int64 {
	bs := g.prefix.m.BlockSize
	nb := min(int((in+int64(bs)-1)/int64(bs)), maxPrefixBlocks)
	from, full := prev.PrefixBlocks, min(int(prev.InputTokens/int64(bs)), len(prev.PrefixBlocks), nb)
	if sibling != nil {
		from, full = sibling.PrefixBlocks, min(int((prev.InputTokens+prev.OutputTokens)/int64(bs)), len(sibling.PrefixBlocks), nb)
	}
	if g.prefix.cold != nil && g.prefix.cold(at) {
		full = 0
	}
	blocks := append(make([]int64, 0, nb), from[:full]...)
	for len(blocks) < nb {
		blocks = append(blocks, g.prefix.freshID())
	}
	g.prefix.record(at, blocks)
	return blocks
}
