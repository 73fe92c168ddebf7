package datasets

import (
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// sessionState is an inferred session's latest turn.
type sessionState struct {
	id      string
	turn    int32
	endUs   int64
	expires int64
}

// sessionKey is a keyed hash of a conversation's messages (and tenant),
// never the text.
type sessionKey [16]byte

// sessionExpiry is when a session entry may be forgotten; an entry touched
// again later is queued again, and the older queue entry is ignored.
type sessionExpiry struct {
	key     sessionKey
	expires int64
}

// linkLogged numbers turns of a logged conversation id.
func (lr *logReader) linkLogged(req *trace.Request, endUs int64) {
	var key sessionKey
	copy(key[:], req.SessionID)
	lr.expire(req.TS)
	if s, ok := lr.sessions[key]; ok {
		s.turn++
		setTurn(req, s.turn, s.endUs)
		s.endUs = max(endUs, req.TS)
		lr.touch(key, s)
		return
	}
	s := &sessionState{id: req.SessionID, endUs: max(endUs, req.TS)}
	lr.sessions[key] = s
	lr.touch(key, s)
}

// linkByPrefix makes a chat request the next turn of an earlier one whose
// conversation (messages, plus its reply where logged) its own messages
// extend: same tenant, within the idle window. Only keyed hashes of the
// messages are kept, never text.
func (lr *logReader) linkByPrefix(req *trace.Request, prefix []sessionKey, withReply *sessionKey, endUs int64) {
	lr.expire(req.TS)
	n := len(prefix) - 1 // messages
	var parent *sessionState
	for k := n - 1; k >= 1; k-- {
		if s, ok := lr.sessions[prefix[k]]; ok {
			parent = s
			break
		}
	}
	s := &sessionState{id: salt16(lr.lo.Salt, req.RequestID), endUs: max(endUs, req.TS)}
	if parent != nil {
		s.id, s.turn = parent.id, parent.turn+1
		setTurn(req, s.turn, parent.endUs)
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

// touch schedules a session entry's expiry.
func (lr *logReader) touch(key sessionKey, s *sessionState) {
	s.expires = s.endUs + lr.lo.SessionIdle.Microseconds()
	lr.expiry = append(lr.expiry, sessionExpiry{key, s.expires})
}

// expire forgets sessions idle past the window, so memory stays bounded by
// the number of conversations active within it.
func (lr *logReader) expire(nowUs int64) {
	i := 0
	for ; i < len(lr.expiry) && lr.expiry[i].expires < nowUs; i++ {
		e := lr.expiry[i]
		if s, ok := lr.sessions[e.key]; ok && s.expires <= e.expires {
			delete(lr.sessions, e.key)
		}
	}
	if i > 0 {
		lr.expiry = append(lr.expiry[:0], lr.expiry[i:]...)
	}
}
