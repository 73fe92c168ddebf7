package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/servetrace/servetrace/internal/hashmix"
	"github.com/servetrace/servetrace/trace"
)

// mooncakeLine is one line of a Mooncake trace: the four fields of
// Mooncake's FAST'25 traces (kvcache-ai/Mooncake, FAST25-release/README:
// timestamp in ms, input_length, output_length, hash_ids of 512-token
// blocks), plus the two AIPerf reads for multi-turn sessions
// (ai-dynamo/aiperf, aiperf/dataset/.../models.py MooncakeTrace:
// session_id, and delay, the ms to wait before sending a later turn).
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      []int64  `json:"hash_ids"`
	SessionID    *string  `json:"session_id"`
	Delay        *float64 `json:"delay"`
}

// MooncakeBlockSize is the token count each Mooncake hash id covers.
const MooncakeBlockSize = 512

func readMooncake(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	st := Stats{TimesRelative: true, BlockSize: MooncakeBlockSize}
	anchor := opts.Start.UnixMicro()
	prefix := idPrefix(opts.Name)
	links := newMooncakeLinker(prefix, opts.SessionsFromPrefix)
	lr := lineReader{br: br}
	for lineNo := int64(1); ; lineNo++ {
		if lineNo&4095 == 0 && ctx.Err() != nil {
			return st, ctx.Err()
		}
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		reject := func(reason string) error {
			return st.reject(sink, opts.Name, lineNo, reason)
		}
		if errors.Is(err, errLineTooLong) {
			if err := reject(err.Error()); err != nil {
				return st, err
			}
			continue
		}
		if err != nil {
			return st, fmt.Errorf("%s line %d: %w", opts.Name, lineNo, err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(line, &m); err != nil {
			if err := reject("malformed JSON: " + jsonReason(err)); err != nil {
				return st, err
			}
			continue
		}
		var reason string
		switch {
		case m.InputLength == nil || m.OutputLength == nil:
			reason = "missing input_length or output_length"
		case m.Timestamp == nil && (m.SessionID == nil || m.Delay == nil):
			reason = "missing timestamp (only a later turn of a session_id, with its delay, may leave it out)"
		case m.Timestamp != nil && *m.Timestamp < 0, *m.InputLength < 0, *m.OutputLength < 0:
			reason = "negative timestamp or length"
		case m.Delay != nil && !(*m.Delay >= 0):
			reason = "negative delay"
		case len(m.HashIDs) > 0 && int64(len(m.HashIDs)) != ceilDiv(*m.InputLength, MooncakeBlockSize):
			reason = fmt.Sprintf("%d hash_ids for input_length %d, want ceil(%d/512) = %d", len(m.HashIDs), *m.InputLength, *m.InputLength, ceilDiv(*m.InputLength, MooncakeBlockSize))
		}
		if reason == "" && m.Timestamp == nil && !links.hasSession(*m.SessionID) {
			reason = "missing timestamp on the first request of its session_id"
		}
		if reason != "" {
			if err := reject(reason); err != nil {
				return st, err
			}
			continue
		}
		req := trace.Request{
			Identity: trace.Identity{RequestID: fmt.Sprintf("%s-%d", prefix, lineNo), Model: opts.Model},
			Shape: trace.Shape{InputTokens: *m.InputLength, OutputTokens: *m.OutputLength, MaxTokens: *m.OutputLength,
				API: opts.API, Stream: opts.Stream, N: 1, PrefixBlocks: m.HashIDs},
		}
		if m.Timestamp != nil {
			req.TS = anchor + int64(*m.Timestamp*1000)
		}
		links.link(&req, m.Timestamp != nil, m.SessionID, m.Delay)
		rows := st.Rows
		if err := st.accept(sink, opts.Name, lineNo, &req); err != nil {
			return st, err
		}
		if st.Rows > rows {
			links.accepted(&req, m.SessionID)
		}
	}
	if links.linked > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("%d requests follow an earlier one of their session (%s)", links.linked, links.how()))
	}
	if links.sharedLinks > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("%d hash-id prefixes were followed by more than %d requests and were taken for shared text (a system prompt) from then on; %d links made to them before stand", len(links.shared), maxPrefixChildren, links.sharedLinks))
	}
	return st, nil
}

// mooncakeLinker turns a Mooncake trace's sessions into the agent graph
// (trace.Request.ParentIDs): a later turn of an AIPerf session_id follows
// the turn before it, after its delay; with sessionsFromPrefix, a request
// whose hash ids begin with every full block of an earlier one (all its
// ids but the last, which a longer context completes) follows that one, as
// a turn continues its conversation and a sub-agent its planner's context.
// Mooncake's conversation and tool-agent traces carry their sessions only
// this way; it is inferred, so it is asked for, not assumed.
//
// A block first seen in another session is shared text (a system prompt,
// tool schemas), not a conversation: a request whose last full block is
// such a block is no one's parent, or every request sharing a system
// prompt would join one session. Block ids cannot tell a root whose own
// text fits in its last, partial block from the system prompt it begins
// with: a prefix that more than maxPrefixChildren requests follow is
// taken for shared text from then on, and the links made before are
// counted in the manifest's notes.
type mooncakeLinker struct {
	prefix             string
	sessionsFromPrefix bool
	// byKey maps a hash of a request's full blocks to it; keys is the
	// order they were added, so the oldest are forgotten past maxLinkKeys.
	byKey map[uint64]mooncakeNode
	keys  []keyEntry
	// children counts the requests that followed each key; shared marks
	// the keys taken for shared text.
	children map[uint64]int
	shared   map[uint64]bool
	// sharedLinks counts the links made to keys later taken as shared.
	sharedLinks int64
	// blockSession maps a block id to the session that first used it,
	// bounded the same way.
	blockSession map[int64]int64
	blocks       []blockEntry
	// sessionNo is the session of the request link set last.
	sessionNo int64
	// bySession maps an AIPerf session_id to its last request;
	// sessionIDs lists them as used, so the least recently used go first.
	bySession  map[string]mooncakeNode
	sessionIDs []keyEntry
	sessions   int64
	linked     int64
	explicit   bool
}

// mooncakeNode is what a child needs of its parent.
type mooncakeNode struct {
	id, session string
	sessionNo   int64
	ts          int64
	turn        int32
}

// maxLinkKeys bounds the requests and blocks the linker remembers: a
// session's next turn comes within hours, not across a whole year's trace.
const maxLinkKeys = 1 << 21

// maxPrefixChildren is the widest fan-out a prefix of hash ids is taken
// to be a parent for; more followers make it a shared system prompt.
const maxPrefixChildren = 32

func newMooncakeLinker(prefix string, sessionsFromPrefix bool) *mooncakeLinker {
	return &mooncakeLinker{prefix: prefix, sessionsFromPrefix: sessionsFromPrefix, byKey: map[uint64]mooncakeNode{},
		blockSession: map[int64]int64{}, bySession: map[string]mooncakeNode{}, children: map[uint64]int{}, shared: map[uint64]bool{}}
}

func (l *mooncakeLinker) hasSession(id string) bool { _, ok := l.bySession[id]; return ok }

func (l *mooncakeLinker) how() string {
	if l.explicit {
		return "by session_id"
	}
	return "by hash_ids prefix"
}

// link sets req's session, turn, parent and delay; timed says the line
// gave a timestamp.
func (l *mooncakeLinker) link(req *trace.Request, timed bool, sessionID *string, delayMs *float64) {
	var parent mooncakeNode
	found := false
	switch {
	case sessionID != nil:
		parent, found = l.bySession[*sessionID]
	case l.sessionsFromPrefix && len(req.PrefixBlocks) > 1:
		parent, found = l.longestParent(req.PrefixBlocks)
	}
	if !found {
		l.sessions++
		l.sessionNo = l.sessions
		if sessionID != nil || l.sessionsFromPrefix { // a request may follow it
			req.SessionID = fmt.Sprintf("%s-s%d", l.prefix, l.sessions)
			req.Turn = 0
		}
		return
	}
	l.sessionNo = parent.sessionNo
	req.SessionID = parent.session
	req.Turn = parent.turn + 1
	req.ParentIDs = []string{parent.id}
	if delayMs != nil {
		req.ThinkTimeMs = new(*delayMs)
		if !timed { // a later turn may give its delay alone
			req.TS = parent.ts + int64(*delayMs*1000)
		}
	}
}

// accepted remembers req, converted and written, as a parent to come.
func (l *mooncakeLinker) accepted(req *trace.Request, sessionID *string) {
	if len(req.ParentIDs) > 0 {
		l.linked++
	}
	n := mooncakeNode{id: req.RequestID, session: req.SessionID, ts: req.TS, turn: req.Turn, sessionNo: l.sessionNo}
	if sessionID != nil {
		l.explicit = true
		l.sessionIDs = append(l.sessionIDs, keyEntry{id: n.id, session: *sessionID})
		l.bySession[*sessionID] = n
		l.forget()
		return
	}
	if !l.sessionsFromPrefix {
		return
	}
	h := req.PrefixBlocks
	for _, b := range h {
		if _, ok := l.blockSession[b]; !ok {
			l.blockSession[b] = n.sessionNo
			l.blocks = append(l.blocks, blockEntry{b, n.sessionNo})
		}
	}
	if len(h) < 2 || l.blockSession[h[len(h)-2]] != n.sessionNo {
		return
	}
	key := prefixKey(h[:len(h)-1])
	l.byKey[key] = n
	l.keys = append(l.keys, keyEntry{key: key, id: n.id})
	l.forget()
}

// keyEntry is one remembered request, under a prefix key or a session id.
type keyEntry struct {
	key     uint64
	id      string
	session string
}

type blockEntry struct{ block, session int64 }

// forget drops the older half of the requests, blocks and session ids
// remembered once one passes maxLinkKeys (an entry since overwritten
// stays); a session_id forgotten and seen again starts a new session.
func (l *mooncakeLinker) forget() {
	l.keys = dropOlderHalf(l.keys, func(e keyEntry) {
		if l.byKey[e.key].id == e.id {
			delete(l.byKey, e.key)
			delete(l.children, e.key)
		}
	})
	l.sessionIDs = dropOlderHalf(l.sessionIDs, func(e keyEntry) {
		if l.bySession[e.session].id == e.id { // not used since
			delete(l.bySession, e.session)
		}
	})
	l.blocks = dropOlderHalf(l.blocks, func(e blockEntry) {
		if l.blockSession[e.block] == e.session {
			delete(l.blockSession, e.block)
		}
	})
}

// dropOlderHalf, once list holds more than maxLinkKeys entries, removes
// its older half, calling drop on each entry removed.
func dropOlderHalf[E any](list []E, drop func(E)) []E {
	if len(list) <= maxLinkKeys {
		return list
	}
	for _, e := range list[:maxLinkKeys/2] {
		drop(e)
	}
	return append(list[:0], list[maxLinkKeys/2:]...)
}

// longestParent returns the remembered request with the most full blocks
// that h begins with, h holding at least one block more.
func (l *mooncakeLinker) longestParent(h []int64) (mooncakeNode, bool) {
	keys := make([]uint64, len(h)-1)
	var k uint64
	for j := range len(h) - 1 {
		k = prefixStep(k, h[j])
		keys[j] = k
	}
	for j := len(keys) - 1; j >= 0; j-- {
		n, ok := l.byKey[keys[j]]
		if !ok || l.shared[keys[j]] {
			continue
		}
		if l.children[keys[j]]++; l.children[keys[j]] > maxPrefixChildren {
			l.shared[keys[j]] = true
			l.sharedLinks += maxPrefixChildren
			delete(l.children, keys[j])
			continue
		}
		return n, true
	}
	return mooncakeNode{}, false
}

// prefixKey hashes a run of block ids, as longestParent does step by step.
func prefixKey(h []int64) uint64 {
	var k uint64
	for _, b := range h {
		k = prefixStep(k, b)
	}
	return k
}

func prefixStep(k uint64, b int64) uint64 {
	return hashmix.Finalize(k*0x9e3779b97f4a7c15 ^ uint64(b))
}
