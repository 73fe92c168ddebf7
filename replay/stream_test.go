package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// sliceSource reads requests held in memory (tests).
func sliceSource(reqs []trace.Request) source {
	return func(ctx context.Context, fn func(*trace.Request) error) error {
		for i := range reqs {
			if i&1023 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			if err := fn(&reqs[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// arrivals fills offsets with the first len(offsets) arrivals of the
// process newArrivalClock describes.
func arrivals(offsets []int64, rate float64, kind Arrival, shape float64, seed uint64) {
	a := newArrivalClock(rate, kind, shape, seed)
	for i := range offsets {
		offsets[i] = a.next()
	}
}

// collectPlan streams reqs through the planner (closed to sessions) and
// returns the whole schedule, or the stream's error.
func collectPlan(reqs []trace.Request, o *Options) ([]*planned, error) {
	s := newStream(context.Background(), sliceSource(reqs), o, false, false, false, lookAheadUnits)
	var out []*planned
	for p := range s.items {
		s.release(p)
		out = append(out, p)
	}
	<-s.done
	return out, s.err
}

// TestStreamReadsABoundedLookAhead: however long the workload, the stream
// reads at most its look-ahead beyond what the scheduler has taken, counts
// a long prompt's prefix blocks against it, and hands on every request in
// order.
func TestStreamReadsABoundedLookAhead(t *testing.T) {
	const n, units = 5000, 32
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	reqs := make([]trace.Request, n)
	for i := range reqs {
		reqs[i] = trace.Request{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, TS: t0.Add(time.Duration(i) * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: 10, API: trace.APIChat}}
		if i%100 == 7 { // a long prompt: 8 units of blocks
			reqs[i].PrefixBlocks = make([]int64, 8*lookAheadBlocksPerUnit)
		}
	}
	var read atomic.Int64
	counting := func(ctx context.Context, fn func(*trace.Request) error) error {
		return sliceSource(reqs)(ctx, func(q *trace.Request) error {
			read.Add(1)
			return fn(q)
		})
	}
	o := &Options{Schedule: Schedule{Speed: 1}}
	s := newStream(context.Background(), counting, o, false, false, false, units)
	taken := int64(0)
	var ahead int64
	for p := range s.items {
		if want := strconv.Itoa(int(taken)); p.req.RequestID != want {
			t.Fatalf("request %s handed on in place of %s", p.req.RequestID, want)
		}
		taken++
		time.Sleep(time.Duration(rand.IntN(20)) * time.Microsecond) // the scheduler's pace, irregular
		ahead = max(ahead, read.Load()-taken)
		if h := s.held.Load(); h > units {
			t.Fatalf("after %d taken the stream holds %d units, its look-ahead is %d", taken, h, units)
		}
		s.release(p)
	}
	<-s.done
	if s.err != nil || taken != n || s.planned.Load() != n {
		t.Fatalf("taken %d, planned %d, error %v; want %d", taken, s.planned.Load(), s.err, n)
	}
	// Read ahead: what the look-ahead holds, plus the request being placed.
	if ahead > units+1 || s.maxHeld.Load() > units {
		t.Errorf("read %d requests ahead of the scheduler, held at most %d units; the look-ahead is %d", ahead, s.maxHeld.Load(), units)
	}
	if s.maxHeld.Load() < units-8 {
		t.Errorf("held at most %d of %d units: the scheduler's pace should have filled the look-ahead", s.maxHeld.Load(), units)
	}
}

// TestStreamedReplayKeepsSessionsAndLookAhead replays, with a look-ahead of
// 16 requests, a workload of 600 requests of which 300 are turns of 100
// three-turn sessions whose turns are read far apart: every request has
// one result, each later turn is sent after the turn before is done, and
// the stream never held more than its look-ahead.
func TestStreamedReplayKeepsSessionsAndLookAhead(t *testing.T) {
	const units = 16
	defer func(u int64) { streamUnits = u }(streamUnits)
	streamUnits = units
	var maxHeld int64
	defer func(h func(*stream)) { streamDone = h }(streamDone)
	streamDone = func(s *stream) { maxHeld = s.maxHeld.Load() }

	dir := filepath.Join(t.TempDir(), "wl")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 600 {
		q := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("r%03d", i)}, TS: t0.Add(time.Duration(i) * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: 20, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1}}
		if i%2 == 0 { // session i/2 % 100, turn i/200: turns 200 requests apart
			q.SessionID, q.Turn = fmt.Sprintf("s%02d", (i/2)%100), int32(i/200)
			q.ThinkTimeMs = trace.Ptr(1.0)
		}
		if err := w.Write(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	srv := startSim(t, fastSim())
	rows, info := replayTo(t, srv, dir, func(o *Options) { o.Speed = 4 })
	if len(rows) != 600 || info.Scheduled != 600 || info.Outcomes[trace.OutcomeOK] != 600 {
		t.Fatalf("%d results, %d scheduled, outcomes %v; want 600 ok", len(rows), info.Scheduled, info.Outcomes)
	}
	bySession := map[string][]trace.Result{}
	for _, r := range rows {
		if r.SessionID != "" {
			bySession[r.SessionID] = append(bySession[r.SessionID], r)
		}
	}
	for id, turns := range bySession {
		slices.SortFunc(turns, func(a, b trace.Result) int { return int(a.Turn - b.Turn) })
		if len(turns) != 3 {
			t.Fatalf("session %s: %d turns, want 3", id, len(turns))
		}
		for k := 1; k < 3; k++ {
			if *turns[k].SentNs < *turns[k-1].DoneNs+int64(time.Millisecond) {
				t.Errorf("session %s turn %d sent at %d, before the turn before was done (%d) plus its think time", id, k, *turns[k].SentNs, *turns[k-1].DoneNs)
			}
			if turns[k].PromptTokensSent <= turns[k-1].PromptTokensSent {
				t.Errorf("session %s turn %d sent %d prompt tokens, no more than turn %d (%d): its history is missing", id, k, turns[k].PromptTokensSent, k-1, turns[k-1].PromptTokensSent)
			}
		}
	}
	if maxHeld == 0 || maxHeld > units {
		t.Errorf("the stream held at most %d units; its look-ahead is %d", maxHeld, units)
	}
}

// TestCheckSaysWhetherTextIsCounted: the workload check reports text to
// count (a tokenizer to build) for a planned request in a session or
// carrying tools or a schema, however the row says so, and none for
// plain requests, other features, or requests the schedule cuts.
func TestCheckSaysWhetherTextIsCounted(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	plain := func(i int) trace.Request {
		return trace.Request{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, TS: t0.Add(time.Duration(i) * time.Second).UnixMicro(),
			Shape: trace.Shape{InputTokens: 10, OutputTokens: 2, API: trace.APIChat}}
	}
	cases := []struct {
		name string
		last func(*trace.Request) // changes the last of three requests
		max  int                  // MaxRequests
		want bool
	}{
		{"plain", func(*trace.Request) {}, 0, false},
		{"a session", func(q *trace.Request) { q.SessionID = "s1" }, 0, true},
		{"tools", func(q *trace.Request) { q.Features = []string{trace.FeatureTools}; q.ToolCount = 1 }, 0, true},
		{"a tool count without its label", func(q *trace.Request) { q.ToolCount = 2 }, 0, true},
		{"a schema by its output format", func(q *trace.Request) { q.OutputFormat = trace.OutputJSONSchema }, 0, true},
		{"a seed counts nothing", func(q *trace.Request) { q.Seed = new(int64(7)); q.Features = []string{trace.FeatureSeed} }, 0, false},
		{"a session the schedule cuts", func(q *trace.Request) { q.SessionID = "s1" }, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reqs := []trace.Request{plain(0), plain(1), plain(2)}
			c.last(&reqs[2])
			o := DefaultOptions()
			o.Target = "http://127.0.0.1:1"
			o.MaxRequests = c.max
			check, err := checkWorkload(context.Background(), sliceSource(reqs), &o)
			if err != nil {
				t.Fatal(err)
			}
			if check.counts != c.want {
				t.Errorf("counts %v, want %v", check.counts, c.want)
			}
		})
	}
}
