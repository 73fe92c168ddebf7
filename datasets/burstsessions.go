package datasets

// maxBurstGPTSessions bounds the sessions a BurstGPT trace's reader
// holds: past it, the session least recently seen is forgotten, and a
// later turn of it starts a new session at turn 0. A trace's sessions
// are few next to it; the bound holds a hostile trace of millions.
const maxBurstGPTSessions = 1 << 20

// burstSessions is the latest turn of each BurstGPT session, at most max
// of them, least recently seen forgotten first. Entries are keyed by the
// session's 64-bit keyed id (the session_id column's, so two raw ids the
// table cannot tell apart are one session in the trace too) and kept in
// one slice, linked by index from most to least recently seen, so one
// costs some 60 bytes whatever its raw id's length.
type burstSessions struct {
	max        int
	index      map[int64]int32
	entries    []burstSession
	head, tail int32 // most and least recently seen; -1 when none
	// forgotten counts the sessions forgotten past max.
	forgotten int64
}

// burstSession is a session's latest turn and when it ended.
type burstSession struct {
	key        int64
	turn       int32
	endUs      int64 // -1 when not known
	prev, next int32 // toward head, toward tail; -1 at the ends
}

func newBurstSessions(max int) *burstSessions {
	return &burstSessions{max: max, index: map[int64]int32{}, head: -1, tail: -1}
}

// seen returns the session of key, a new one (turn -1, end unknown) if
// it is not held, made the most recent; the pointer is valid until the
// next call.
func (b *burstSessions) seen(key int64) *burstSession {
	if i, ok := b.index[key]; ok {
		b.unlink(i)
		b.pushHead(i)
		return &b.entries[i]
	}
	var i int32
	if len(b.entries) < b.max {
		i = int32(len(b.entries))
		b.entries = append(b.entries, burstSession{})
	} else { // the least recent makes room
		i = b.tail
		b.unlink(i)
		delete(b.index, b.entries[i].key)
		b.forgotten++
	}
	b.entries[i] = burstSession{key: key, turn: -1, endUs: -1}
	b.index[key] = i
	b.pushHead(i)
	return &b.entries[i]
}

func (b *burstSessions) unlink(i int32) {
	e := &b.entries[i]
	if e.prev >= 0 {
		b.entries[e.prev].next = e.next
	} else {
		b.head = e.next
	}
	if e.next >= 0 {
		b.entries[e.next].prev = e.prev
	} else {
		b.tail = e.prev
	}
}

func (b *burstSessions) pushHead(i int32) {
	e := &b.entries[i]
	e.prev, e.next = -1, b.head
	if b.head >= 0 {
		b.entries[b.head].prev = i
	}
	b.head = i
	if b.tail < 0 {
		b.tail = i
	}
}
