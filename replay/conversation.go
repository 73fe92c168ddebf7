package replay

// convLink is one stretch of a conversation: its own messages after the
// conversation before it (prev), which it shares and never copies. A
// graph's children continue their parents' conversations, and a chain of
// them thousands deep must hold each message once, not once per
// descendant.
type convLink struct {
	prev  *convLink
	msgs  []chatMessage
	count int   // messages through this link, prev's included
	bytes int64 // what this link holds of its own (linkBytes)
	// refs counts the graph's holds on the link: the finished requests
	// holding it as their conversation, and the held links after it
	// (graph.retain). Only the graph's lock guards it.
	refs int
}

// Per-link and per-message overheads counted with the text, so that a
// conversation of empty messages is not free.
const (
	linkOverhead    = 64
	messageOverhead = 32
)

// newLink returns the conversation prev continued by msgs.
func newLink(prev *convLink, msgs ...chatMessage) *convLink {
	l := &convLink{prev: prev, msgs: msgs, count: len(msgs), bytes: linkOverhead}
	if prev != nil {
		l.count += prev.count
	}
	for _, m := range msgs {
		l.bytes += messageOverhead + int64(len(m.Content))
	}
	return l
}

// messages returns the conversation through l, oldest first, in a slice
// of its own: one request's body is made of it, then it is dropped.
func (l *convLink) messages() []chatMessage {
	if l == nil {
		return nil
	}
	out := make([]chatMessage, l.count)
	i := l.count
	for ; l != nil; l = l.prev {
		i -= len(l.msgs)
		copy(out[i:], l.msgs)
	}
	return out
}

// last returns the conversation's last message, ok false when it has none.
func (l *convLink) last() (chatMessage, bool) {
	for ; l != nil; l = l.prev {
		if k := len(l.msgs); k > 0 {
			return l.msgs[k-1], true
		}
	}
	return chatMessage{}, false
}

// session is the conversation so far of a multi-turn session or of a
// graph request: the prompts sent and the text the server actually
// returned. It passes from each turn to the next, never shared by two
// goroutines at once; its links may be, since they never change.
type session struct {
	hist   *convLink
	tokens int64 // tokens of all messages' content, chat template not counted
	// uncounted is the last reply, not yet in tokens: it is counted when a
	// next turn is built, so a session of one turn costs no count.
	uncounted string
}

// record makes the session history (with historyTokens) continued by a
// turn's prompt (of newTokens) and its answer.
func (s *session) record(history *convLink, prompt, answer string, historyTokens, newTokens int64) {
	s.hist = newLink(history, chatMessage{Role: "user", Content: prompt}, chatMessage{Role: "assistant", Content: answer})
	s.tokens, s.uncounted = historyTokens+newTokens, answer
}
