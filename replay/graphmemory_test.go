package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// chainServer answers each request "answer-of-ID" and records, by id,
// how many messages its body held and whether they held the first
// request's answer, without keeping any prompt.
type chainServer struct {
	mu       sync.Mutex
	messages map[string]int
	rooted   map[string]bool // its messages hold answer-of-c0
}

func (c *chainServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	id := strings.TrimPrefix(r.Header.Get("X-Request-Id"), "run-")
	var body struct {
		Messages []chatMessage `json:"messages"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	rooted := false
	for _, m := range body.Messages {
		rooted = rooted || m.Content == "answer-of-c0"
	}
	c.mu.Lock()
	c.messages[id], c.rooted[id] = len(body.Messages), rooted
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"answer-of-%s\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", id)
}

// TestLongDeepAgentChainSharesHistory (issue 46 item 3): a chain of 1,500
// requests, each the child of the one before, replays under a 256 MiB
// cap (each child cloned its parent's messages: 1k/2k/3k deep took
// 145/458/940 MB), and the last one's prompt holds the whole
// conversation: two messages a request before it, its own, and the
// first answer.
func TestLongDeepAgentChainSharesHistory(t *testing.T) {
	const depth = 1500
	memcap.Run(t, 256<<20, func(t *testing.T) {
		srv := &chainServer{messages: map[string]int{}, rooted: map[string]bool{}}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		zero := 0.0
		reqs := make([]trace.Request, depth)
		for i := range reqs {
			reqs[i] = trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("c%d", i), SessionID: "s"}, TS: t0.Add(time.Duration(i) * time.Microsecond).UnixMicro(),
				Shape: trace.Shape{InputTokens: 1, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}, ToolMs: &zero}
			if i > 0 {
				reqs[i].ParentIDs = []string{fmt.Sprintf("c%d", i-1)}
			}
		}
		opts := DefaultOptions()
		opts.Target, opts.RunID = ts.URL, "run"
		rows, info := runAndRead(t, tracetest.WriteWorkload(t, reqs), filepath.Join(t.TempDir(), "run"), opts)
		ok := 0
		for _, r := range rows {
			if r.Outcome == trace.OutcomeOK {
				ok++
			}
		}
		if ok != depth || !info.Complete {
			t.Fatalf("%d of %d ok, complete %v; want all", ok, depth, info.Complete)
		}
		last := fmt.Sprintf("c%d", depth-1)
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if got := srv.messages[last]; got != 2*(depth-1)+1 || !srv.rooted[last] {
			t.Errorf("the last request sent %d messages (the first answer among them: %v); want %d with it", got, srv.rooted[last], 2*(depth-1)+1)
		}
	})
}

// graphReq is a graph request of the given id and parents, for the
// graph's own tests.
func graphReq(id string, parents ...string) *planned {
	return &planned{req: &trace.Request{Identity: trace.Identity{RequestID: id}, ParentIDs: parents}}
}

// contents are the messages of the session's conversation.
func (s *session) contents() []string {
	var out []string
	for _, m := range s.hist.messages() {
		out = append(out, m.Content)
	}
	return out
}

// answered is a conversation whose last message is the answer text.
func answered(text string) *session {
	s := &session{}
	s.record(nil, "prompt", text, 0, 1)
	return s
}

// TestGraphKeepsWhatChildrenNeed (issue 46 item 8): a child waiting on
// two parents gets both parents' answers however many requests finish
// between their ends, and a child read after its parent finished, 70,000
// finished requests later, still follows it (the graph forgot a parent
// after 65,536 and sent its child at its own time, blaming the workload).
func TestGraphKeepsWhatChildrenNeed(t *testing.T) {
	g := newGraph()
	finishMany := func(prefix string, n int) {
		for i := range n {
			p := graphReq(fmt.Sprintf("%s%d", prefix, i))
			g.add(p)
			g.finish(p, int64(i), true, answered("x"))
		}
	}
	p1, p2, child := graphReq("p1"), graphReq("p2"), graphReq("child", "p1", "p2")
	g.add(p1)
	g.add(p2)
	if held, _, _, _, _ := g.add(child); !held {
		t.Fatal("child does not wait for its parents")
	}
	g.finish(p1, 1, true, answered("answer-of-p1"))
	finishMany("a", 70_000)
	rel := g.finish(p2, 2, true, answered("answer-of-p2"))
	if len(rel) != 1 || rel[0].sess == nil {
		t.Fatalf("p2's end released %+v; want the child, with its conversation", rel)
	}
	text := strings.Join(rel[0].sess.contents(), "\n")
	for _, want := range []string{"answer-of-p1", "answer-of-p2"} {
		if !strings.Contains(text, want) {
			t.Errorf("the child's conversation %q lacks %s", text, want)
		}
	}

	late := graphReq("late-parent")
	g.add(late)
	g.finish(late, 7, true, answered("answer-of-late"))
	finishMany("b", 70_000)
	held, ready, follows, failed, sess := g.add(graphReq("late-child", "late-parent"))
	if held || !follows || failed != "" || ready != 7 || sess == nil || !strings.Contains(strings.Join(sess.contents(), "\n"), "answer-of-late") {
		t.Errorf("a child read 70,000 requests after its parent finished: held %v follows %v failed %q ready %d; want it to follow, ready at 7, with the answer", held, follows, failed, ready)
	}
	if g.notRead.n+g.unsure.n+g.lostConv.n != 0 {
		t.Errorf("not read %+v, unsure %+v, conversations lost %+v; want none", g.notRead, g.unsure, g.lostConv)
	}
}

// TestGraphSaysWhenItForgot (issue 46 item 8): past the graph's bound on
// finished requests, a child whose parent was forgotten is counted apart
// from one whose parent was never read (read before any was forgotten):
// its note says the parent may have been forgotten.
func TestGraphSaysWhenItForgot(t *testing.T) {
	defer func(b int64) { maxFinishedBytes = b }(maxFinishedBytes)
	maxFinishedBytes = 64 << 10
	g := newGraph()
	g.add(graphReq("orphan", "never-read"))
	p := graphReq("parent")
	g.add(p)
	g.finish(p, 1, true, nil)
	for i := range 10_000 {
		q := graphReq(fmt.Sprintf("other%d", i))
		g.add(q)
		g.finish(q, 2, true, nil)
	}
	g.add(graphReq("child", "parent"))
	if g.notRead.n != 1 || g.notRead.first != "orphan" || g.unsure.n != 1 || g.unsure.first != "child" {
		t.Errorf("not read %+v, unsure %+v; want the orphan not read and the child's parent unsure", g.notRead, g.unsure)
	}
}

// TestGraphDuplicateIDs (issue 46 item 11): a workload that repeats a
// request id sends each row once; the child named after the first row
// follows it, ends ok, and the repeat is noted by id (a complete run
// recorded that child not sent).
func TestGraphDuplicateIDs(t *testing.T) {
	srv := &graphServer{arrived: map[string]time.Time{}, done: map[string]time.Time{}, slow: map[string]time.Duration{}, prompts: map[string]string{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var reqs []trace.Request
	for i, r := range []struct{ id, parent string }{{"x", ""}, {"child", "x"}, {"x", ""}, {"grandchild", "child"}} {
		q := trace.Request{Identity: trace.Identity{RequestID: r.id}, TS: t0.Add(time.Duration(i) * 20 * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}}
		if r.parent != "" {
			q.ParentIDs = []string{r.parent}
		}
		reqs = append(reqs, q)
	}
	opts := DefaultOptions()
	opts.Target, opts.RunID = ts.URL, "run"
	rows, info := runAndRead(t, tracetest.WriteWorkload(t, reqs), filepath.Join(t.TempDir(), "run"), opts)
	if len(rows) != 4 || !info.Complete {
		t.Fatalf("%d rows, complete %v; want 4", len(rows), info.Complete)
	}
	for _, r := range rows {
		if r.Outcome != trace.OutcomeOK {
			t.Errorf("%s: %s %q; want ok", r.RequestID, r.Outcome, r.Error)
		}
	}
	if !strings.Contains(strings.Join(info.Notes, "\n"), `request_id repeats an earlier row's: a child follows the latest row read before it with its parent's id in 1 request(s) (first: "x")`) {
		t.Errorf("notes %q; want the repeated id noted", info.Notes)
	}
}

// TestProbeBesideGraphChildGoesWithIt (issue 46 item 12): a probe drawn
// beside a request that waits on a slow parent goes when that request
// goes, not at its logged time (it went 400 ms early), and one beside a
// request whose parent failed is not sent either.
func TestProbeBesideGraphChildGoesWithIt(t *testing.T) {
	srv := &graphServer{arrived: map[string]time.Time{}, done: map[string]time.Time{}, slow: map[string]time.Duration{"parent": 400 * time.Millisecond}, prompts: map[string]string{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	zero := 0.0
	reqs := []trace.Request{
		{Identity: trace.Identity{RequestID: "parent"}, TS: t0.UnixMicro(), Shape: trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}},
		{Identity: trace.Identity{RequestID: "child"}, TS: t0.Add(10 * time.Millisecond).UnixMicro(), ParentIDs: []string{"parent"}, ToolMs: &zero,
			Shape: trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}},
		{Identity: trace.Identity{RequestID: "fail-parent"}, TS: t0.Add(20 * time.Millisecond).UnixMicro(), Shape: trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}},
		{Identity: trace.Identity{RequestID: "orphaned"}, TS: t0.Add(30 * time.Millisecond).UnixMicro(), ParentIDs: []string{"fail-parent"}, ToolMs: &zero,
			Shape: trace.Shape{InputTokens: 4, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1}},
	}
	opts := DefaultOptions()
	opts.Target, opts.RunID, opts.Probes = ts.URL, "run", 1
	rows, _ := runAndRead(t, tracetest.WriteWorkload(t, reqs), filepath.Join(t.TempDir(), "run"), opts)
	by := map[string]trace.Result{}
	for _, r := range rows {
		by[r.RequestID] = r
	}
	child, probe, parent := by["child"], by[probeIDPrefix+"child"], by["parent"]
	if len(rows) != 8 || child.SentNs == nil || probe.SentNs == nil || parent.DoneNs == nil {
		t.Fatalf("rows %d; child %+v probe %+v", len(rows), child, probe)
	}
	if probe.ScheduledNs != child.ScheduledNs || *probe.SentNs < *parent.DoneNs {
		t.Errorf("the child's probe was scheduled at %v and sent at %v; the child at %v, its parent done at %v: want the probe with the child",
			time.Duration(probe.ScheduledNs), time.Duration(*probe.SentNs), time.Duration(child.ScheduledNs), time.Duration(*parent.DoneNs))
	}
	if o, p := by["orphaned"], by[probeIDPrefix+"orphaned"]; o.Outcome != trace.OutcomeNotSent || p.Outcome != trace.OutcomeNotSent || p.Error != o.Error {
		t.Errorf("a child of a failed parent: %s %q, its probe %s %q; want both not sent, for one reason", o.Outcome, o.Error, p.Outcome, p.Error)
	}
}
