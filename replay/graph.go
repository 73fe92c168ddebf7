package replay

import (
	"fmt"
	"sync"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// graph holds a run's agent graph (trace.Request.ParentIDs) in open loop:
// a request that names parents is sent once every one of them has
// finished, after its tool time and think time, not at its own time, so a
// slow answer delays every request that waits on it, as in production.
//
// Parents must come before their children in the workload: a parent not
// read before its child (not in the window, another shard's, or named
// after it, which a cycle needs) is taken as finished, and counted. So a
// cycle or a parent that never runs never holds a request.
type graph struct {
	mu    sync.Mutex
	nodes map[string]*node // every request read, by id, until forgotten
	// order lists the finished nodes oldest first, so those without a
	// waiting child are forgotten once graphMemory of them have finished
	// after them.
	order []string
	// waiting counts the requests held for a parent.
	waiting int
	// unknownParents counts parent ids not read before their child, the
	// first such child being firstUnknown.
	unknownParents int64
	firstUnknown   string
}

// node is one request of the graph.
type node struct {
	id       string
	p        *planned // nil once it was handed out
	done     bool
	ok       bool
	doneNs   int64
	left     int    // parents not finished
	readyNs  int64  // the latest parent's end so far
	failed   string // why it cannot be sent: a parent did not end ok
	children []*node
}

// graphMemory bounds the finished requests the graph remembers: a child
// names parents that finished shortly before it, and a day-long workload
// must not grow the map without end.
const graphMemory = 1 << 16

func newGraph() *graph { return &graph{nodes: map[string]*node{}} }

// add registers p, read from the workload; it reports whether p waits
// for a parent (and is held here), and, when it waits for none, whether
// it follows a finished parent (follows; ready is when the last one
// finished) or cannot be sent (failed, saying why). A request following
// no parent it knows is sent at its own time.
func (g *graph) add(p *planned) (held bool, ready int64, follows bool, failed string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := &node{id: p.req.RequestID, p: p}
	g.nodes[n.id] = n
	for _, id := range p.req.ParentIDs {
		parent := g.nodes[id]
		switch {
		case parent == nil:
			if g.unknownParents++; g.unknownParents == 1 {
				g.firstUnknown = n.id
			}
			continue
		case !parent.done:
			n.left++
			parent.children = append(parent.children, n)
		case !parent.ok:
			n.failed = fmt.Sprintf("its parent %s did not end ok", id)
		default:
			n.readyNs = max(n.readyNs, parent.doneNs)
		}
		follows = true
	}
	if n.left > 0 { // failed or not, released when its last parent ends
		g.waiting++
		return true, 0, true, ""
	}
	if n.failed != "" {
		n.p, n.done = nil, true
		g.remember(n)
		return false, 0, true, n.failed
	}
	return false, n.readyNs, follows, ""
}

// finish records that the request id ended at doneNs (ok or not) and
// returns the children it released: each either ready (its last parent
// done, at readyNs) or failed, with why.
func (g *graph) finish(id string, doneNs int64, ok bool) []released {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[id]
	if n == nil || n.done {
		return nil
	}
	var out []released
	g.end(n, doneNs, ok, &out)
	return out
}

// released is a held request whose parents are all done.
type released struct {
	p       *planned
	readyNs int64
	failed  string
}

// end marks n done and releases its children; a child that cannot be
// sent ends too, releasing its own.
func (g *graph) end(n *node, doneNs int64, ok bool, out *[]released) {
	n.done, n.ok, n.doneNs = true, ok, doneNs
	n.p = nil
	g.remember(n)
	for _, c := range n.children {
		if c.done {
			continue
		}
		if !ok && c.failed == "" {
			c.failed = "a parent did not end ok"
		}
		c.readyNs = max(c.readyNs, doneNs)
		if c.left--; c.left > 0 {
			continue
		}
		g.waiting--
		*out = append(*out, released{p: c.p, readyNs: c.readyNs, failed: c.failed})
		if c.failed != "" {
			g.end(c, doneNs, false, out)
		} else {
			c.p = nil
		}
	}
	n.children = nil
}

// remember keeps n's id in the finished order, forgetting the oldest
// finished nodes past graphMemory.
func (g *graph) remember(n *node) {
	g.order = append(g.order, n.id)
	for len(g.order) > graphMemory {
		delete(g.nodes, g.order[0])
		g.order = g.order[1:]
	}
}

// drain returns every request still held, and forgets them: the run
// ended before their parents did.
func (g *graph) drain() []*planned {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*planned
	for _, n := range g.nodes {
		if !n.done && n.left > 0 && n.p != nil {
			out = append(out, n.p)
			n.done, n.p = true, nil
		}
	}
	g.waiting = 0
	return out
}

// unknown returns how many parent ids named a request not read before
// their child, and the first such child; 0 for no graph.
func (g *graph) unknown() (int64, string) {
	if g == nil {
		return 0, ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unknownParents, g.firstUnknown
}

// graphDelay is how long a request of the agent graph waits after its
// last parent's answer: its tool's run, then its think time.
func (r *Runner) graphDelay(q *trace.Request) time.Duration {
	var d time.Duration
	if v, ok := r.behaviourMs("tool_ms", q.ToolMs, q.RequestID); ok {
		d += v
	}
	if v, ok := r.behaviourMs("think_time_ms", q.ThinkTimeMs, q.RequestID); ok {
		d += v
	}
	return d
}
