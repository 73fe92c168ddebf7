package datasets

import (
	"container/heap"
	"slices"
	"time"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// sessionState is an inferred session's latest turn.
type sessionState struct {
	id      string
	turn    int32
	endUs   int64
	expires int64
	// requestID is the request whose conversation this is: its children
	// (the requests that extend it) name it in parent_ids; startUs is
	// when it arrived.
	requestID string
	startUs   int64
}

// maxHeldAnswer bounds how long past its arrival a request's end keeps
// its session open: a logged end later than that (a row claiming to end
// days later) counts as that, so no one row can hold the linker's memory
// for longer than maxHeldAnswer plus the idle window.
const maxHeldAnswer = time.Hour

// sessionKey is a keyed hash of a conversation's messages (and tenant),
// never the text.
type sessionKey [16]byte

// sessionExpiry is when a session entry may be forgotten; an entry touched
// again is queued again, and the older queue entry, no longer its
// state's expiry, is ignored.
type sessionExpiry struct {
	key     sessionKey
	s       *sessionState
	expires int64
}

// expiryHeap orders session entries by when they may be forgotten, so
// each leaves at its own time whatever the order rows came in.
type expiryHeap []sessionExpiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(sessionExpiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// linkLogged numbers turns of a logged conversation id.
func (lr *logReader) linkLogged(req *trace.Request, endUs int64) {
	var key sessionKey
	copy(key[:], req.SessionID)
	lr.expire(req.TS)
	if s, ok := lr.sessions[key]; ok {
		s.turn++
		setTurn(req, s.turn, s.endUs)
		s.endUs, s.requestID, s.startUs = max(endUs, req.TS), req.RequestID, req.TS
		lr.touch(key, s)
		return
	}
	s := &sessionState{id: req.SessionID, endUs: max(endUs, req.TS), requestID: req.RequestID, startUs: req.TS}
	lr.sessions[key] = s
	lr.touch(key, s)
}

// continueConversation numbers the turns of calls (an agent trace's model
// calls, linked, in time order) after the logged conversation's turns
// before them, makes the first follow the conversation's latest call
// (its parent, its wait from that call's end), and leaves the
// conversation at the call that ended last.
func (lr *logReader) continueConversation(calls []*trace.Request, ends []int64) {
	var key sessionKey
	copy(key[:], calls[0].SessionID)
	lr.expire(calls[0].TS)
	first := int32(0)
	s, ok := lr.sessions[key]
	if ok {
		first = s.turn + 1
		// It follows the conversation's latest call only if that came
		// before it (traces of one conversation may overlap).
		if len(calls[0].ParentIDs) == 0 && s.requestID != "" && s.startUs <= calls[0].TS {
			calls[0].ParentIDs = []string{s.requestID}
			if calls[0].TS >= s.endUs {
				calls[0].ThinkTimeMs = new(float64(calls[0].TS-s.endUs) / 1000)
			}
		}
	} else {
		s = &sessionState{id: calls[0].SessionID}
		lr.sessions[key] = s
	}
	last := 0
	for i, c := range calls {
		c.Turn = first + int32(i)
		if max(ends[i], c.TS) >= max(ends[last], calls[last].TS) {
			last = i
		}
	}
	s.turn = first + int32(len(calls)-1)
	if end := max(ends[last], calls[last].TS); end >= s.endUs {
		s.endUs, s.requestID, s.startUs = end, calls[last].RequestID, calls[last].TS
	}
	lr.touch(key, s)
}

// linkByPrefix makes a chat request the next turn of an earlier one whose
// conversation (messages, plus its reply where logged) its own messages
// extend: same tenant, within the idle window. Only keyed hashes of the
// messages are kept, never text.
func (lr *logReader) linkByPrefix(req *trace.Request, p *prepared) {
	prefix, roles, withReply, endUs := p.prefix, p.roles, p.withReply, p.endUs
	lr.expire(req.TS)
	n := len(prefix) - 1 // messages
	var parent *sessionState
	from := 0 // the messages the request adds to its parent's conversation
	for k := n - 1; k >= 1; k-- {
		if s, ok := lr.sessions[prefix[k]]; ok && s.requestID != req.RequestID { // a repeated line is not its own parent
			parent, from = s, k
			break
		}
	}
	s := &sessionState{id: salt16(lr.lo.Salt, req.RequestID), endUs: max(endUs, req.TS), requestID: req.RequestID, startUs: req.TS}
	if parent != nil {
		s.id, s.turn = parent.id, parent.turn+1
		req.ParentIDs = []string{parent.requestID}
		// The messages it adds may quote other earlier answers verbatim
		// (sub-agents' answers gathered by a planner): it waits on those
		// requests too, a join, and its wait runs from the last to end.
		lastEndUs := parent.endUs
		for _, key := range p.texts[from:] { // only answers of minQuotedAnswer bytes are registered
			if a, ok := lr.sessions[key]; ok && a.requestID != "" && a.requestID != req.RequestID && !slices.Contains(req.ParentIDs, a.requestID) && len(req.ParentIDs) < trace.MaxParents {
				req.ParentIDs = append(req.ParentIDs, a.requestID)
				lastEndUs = max(lastEndUs, a.endUs)
			}
		}
		setTurn(req, s.turn, lastEndUs)
		// A tool's result among what it adds: the wait was the tool's run.
		if slices.Contains(roles[from:], "tool") {
			req.Role = trace.RoleToolFollowUp
			req.ToolMs, req.ThinkTimeMs = req.ThinkTimeMs, nil
		}
	}
	if p.answer != nil {
		a := &sessionState{id: s.id, endUs: s.endUs, requestID: req.RequestID, startUs: req.TS}
		lr.sessions[*p.answer] = a
		lr.touch(*p.answer, a)
	}
	req.SessionID = s.id
	// Register this conversation, with and without the logged reply.
	lr.sessions[prefix[n]] = s
	lr.touch(prefix[n], s)
	if withReply != nil {
		lr.sessions[*withReply] = s
		lr.touch(*withReply, s)
	}
}

// setTurn numbers a follow-up turn and, where the previous turn's end is
// known (prevEndUs >= 0) and came first, records the think time since it.
func setTurn(req *trace.Request, turn int32, prevEndUs int64) {
	req.Turn = turn
	if prevEndUs >= 0 && req.TS >= prevEndUs {
		req.ThinkTimeMs = new(float64(req.TS-prevEndUs) / 1000)
	}
}

// salt16 derives a session id from the first request's id.
func salt16(s anon.Salt, requestID string) string { return s.ID("session", "first:"+requestID) }

// chain extends a keyed prefix hash by one rendered message.
func (lr *logReader) chain(prev sessionKey, text string) sessionKey {
	var k sessionKey
	copy(k[:], lr.lo.Salt.HMAC("session-chain", string(prev[:])+text))
	return k
}

// answerKey is the keyed hash of a message's or an answer's text alone,
// per tenant, kept apart from the prefix hashes by its domain.
func (lr *logReader) answerKey(tenant, text string) sessionKey {
	var k sessionKey
	copy(k[:], lr.lo.Salt.HMAC("session-answer", tenant+"\x00"+text))
	return k
}

// touch schedules a session entry's expiry: the idle window after its
// latest request's end, an end counting at most maxHeldAnswer past that
// request's arrival.
func (lr *logReader) touch(key sessionKey, s *sessionState) {
	end := min(s.endUs, satAdd(s.startUs, maxHeldAnswer.Microseconds()))
	s.expires = satAdd(end, lr.lo.SessionIdle.Microseconds())
	heap.Push(&lr.expiry, sessionExpiry{key, s, s.expires})
}

// expire forgets sessions idle past the window, so memory stays bounded by
// the number of conversations active within it.
func (lr *logReader) expire(nowUs int64) {
	for len(lr.expiry) > 0 && lr.expiry[0].expires < nowUs {
		e := heap.Pop(&lr.expiry).(sessionExpiry)
		if s, ok := lr.sessions[e.key]; ok && s == e.s && s.expires == e.expires {
			delete(lr.sessions, e.key)
		}
	}
}
