package replay

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// graph holds a run's agent graph (trace.Request.ParentIDs) in open loop:
// a request that names parents is sent once every one of them has
// finished, after its tool time and think time, not at its own time (where
// neither is logged, at its own time unless its parents end later), so a
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
	// unknownParents counts parent ids not read before their child, the
	// first such child being firstUnknown.
	unknownParents int64
	firstUnknown   string
	// convs lists the finished nodes holding their conversation, oldest
	// first; convBytes is the text they hold, at most maxGraphConvBytes.
	convs     []*node
	convBytes int
	// forgotten counts children sent without a parent's conversation
	// that was no longer held.
	forgotten      int64
	firstForgotten string
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
	// conv is the conversation the request sent and its answer, for its
	// children's prompts, while held (convBytes of text).
	conv      *session
	convBytes int
}

// maxGraphConvBytes bounds the conversations the graph holds for children
// not yet sent: past it, the oldest are dropped (and a child that needed
// one is sent without it, noted).
const maxGraphConvBytes = 256 << 20

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
func (g *graph) add(p *planned) (held bool, ready int64, follows bool, failed string, sess *session) {
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
		return true, 0, true, "", nil
	}
	if n.failed != "" {
		n.p, n.done = nil, true
		g.remember(n)
		return false, 0, true, n.failed, nil
	}
	if follows {
		sess = g.history(p.req)
	}
	return false, n.readyNs, follows, "", sess
}

// finish records that the request id ended at doneNs (ok or not) and
// returns the children it released: each either ready (its last parent
// done, at readyNs) or failed, with why.
func (g *graph) finish(id string, doneNs int64, ok bool, conv *session) []released {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[id]
	if n == nil || n.done {
		return nil
	}
	if ok && conv != nil {
		g.hold(n, conv)
	}
	var out []released
	g.end(n, doneNs, ok, &out)
	return out
}

// released is a held request whose parents are all done, with the
// conversation its prompt continues.
type released struct {
	p       *planned
	readyNs int64
	failed  string
	sess    *session
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
		r := released{p: c.p, readyNs: c.readyNs, failed: c.failed}
		if r.failed == "" {
			r.sess = g.history(c.p.req)
		}
		*out = append(*out, r)
		if c.failed != "" {
			g.end(c, doneNs, false, out)
		} else {
			c.p = nil
		}
	}
	n.children = nil
}

// hold keeps a finished node's conversation for its children, dropping
// the oldest held past maxGraphConvBytes.
func (g *graph) hold(n *node, conv *session) {
	// A snapshot: a session's later turns go on appending to conv.
	conv = &session{messages: slices.Clip(conv.messages), tokens: conv.tokens, uncounted: conv.uncounted}
	for _, m := range conv.messages {
		n.convBytes += len(m.Content)
	}
	n.conv = conv
	g.convs = append(g.convs, n)
	g.convBytes += n.convBytes
	for g.convBytes > maxGraphConvBytes && len(g.convs) > 0 {
		g.dropOldestConv()
	}
}

// dropOldestConv lets go of the oldest conversation held.
func (g *graph) dropOldestConv() {
	old := g.convs[0]
	g.convs = g.convs[1:]
	g.convBytes -= old.convBytes
	old.conv, old.convBytes = nil, 0
}

// history is the conversation a child of finished parents continues:
// the first parent's (its prompt as sent and its answer), then each
// other parent's answer as a message of its own, so the server's prefix
// cache sees what it would. A parent whose conversation is gone is
// counted; the child is sent with what is left.
func (g *graph) history(q *trace.Request) *session {
	var s *session
	for _, id := range q.ParentIDs {
		n := g.nodes[id]
		if n == nil {
			continue // taken as finished when the child was read
		}
		if n.conv == nil {
			if g.forgotten++; g.forgotten == 1 {
				g.firstForgotten = q.RequestID
			}
			continue
		}
		if s == nil {
			// A copy: the child's send appends to it, and another child
			// may continue the same conversation.
			s = &session{messages: slices.Clip(slices.Clone(n.conv.messages)), tokens: n.conv.tokens, uncounted: n.conv.uncounted}
			continue
		}
		if k := len(n.conv.messages); k > 0 {
			reply := n.conv.messages[k-1]
			s.messages = append(s.messages, chatMessage{Role: "user", Content: reply.Content})
			s.uncounted += reply.Content
		}
	}
	return s
}

// remember keeps n's id in the finished order, forgetting the oldest
// finished nodes past graphMemory.
func (g *graph) remember(n *node) {
	g.order = append(g.order, n.id)
	for len(g.order) > graphMemory {
		// convs is in finishing order too: a node forgotten with its
		// conversation still held is the oldest there.
		if old := g.nodes[g.order[0]]; old != nil && old.conv != nil && len(g.convs) > 0 && g.convs[0] == old {
			g.dropOldestConv()
		}
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

// forgottenConvs returns how many children were sent without a parent's
// conversation, dropped for memory, and the first; 0 for no graph.
func (g *graph) forgottenConvs() (int64, string) {
	if g == nil {
		return 0, ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.forgotten, g.firstForgotten
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
