package replay

import (
	"fmt"
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
	mu sync.Mutex
	// nodes holds every request read, by id, until forgotten: the latest
	// row read with an id, where the workload repeats one.
	nodes map[string]*node
	// waiting holds the requests waiting for a parent.
	waiting map[*node]struct{}
	// finished lists the finished nodes oldest first; finishedBytes is
	// about what they hold, at most maxFinishedBytes: past it, the
	// oldest without a waiting child are forgotten (forgot counts them).
	finished      []*node
	finishedBytes int64
	forgot        int64
	// convs lists the finished nodes holding their conversation, oldest
	// first; convBytes is what the conversations' links hold, each link
	// counted once however many hold it (retain), at most
	// maxGraphConvBytes.
	convs     []*node
	convBytes int64
	// Notes: parent ids not read before their child while the graph had
	// forgotten none (notRead), or after it had (unsure: not read, or
	// forgotten); children sent without a parent's conversation, no
	// longer held (lostConv); request ids read twice (repeated).
	notRead, unsure, lostConv, repeated tally
}

// tally counts what a note says, and the first request it concerns.
type tally struct {
	n     int64
	first string
}

func (t *tally) add(id string) {
	if t.n++; t.n == 1 {
		t.first = id
	}
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
	// parents are the known parents of a waiting request, for its
	// conversation; pins counts the waiting children that hold this node
	// among their parents: a finished node is not forgotten while any does.
	parents []*node
	pins    int
	// conv is the conversation the request sent and its answer, for its
	// children's prompts, while held.
	conv *session
}

// maxGraphConvBytes bounds the conversations the graph holds for children
// not yet sent: past it, the oldest are dropped (and a child that needed
// one is sent without it, noted).
const maxGraphConvBytes = 256 << 20

// maxFinishedBytes bounds what the graph holds of finished requests for
// children not yet read (finishedNodeBytes and the id each): a child is
// read up to the look-ahead after its parent's time, and a parent's
// answer can take minutes; a day-long workload must not grow the map
// without end. A variable, for tests.
var maxFinishedBytes int64 = 64 << 20

// finishedNodeBytes is about what a finished node holds beside its id:
// the node, its map entry and its place in the finished list.
const finishedNodeBytes = 256

func newGraph() *graph { return &graph{nodes: map[string]*node{}, waiting: map[*node]struct{}{}} }

// add registers p, read from the workload; it reports whether p waits
// for a parent (and is held here), and, when it waits for none, whether
// it follows a finished parent (follows; ready is when the last one
// finished) or cannot be sent (failed, saying why). A request following
// no parent it knows is sent at its own time.
func (g *graph) add(p *planned) (held bool, ready int64, follows bool, failed string, sess *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := &node{id: p.req.RequestID, p: p}
	p.node = n
	if g.nodes[n.id] != nil {
		g.repeated.add(n.id)
	}
	g.nodes[n.id] = n
	for _, id := range p.req.ParentIDs {
		parent := g.nodes[id]
		switch {
		case parent == nil && g.forgot == 0:
			g.notRead.add(n.id)
			continue
		case parent == nil:
			g.unsure.add(n.id)
			continue
		case !parent.done:
			n.left++
			parent.children = append(parent.children, n)
		case !parent.ok:
			n.failed = fmt.Sprintf("its parent %s did not end ok", id)
		default:
			n.readyNs = max(n.readyNs, parent.doneNs)
		}
		n.parents = append(n.parents, parent)
		follows = true
	}
	if n.left > 0 { // failed or not, released when its last parent ends
		g.waiting[n] = struct{}{}
		for _, parent := range n.parents {
			parent.pins++
		}
		return true, 0, true, "", nil
	}
	if n.failed != "" {
		n.p, n.done = nil, true
		n.parents = nil
		g.remember(n)
		return false, 0, true, n.failed, nil
	}
	if follows {
		sess = g.history(n)
	}
	n.parents = nil
	return false, n.readyNs, follows, "", sess
}

// finish records that p ended at doneNs (ok or not) and returns the
// children it released: each either ready (its last parent done, at
// readyNs) or failed, with why. A request the graph does not hold (a
// probe) releases none.
func (g *graph) finish(p *planned, doneNs int64, ok bool, conv *session) []released {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := p.node
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
			r.sess = g.history(c)
		}
		g.unwait(c)
		*out = append(*out, r)
		if c.failed != "" {
			g.end(c, doneNs, false, out)
		} else {
			c.p = nil
		}
	}
	n.children = nil
	g.forget()
}

// unwait takes c off the waiting requests, unpinning its parents.
func (g *graph) unwait(c *node) {
	delete(g.waiting, c)
	for _, parent := range c.parents {
		parent.pins--
	}
	c.parents = nil
}

// hold keeps a finished node's conversation for its children, dropping
// the oldest held past maxGraphConvBytes.
func (g *graph) hold(n *node, conv *session) {
	// A snapshot: a session's later turns go on from conv. Its links
	// never change.
	n.conv = &session{hist: conv.hist, tokens: conv.tokens, uncounted: conv.uncounted}
	g.retain(n.conv.hist)
	g.convs = append(g.convs, n)
	for g.convBytes > maxGraphConvBytes && len(g.convs) > 0 {
		old := g.convs[0]
		g.convs = g.convs[1:]
		g.dropConv(old)
	}
}

// dropConv lets go of n's conversation, if it holds one.
func (g *graph) dropConv(n *node) {
	if n.conv != nil {
		g.unretain(n.conv.hist)
		n.conv = nil
	}
}

// retain counts a hold on l: a link held for the first time adds what it
// holds to convBytes, and holds the link before it. So convBytes is what
// the held conversations hold, each shared link once.
func (g *graph) retain(l *convLink) {
	for ; l != nil; l = l.prev {
		if l.refs++; l.refs > 1 {
			return
		}
		g.convBytes += l.bytes
	}
}

// unretain undoes retain: a link no longer held leaves convBytes and lets
// go of the link before it.
func (g *graph) unretain(l *convLink) {
	for ; l != nil; l = l.prev {
		if l.refs--; l.refs > 0 {
			return
		}
		g.convBytes -= l.bytes
	}
}

// history is the conversation n continues, its parents all finished: the
// first parent's (its prompt as sent and its answer), then each other
// parent's answer as a message of its own, so the server's prefix cache
// sees what it would. A parent whose conversation is gone is counted;
// the request is sent with what is left. The parents' links are shared,
// never copied.
func (g *graph) history(n *node) *session {
	var s *session
	for _, parent := range n.parents {
		if parent.conv == nil {
			g.lostConv.add(n.id)
			continue
		}
		if s == nil {
			s = &session{hist: parent.conv.hist, tokens: parent.conv.tokens, uncounted: parent.conv.uncounted}
			continue
		}
		if reply, ok := parent.conv.hist.last(); ok {
			s.hist = newLink(s.hist, chatMessage{Role: "user", Content: reply.Content})
			s.uncounted += reply.Content
		}
	}
	return s
}

// remember adds n to the finished nodes.
func (g *graph) remember(n *node) {
	g.finished = append(g.finished, n)
	g.finishedBytes += finishedNodeBytes + int64(len(n.id))
}

// forget forgets the oldest finished nodes past maxFinishedBytes, but
// for those a waiting child pins, which go to the back of the list.
func (g *graph) forget() {
	for tries := len(g.finished); g.finishedBytes > maxFinishedBytes && tries > 0; tries-- {
		old := g.finished[0]
		g.finished = g.finished[1:]
		if old.pins > 0 {
			g.finished = append(g.finished, old)
			continue
		}
		g.finishedBytes -= finishedNodeBytes + int64(len(old.id))
		g.dropConv(old)
		if g.nodes[old.id] == old {
			delete(g.nodes, old.id)
		}
		g.forgot++
	}
}

// drain returns every request still held, and forgets them: the run
// ended before their parents did.
func (g *graph) drain() []*planned {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*planned
	for n := range g.waiting {
		if n.p != nil {
			out = append(out, n.p)
		}
		n.done, n.p = true, nil
		g.unwait(n)
	}
	return out
}

// graphNotes are what the graph has to say in run.json's notes, each
// with its count and first request; none for no graph.
func (g *graph) graphNotes() []graphNote {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return []graphNote{
		{fmt.Sprintf("a parent's conversation was no longer held (the graph keeps %d MiB of them): the child was sent without it", maxGraphConvBytes>>20), g.lostConv},
		{"parent_ids named a request not read before the child (outside the window, another shard's, or later in the workload): taken as finished", g.notRead},
		{fmt.Sprintf("parent_ids named a request the graph does not hold: not read before the child (outside the window, another shard's, or later in the workload), or finished before the latest %d MiB of finished requests the graph keeps: taken as finished", maxFinishedBytes>>20), g.unsure},
		{"request_id repeats an earlier row's: a child follows the latest row read before it with its parent's id", g.repeated},
	}
}

// graphNote is one note of the graph's.
type graphNote struct {
	what string
	t    tally
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
