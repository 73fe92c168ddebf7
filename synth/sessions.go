package synth

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/servetrace/servetrace/trace"
)

// SessionModel describes multi-turn sessions: how many turns, how long the
// user thinks between a response and the next turn, and how much new text
// each turn adds on top of the history (each turn's input holds every
// earlier turn's input and output).
type SessionModel struct {
	// Sessions is the number of sessions seen; MultiTurnShare the share of
	// them with more than one turn.
	Sessions       int64   `json:"sessions"`
	MultiTurnShare float64 `json:"multi_turn_share"`
	// Turns is the distribution of turns per session.
	Turns Marginal `json:"turns"`
	// ThinkS is the think time between turns, in seconds (the logged
	// think_time_ms plus tool_ms, else the gap between the turns'
	// arrivals).
	ThinkS Marginal `json:"think_s"`
	// NewTokens is the input a later turn adds beyond the previous turn's
	// input and output.
	NewTokens Marginal `json:"new_tokens"`
	// Graph describes the sessions that are agent graphs (their requests
	// name parents); nil when none is. Turns, ThinkS and NewTokens then
	// describe the other sessions.
	Graph *GraphModel `json:"graph,omitempty"`
}

// sessionIdleS is how long the fit keeps a session open without a new turn.
const sessionIdleS = 3600.0

type sessionState struct {
	turns        int64
	lastTS       float64
	lastIn, last int64
	// nodes is the session's graph so far (graphNodes), kept from its
	// first request on; graph says a request named a parent.
	nodes graphNodes
	graph bool
}

// sessionFitter accumulates sessions over requests in time order, with
// memory bounded by the sessions active within sessionIdleS.
type sessionFitter struct {
	open             map[string]*sessionState
	turns            histogram
	think, newTokens *reservoir[float64]
	sessions, multi  int64
	lastSweep        float64
	// graphs holds what the agent-graph sessions add (graphFitter);
	// blockBudget is the prefix block ids open sessions may still hold.
	graphs      *graphFitter
	blockBudget int
}

func newSessionFitter() *sessionFitter {
	return &sessionFitter{open: map[string]*sessionState{}, turns: histogram{},
		think: newReservoir[float64](maxPairs, 10), newTokens: newReservoir[float64](maxPairs, 11), graphs: newGraphFitter(), blockBudget: maxHeldBlocks}
}

// close counts a finished session: an agent graph whose shape was kept
// whole in the graph laws, any other in the turns histogram and the turn
// laws.
func (f *sessionFitter) close(s *sessionState) {
	f.blockBudget += s.nodes.heldBlocks
	s.nodes.heldBlocks = 0
	f.sessions++
	if s.turns > 1 {
		f.multi++
	}
	if s.graph && f.graphs.close(&s.nodes) {
		return
	}
	f.turns[min(s.turns, MaxSessionTurns)]++
	n := &s.nodes
	for i := 1; i < len(n.ts); i++ {
		f.think.add(n.wait[i])
		f.newTokens.add(math.Max(1, n.grow[i]))
	}
}

// closeIdle closes, in session-id order (the reservoirs they feed keep
// what arrives in order), the open sessions idle since before t −
// sessionIdleS, or all of them for t = +Inf.
func (f *sessionFitter) closeIdle(t float64) {
	var ids []string
	for k, s := range f.open {
		if t-s.lastTS > sessionIdleS {
			ids = append(ids, k)
		}
	}
	slices.Sort(ids)
	for _, k := range ids {
		f.close(f.open[k])
		delete(f.open, k)
	}
}

func (f *sessionFitter) add(r *trace.Request, t float64) (later bool) {
	if t-f.lastSweep > sessionIdleS {
		f.closeIdle(t)
		f.lastSweep = t
	}
	if r.SessionID == "" {
		f.close(&sessionState{turns: 1})
		return false
	}
	s := f.open[r.SessionID]
	if s == nil {
		s = &sessionState{turns: 1, lastTS: t, lastIn: r.InputTokens, last: r.OutputTokens}
		s.nodes.budget = &f.blockBudget
		s.nodes.add(r, t)
		f.open[r.SessionID] = s
		return false
	}
	s.turns++
	explicit, kept := s.nodes.add(r, t)
	s.graph = s.graph || explicit
	if !kept {
		// Past maxGraphNodes the session counts as turns: its turn laws
		// are fed as it goes.
		think := t - s.lastTS
		if r.ThinkTimeMs != nil {
			think = *r.ThinkTimeMs / 1000
		}
		if !(think >= 0) { // backwards or NaN
			think = 0
		}
		f.think.add(min(think, MaxThinkS))
		f.newTokens.add(math.Max(1, float64(r.InputTokens-s.lastIn-s.last)))
	}
	s.lastTS, s.lastIn, s.last = t, r.InputTokens, r.OutputTokens
	return true
}

// closeAll closes every open session: the end of the rows.
func (f *sessionFitter) closeAll() { f.closeIdle(math.Inf(1)) }

// merge adds o's closed sessions to f's. A session with turns on both
// sides of the boundary between their slices counts once in each, and the
// turn after the boundary gives no think time or new-token sample: no
// slice sees both turns.
func (f *sessionFitter) merge(o *sessionFitter, rng *rand.Rand) {
	f.sessions += o.sessions
	f.multi += o.multi
	f.turns.merge(o.turns)
	f.think.merge(o.think, rng)
	f.newTokens.merge(o.newTokens, rng)
	f.graphs.merge(o.graphs, rng)
}

func (f *sessionFitter) fit() *SessionModel {
	f.closeAll()
	if f.multi == 0 {
		return nil
	}
	m := &SessionModel{Sessions: f.sessions, MultiTurnShare: float64(f.multi) / float64(f.sessions),
		Turns: f.turns.marginal(257), ThinkS: floatMarginal(f.think, 257), NewTokens: floatMarginal(f.newTokens, 257),
		Graph: f.graphs.fit(f.sessions)}
	if len(f.turns) == 0 { // every session was a graph
		m.Turns = histogram{1: 1}.marginal(257)
	}
	return m
}
