package datasets

import (
	"bytes"
	"cmp"
	"container/heap"
	"fmt"
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

// maxSessionEntries bounds the session linker's entries (conversations,
// with and without their replies, and answers, each keyed): expiry bounds
// them by the idle window, but rows of one instant never expire. Past it,
// the entry that would expire soonest is forgotten early and counted; a
// later turn of its conversation starts a new session.
const maxSessionEntries = 1 << 21

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
// each leaves at its own time whatever the order rows came in; entries
// due at once go by key, so which is forgotten first past
// maxSessionEntries does not depend on how the heap was built.
type expiryHeap []sessionExpiry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(h[i].expires, h[j].expires), bytes.Compare(h[i].key[:], h[j].key[:])) < 0
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(sessionExpiry)) }
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
	lr.hold(key, s)
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
	lr.hold(key, s)
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
		lr.hold(*p.answer, &sessionState{id: s.id, endUs: s.endUs, requestID: req.RequestID, startUs: req.TS})
	}
	req.SessionID = s.id
	// Register this conversation, with and without the logged reply.
	lr.hold(prefix[n], s)
	if withReply != nil {
		lr.hold(*withReply, s)
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

// hold registers (or re-registers) a session entry under key and
// schedules its expiry; past lr.maxSessions entries, the one due soonest
// is forgotten.
func (lr *logReader) hold(key sessionKey, s *sessionState) {
	lr.sessions[key] = s
	lr.touch(key, s)
	// A stale entry (a session touched since) at the head forgets
	// nothing: the loop goes on past it, since every live session has its
	// current entry in the queue.
	for len(lr.sessions) > lr.maxSessions && len(lr.expiry) > 0 {
		if lr.forgetNext() {
			lr.forgotten++
		}
	}
}

// touch schedules a session entry's expiry: the idle window after its
// latest request's end, an end counting at most maxHeldAnswer past that
// request's arrival. The older queue entries of a session touched again
// wait in the queue until their time, so once the queue holds more than
// twice the entries, it is rebuilt from them.
func (lr *logReader) touch(key sessionKey, s *sessionState) {
	end := min(s.endUs, satAdd(s.startUs, maxHeldAnswer.Microseconds()))
	s.expires = satAdd(end, lr.lo.SessionIdle.Microseconds())
	heap.Push(&lr.expiry, sessionExpiry{key, s, s.expires})
	if len(lr.expiry) > 2*len(lr.sessions)+1024 {
		lr.expiry = lr.expiry[:0]
		for k, s := range lr.sessions {
			lr.expiry = append(lr.expiry, sessionExpiry{k, s, s.expires})
		}
		heap.Init(&lr.expiry)
	}
}

// expire forgets sessions idle past the window, so memory stays bounded by
// the number of conversations active within it.
func (lr *logReader) expire(nowUs int64) {
	for len(lr.expiry) > 0 && lr.expiry[0].expires < nowUs {
		lr.forgetNext()
	}
}

// forgetNext takes the first entry off the expiry queue and forgets its
// session entry, if the entry is still the session's latest; it reports
// whether one was forgotten.
func (lr *logReader) forgetNext() bool {
	e := heap.Pop(&lr.expiry).(sessionExpiry)
	if s, ok := lr.sessions[e.key]; ok && s == e.s && s.expires == e.expires {
		delete(lr.sessions, e.key)
		return true
	}
	return false
}

// sessionNotes says, for the manifest, how many session entries were
// forgotten before their time.
func (lr *logReader) sessionNotes() []string {
	if lr.forgotten == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s: %d conversations were forgotten before their idle window ended, more than %d being open at once (those due to expire soonest first): a later turn of one starts a new session", lr.opts.Name, lr.forgotten, lr.maxSessions)}
}
