package replay

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// endlessServer answers every generation request with a stream that never
// ends on its own: events of text bytes of content each, until the client
// goes away.
func endlessServer(t *testing.T, text int) *httptest.Server {
	event := []byte(fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", strings.Repeat("x", text)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := w.Write(event); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// endlessWorkload is a greedy session of two turns, so the answer is
// fingerprinted, chained event by event and kept for the next turn.
func endlessWorkload(t *testing.T) string {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	zero := 0.0
	var reqs []trace.Request
	for i := range 2 {
		reqs = append(reqs, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("t%d", i), SessionID: "s", Turn: int32(i)},
			TS: t0.Add(time.Duration(i) * time.Millisecond).UnixMicro(), Temperature: &zero,
			Shape: trace.Shape{InputTokens: 8, OutputTokens: 4, MaxTokens: 4, API: trace.APIChat, Stream: true, N: 1}})
	}
	return tracetest.WriteWorkload(t, reqs)
}

// TestLongEndlessAnswerIsBounded (issue 46 item 1): a server that streams
// one answer for ever, in events of 32 KiB, neither exhausts a replay held
// to 384 MiB nor loses its results: the answer ends as a protocol error
// at the text bound, and every result is written.
func TestLongEndlessAnswerIsBounded(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		srv := endlessServer(t, 32<<10)
		opts := DefaultOptions()
		opts.Target, opts.RunID = srv.URL, "run"
		rows, info := runAndRead(t, endlessWorkload(t), filepath.Join(t.TempDir(), "run"), opts)
		if len(rows) != 2 || !info.Complete {
			t.Fatalf("%d rows, complete %v (%s); want both turns recorded", len(rows), info.Complete, info.Reason)
		}
		for _, r := range rows {
			if r.Outcome != trace.OutcomeProtocolError || !strings.Contains(r.Error, "answer text went on past") {
				t.Errorf("%s: %s %q; want a protocol error at the text bound", r.RequestID, r.Outcome, r.Error)
			}
		}
	})
}

// TestLongEndlessEventsAreBounded (issue 46 item 1): a server that streams
// one-byte events for ever gets a protocol error at maxTokenEvents, and
// the row written holds at most that many token times and event hashes.
func TestLongEndlessEventsAreBounded(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		srv := endlessServer(t, 1)
		opts := DefaultOptions()
		opts.Target, opts.RunID = srv.URL, "run"
		rows, _ := runAndRead(t, endlessWorkload(t), filepath.Join(t.TempDir(), "run"), opts)
		for _, r := range rows {
			if r.Outcome != trace.OutcomeProtocolError || !strings.Contains(r.Error, fmt.Sprintf("past %d token events", maxTokenEvents)) {
				t.Errorf("%s: %s %q; want a protocol error at %d token events", r.RequestID, r.Outcome, r.Error, maxTokenEvents)
			}
			if len(r.TokenTimesNs) > maxRowList || len(r.OutputEventHashes) > maxRowList {
				t.Errorf("%s: %d token times, %d event hashes; want at most %d each", r.RequestID, len(r.TokenTimesNs), len(r.OutputEventHashes), maxRowList)
			}
		}
	})
}
