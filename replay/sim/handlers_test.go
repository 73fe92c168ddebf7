package sim

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
)

// writeCounter records each Write and Flush a handler makes.
type writeCounter struct {
	*httptest.ResponseRecorder
	writes, flushes int
}

func (w *writeCounter) Write(b []byte) (int, error) { w.writes++; return w.ResponseRecorder.Write(b) }
func (w *writeCounter) Flush()                      { w.flushes++; w.ResponseRecorder.Flush() }

// Events that waited for the handler together leave in one write, each
// token still its own SSE event; the stream's end is left for net/http to
// send with its chunked terminator.
func TestEventsThatWaitedTogetherLeaveInOneWrite(t *testing.T) {
	s, err := New(fast())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, chat := range []bool{true, false} {
		g := &generation{s: s, chat: chat, stream: true, includeUsage: true, model: "m", id: "x-1", words: []string{"a", " b", " c"},
			choices: make([]choiceState, 1), chunkTokens: 1, faultAt: -1, seq: &seq{out: newOutbox()}}
		g.seq.out.push(tokenEvent{tokens: 1})
		g.seq.out.push(tokenEvent{tokens: 1})
		g.seq.out.push(tokenEvent{tokens: 1, done: true, reason: "length"})
		w := &writeCounter{ResponseRecorder: httptest.NewRecorder()}
		g.run(context.Background(), w)

		var events []string
		for _, line := range strings.Split(w.Body.String(), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				events = append(events, d)
			}
		}
		want := 6 // three tokens, the finish reason, usage, [DONE]
		if chat {
			want++ // the role
		}
		if len(events) != want || events[len(events)-1] != "[DONE]" {
			t.Errorf("chat=%v: %d events, want %d ending in [DONE]:\n%s", chat, len(events), want, w.Body.String())
		}
		if w.writes != 1 || w.flushes != 1 { // the flush is the header's
			t.Errorf("chat=%v: %d writes and %d flushes, want 1 and 1", chat, w.writes, w.flushes)
		}
	}
}
