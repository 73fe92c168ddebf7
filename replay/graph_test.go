package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// graphServer records when each request arrives and when its answer
// ends, by X-Request-Id, answering after slow[id] (if any), and 500 to
// ids starting with "fail".
type graphServer struct {
	mu      sync.Mutex
	arrived map[string]time.Time
	done    map[string]time.Time
	slow    map[string]time.Duration
	prompts map[string]string // every message's content, joined
}

func (g *graphServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	id := strings.TrimPrefix(r.Header.Get("X-Request-Id"), "run-") // replay sends RUN_ID-REQUEST_ID
	var body struct {
		Messages []chatMessage `json:"messages"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	var texts []string
	for _, m := range body.Messages {
		texts = append(texts, m.Content)
	}
	g.mu.Lock()
	g.arrived[id] = time.Now()
	g.prompts[id] = strings.Join(texts, "\n")
	wait := g.slow[id]
	g.mu.Unlock()
	if strings.HasPrefix(id, "fail") {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		return
	}
	time.Sleep(wait)
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"answer-of-%s\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", id)
	g.mu.Lock()
	g.done[id] = time.Now()
	g.mu.Unlock()
}

// TestAgentGraphWaitsOnParents (issue 38): a planner's answer, a tool's
// 150 ms, three sub-agents fanned out, a join 100 ms after the slowest of
// them, checked from the server's own times: each request arrives only
// after its parents' answers ended plus its delay, the slow sub-agent
// delays the join by its slowness, a request of another session is not
// held, a parent that is not in the workload holds nothing, and a child
// of a failed request is not sent, saying why; each prompt carries its
// parents' conversation and answers.
func TestAgentGraphWaitsOnParents(t *testing.T) {
	srv := &graphServer{arrived: map[string]time.Time{}, done: map[string]time.Time{}, slow: map[string]time.Duration{"c2": 400 * time.Millisecond},
		prompts: map[string]string{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var reqs []trace.Request
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(v float64) *float64 { return &v }
	for _, r := range []struct {
		id      string
		at      time.Duration
		parents []string
		tool    *float64
		role    string
	}{
		{"a", 0, nil, nil, trace.RolePlanner},
		{"fail-root", 5 * time.Millisecond, nil, nil, ""},
		{"b", 10 * time.Millisecond, []string{"a"}, ms(150), trace.RoleToolFollowUp},
		{"c1", 20 * time.Millisecond, []string{"b"}, nil, trace.RoleSubAgent},
		{"c2", 20 * time.Millisecond, []string{"b"}, nil, trace.RoleSubAgent},
		{"c3", 20 * time.Millisecond, []string{"b"}, nil, trace.RoleSubAgent},
		{"f", 25 * time.Millisecond, []string{"fail-root"}, nil, ""},
		{"d", 30 * time.Millisecond, []string{"c1", "c2", "c3"}, ms(100), trace.RolePlanner},
		{"g", 35 * time.Millisecond, []string{"f"}, nil, ""},
		{"e", 50 * time.Millisecond, nil, nil, trace.RoleChat},
		{"x", 60 * time.Millisecond, []string{"not-in-the-workload"}, nil, ""},
		// No wait logged (a Mooncake trace's arrivals only): its own time,
		// unless its parent ends later.
		{"h", 400 * time.Millisecond, []string{"a"}, nil, ""},
	} {
		q := trace.Request{Identity: trace.Identity{RequestID: r.id, SessionID: "s"}, TS: t0.Add(r.at).UnixMicro(),
			Shape:     trace.Shape{InputTokens: 8, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, Stream: true, N: 1},
			ParentIDs: r.parents, ToolMs: r.tool, Role: r.role}
		if r.id == "e" {
			q.SessionID = "other"
		}
		reqs = append(reqs, q)
	}
	dir := tracetest.WriteWorkload(t, reqs)
	opts := DefaultOptions()
	opts.Target, opts.RunID = ts.URL, "run"
	rows, info := runAndRead(t, dir, filepath.Join(t.TempDir(), "run"), opts)
	if !strings.Contains(strings.Join(info.Notes, "\n"), `parent_ids named a request not read before the child (outside the window, another shard's, or later in the workload): taken as finished in 1 request(s) (first: "x")`) {
		t.Errorf("notes %q; want the unknown parent counted", info.Notes)
	}
	if len(rows) != 12 || info.Scheduled != 12 {
		t.Fatalf("%d results of %d scheduled; want 12 of 12", len(rows), info.Scheduled)
	}
	byID := map[string]trace.Result{}
	for _, r := range rows {
		byID[r.RequestID] = r
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	after := func(child string, delay time.Duration, parents ...string) time.Time {
		t.Helper()
		var last time.Time
		for _, p := range parents {
			if srv.done[p].After(last) {
				last = srv.done[p]
			}
		}
		if got := srv.arrived[child].Sub(last); got < delay {
			t.Errorf("%s arrived %v after its last parent's answer ended; want at least %v", child, got, delay)
		}
		return last.Add(delay)
	}
	after("b", 150*time.Millisecond, "a")
	// Judged on the schedule, which the server's arrival times would
	// blur by the parent's own lateness.
	if h, a := byID["h"], byID["a"]; h.ScheduledNs-a.ScheduledNs != int64(400*time.Millisecond) || h.SentNs == nil || *h.SentNs < h.ScheduledNs {
		t.Errorf("h, with no wait logged, scheduled %v after its parent, sent at %v; want its own time, 400 ms after, and sent then",
			time.Duration(h.ScheduledNs-a.ScheduledNs), h.SentNs)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		after(c, 0, "b")
	}
	due := after("d", 100*time.Millisecond, "c1", "c2", "c3")
	if late := srv.arrived["d"].Sub(due); late > 100*time.Millisecond {
		t.Errorf("the join arrived %v after its slowest sub-agent's answer and tool time; want within 100 ms", late)
	}
	if srv.arrived["d"].Sub(srv.arrived["a"]) < 550*time.Millisecond {
		t.Errorf("the join came %v after the planner; the slow sub-agent (400 ms) and the delays (250 ms) hold it longer", srv.arrived["d"].Sub(srv.arrived["a"]))
	}
	if !srv.arrived["e"].Before(srv.done["b"]) || !srv.arrived["x"].Before(srv.done["b"]) {
		t.Errorf("a request of another session (e) and one whose parent is not in the workload (x) waited on this session's graph")
	}
	// Each prompt continues its parents' conversation, answers included.
	for child, answers := range map[string][]string{
		"b": {"answer-of-a"}, "c2": {"answer-of-a", "answer-of-b"},
		"d": {"answer-of-a", "answer-of-b", "answer-of-c1", "answer-of-c2", "answer-of-c3"},
	} {
		for _, a := range answers {
			if !strings.Contains(srv.prompts[child], a) {
				t.Errorf("%s's prompt lacks %s", child, a)
			}
		}
	}
	if strings.Contains(srv.prompts["e"], "answer-of") {
		t.Error("a request of another session carries this graph's answers")
	}
	for _, id := range []string{"f", "g"} {
		if r := byID[id]; r.Outcome != trace.OutcomeNotSent || !strings.Contains(r.Error, "did not end ok") {
			t.Errorf("%s: %s %q; want not sent, its parent having failed", id, r.Outcome, r.Error)
		}
		if _, ok := srv.arrived[id]; ok {
			t.Errorf("%s reached the server", id)
		}
	}
}

// TestGraphNeverHolds: a cycle in parent_ids holds nothing (the parent
// named later is not known when its child is read), a failed parent fails
// its descendants at once, and what is still held at the end is drained.
func TestGraphNeverHolds(t *testing.T) {
	g := newGraph()
	reqs := map[string]*planned{}
	add := func(id string, parents ...string) (held bool, ready int64, follows bool, failed string) {
		reqs[id] = graphReq(id, parents...)
		held, ready, follows, failed, _ = g.add(reqs[id])
		return
	}
	if held, _, follows, failed := add("a", "b"); held || follows || failed != "" || g.notRead.n != 1 {
		t.Fatalf("a, naming b not yet read: held %v follows %v failed %q", held, follows, failed)
	}
	if held, _, _, _ := add("b", "a"); !held {
		t.Fatal("b waits for a")
	}
	if got := g.finish(reqs["a"], 5, true, nil); len(got) != 1 || got[0].p.req.RequestID != "b" || got[0].readyNs != 5 || got[0].failed != "" {
		t.Fatalf("a's end released %+v; want b ready at 5", got)
	}
	// x fails: y (its child) and z (y's child, also waiting on w) fail.
	add("x")
	add("w")
	add("y", "x")
	add("z", "y", "w")
	add("held", "w")
	got := g.finish(reqs["x"], 9, false, nil)
	if len(got) != 1 || got[0].p.req.RequestID != "y" || got[0].failed == "" {
		t.Fatalf("x's failure released %+v; want y, failed", got)
	}
	if got := g.finish(reqs["w"], 10, true, nil); len(got) != 2 {
		t.Fatalf("w's end released %+v; want z (failed: y failed) and held", got)
	}
	add("late", "never-ends")
	add("never-ends")
	add("child", "never-ends")
	if d := g.drain(); len(d) != 1 || d[0].req.RequestID != "child" {
		t.Errorf("drained %d; want the one child still waiting", len(d))
	}
}

// TestAgentLogRoundTrip (issue 38's round trip): the agent log of
// datasets/testdata converts; replayed against a recording server that is
// slow (600 ms) for one helper, each request arrives only after its
// parents' answers ended plus the delay the log recorded, its prompt
// holding their answers, and the join waits for the slow helper.
func TestAgentLogRoundTrip(t *testing.T) {
	m, err := datasets.LoadMapping("openai")
	if err != nil {
		t.Fatal(err)
	}
	salt, err := anon.ParseSalt("00112233445566778899aabbccddeeff")
	if err != nil {
		t.Fatal(err)
	}
	bucket := filepath.Join(t.TempDir(), "bucket")
	if _, err := datasets.Convert(context.Background(), []string{"../datasets/testdata/logs/agent.jsonl"}, bucket,
		datasets.ConvertOptions{Options: datasets.Options{Format: datasets.FormatOpenAILog, Log: datasets.LogOptions{Mapping: m, Salt: salt}}}); err != nil {
		t.Fatal(err)
	}
	rows, _, err := trace.ReadAll(context.Background(), bucket)
	if err != nil || len(rows) != 6 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	slowHelper := rows[3].RequestID
	srv := &graphServer{arrived: map[string]time.Time{}, done: map[string]time.Time{}, slow: map[string]time.Duration{slowHelper: 600 * time.Millisecond},
		prompts: map[string]string{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	opts := DefaultOptions()
	opts.Target, opts.RunID = ts.URL, "run"
	results, _ := runAndRead(t, bucket, filepath.Join(t.TempDir(), "run"), opts)
	for _, r := range results {
		if r.Outcome != trace.OutcomeOK {
			t.Errorf("%s: %s %s", r.RequestID, r.Outcome, r.Error)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, q := range rows {
		var last time.Time
		var answers []string
		for _, p := range q.ParentIDs {
			if srv.done[p].After(last) {
				last = srv.done[p]
			}
			answers = append(answers, "answer-of-"+p)
		}
		if len(q.ParentIDs) == 0 {
			continue
		}
		delay := time.Duration((ptrOr(q.ToolMs) + ptrOr(q.ThinkTimeMs)) * float64(time.Millisecond))
		if got := srv.arrived[q.RequestID].Sub(last); got < delay {
			t.Errorf("%s arrived %v after its last parent ended; the log recorded %v", q.RequestID, got, delay)
		}
		for _, a := range answers {
			if !strings.Contains(srv.prompts[q.RequestID], a) {
				t.Errorf("%s's prompt lacks its parent's answer %s", q.RequestID, a)
			}
		}
	}
	join := rows[5].RequestID
	if srv.arrived[join].Sub(srv.done[slowHelper]) < 300*time.Millisecond || srv.done[slowHelper].Sub(srv.arrived[slowHelper]) < 600*time.Millisecond {
		t.Errorf("the join arrived %v after the slow helper ended; want its recorded 300 ms at least", srv.arrived[join].Sub(srv.done[slowHelper]))
	}
}

func ptrOr(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
