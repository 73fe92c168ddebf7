package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// recordingServer keeps every chat request body by request id and answers
// with a reply that names the request, in three content chunks.
type recordingServer struct {
	mu     sync.Mutex
	bodies map[string][]chatMessage
}

func (s *recordingServer) reply(id string) []string {
	return []string{" reply", " to", " " + strings.ReplaceAll(id, "-", "")}
}

func (s *recordingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	var body struct {
		Messages []chatMessage `json:"messages"`
	}
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	id := r.Header.Get("X-Request-Id")
	id = id[strings.Index(id, "-")+1:] // strip the run id ("sess-")
	s.mu.Lock()
	s.bodies[id] = body.Messages
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, piece := range s.reply(id) {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", piece)
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func TestMultiTurnSessionsCarryRealHistory(t *testing.T) {
	tok, _ := tokenize.Get(tokenize.CL100K)
	srv := &recordingServer{bodies: map[string][]chatMessage{}}
	hs := httptest.NewServer(srv)
	defer hs.Close()

	// Two sessions of three turns, interleaved in time, plus a lone request.
	// Session b's third turn asks for fewer tokens than its history holds.
	dir := filepath.Join(t.TempDir(), "wl")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(id, session string, turn int32, at time.Duration, input int64, think float64) {
		q := trace.Request{Identity: trace.Identity{RequestID: id, SessionID: session, Turn: turn}, TS: t0.Add(at).UnixMicro(),
			Shape: trace.Shape{InputTokens: input, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1}}
		if think > 0 {
			q.ThinkTimeMs = trace.Ptr(think)
		}
		if err := w.Write(q); err != nil {
			t.Fatal(err)
		}
	}
	add("a1", "a", 0, 0, 40, 0)
	add("a2", "a", 1, 10*time.Millisecond, 100, 50) // logged ts is ignored: chained
	add("a3", "a", 2, 20*time.Millisecond, 200, 20)
	add("b1", "b", 0, 5*time.Millisecond, 30, 0)
	add("b2", "b", 1, 6*time.Millisecond, 80, 10)
	add("b3", "b", 2, 7*time.Millisecond, 50, 10) // history is already longer than 50 tokens
	add("solo", "", 0, 8*time.Millisecond, 25, 0)
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Target, opts.RunID = hs.URL, "sess"
	run := filepath.Join(t.TempDir(), "run")
	if _, err := Run(context.Background(), dir, run, opts); err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	byID := map[string]trace.Result{}
	for _, r := range rows {
		if r.Outcome != trace.OutcomeOK {
			t.Fatalf("%s: %s %s", r.RequestID, r.Outcome, r.Error)
		}
		byID[r.RequestID] = r
	}
	if len(byID) != 7 {
		t.Fatalf("%d results, want 7", len(byID))
	}
	// Later turns are scheduled at the earlier turn's done time plus think time.
	for _, c := range []struct {
		prev, next string
		think      float64
	}{{"a1", "a2", 50}, {"a2", "a3", 20}, {"b1", "b2", 10}, {"b2", "b3", 10}} {
		want := *byID[c.prev].DoneNs + int64(c.think*1e6)
		if got := byID[c.next].ScheduledNs; got != want {
			t.Errorf("%s scheduled at %d, want %s done %d + %v ms", c.next, got, c.prev, *byID[c.prev].DoneNs, c.think)
		}
		if *byID[c.next].SentNs < want {
			t.Errorf("%s sent before its think time was over", c.next)
		}
	}
	// Each later turn carries the earlier prompts and the text the server
	// actually returned; token counts are checked with the tokenizer itself.
	for _, id := range []string{"a1", "a2", "a3", "b1", "b2", "b3", "solo"} {
		msgs := srv.bodies[id]
		turn := int(byID[id].Turn)
		if len(msgs) != 2*turn+1 {
			t.Fatalf("%s: %d messages, want %d", id, len(msgs), 2*turn+1)
		}
		total := 0
		for k, m := range msgs {
			total += tok.Count(m.Content)
			if k%2 == 1 {
				prev := fmt.Sprintf("%s%d", id[:1], k/2+1)
				if want := strings.Join(srv.reply(prev), ""); m.Role != "assistant" || m.Content != want {
					t.Errorf("%s message %d: %s %q, want the server's reply to %s: %q", id, k, m.Role, m.Content, prev, want)
				}
			} else if k > 0 && msgs[k].Content != srv.bodies[fmt.Sprintf("%s%d", id[:1], k/2+1)][k].Content {
				t.Errorf("%s message %d is not the earlier turn's prompt", id, k)
			}
		}
		r := byID[id]
		if r.PromptTokensSent != int64(total) {
			t.Errorf("%s: prompt_tokens_sent %d, tokenizer counts %d", id, r.PromptTokensSent, total)
		}
		if id != "b3" && int64(total) != r.InputTokens {
			t.Errorf("%s: sent %d prompt tokens, workload asked %d", id, total, r.InputTokens)
		}
	}
	// b3 wanted 50 tokens but its history already holds more: its new message
	// is one token and the overshoot is visible.
	if b3 := byID["b3"]; tok.Count(srv.bodies["b3"][4].Content) != 1 || b3.PromptTokensSent <= b3.InputTokens {
		t.Errorf("b3: new message %d tokens, sent %d for %d asked", tok.Count(srv.bodies["b3"][4].Content), b3.PromptTokensSent, b3.InputTokens)
	}
}

func TestInterruptedSessionRecordsUnsentTurns(t *testing.T) {
	// Interrupt once the first turn is answered, during the 2 s think time
	// before the second, however long the run took to set up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &recordingServer{bodies: map[string][]chatMessage{}}
	hs := httptest.NewServer(cancelAfterServed(1, cancel)(srv))
	defer hs.Close()
	dir := filepath.Join(t.TempDir(), "wl")
	w, _ := trace.NewBucketWriter(dir, trace.WriterOptions{})
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for turn := range 3 {
		q := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("s%d", turn), SessionID: "s", Turn: int32(turn)}, TS: t0.UnixMicro(),
			Shape: trace.Shape{InputTokens: 10, MaxTokens: 3, API: trace.APIChat, Stream: true}, ThinkTimeMs: trace.Ptr(2000.0)}
		w.Write(q)
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Target = hs.URL
	run := filepath.Join(t.TempDir(), "run")
	info, err := Run(ctx, dir, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	if len(rows) != 3 || info.Outcomes[trace.OutcomeOK] != 1 || info.Outcomes[trace.OutcomeNotSent] != 2 {
		t.Fatalf("%d rows, outcomes %v; want the first turn ok and two not_sent", len(rows), info.Outcomes)
	}
}
