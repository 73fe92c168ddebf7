package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// mooncakeAgentLine is one request of a tool-agent trace in Mooncake's
// documented shape (kvcache-ai/Mooncake FAST25-release/README: timestamp
// ms, input_length, output_length, hash_ids of 512-token blocks, a
// block's id standing for the whole prefix up to it).
type mooncakeAgentLine struct {
	TS     int64   `json:"timestamp"`
	In     int64   `json:"input_length"`
	Out    int64   `json:"output_length"`
	Blocks []int64 `json:"hash_ids"`
}

// writeMooncakeAgentTrace writes sessions of agents that share a few
// system prompts (tool schemas), call tools, grow their context by each
// tool's result and now and then fan out to sub-agents: every later
// request's hash ids repeat its parent's full blocks, so the sessions
// are in the block ids alone, as in Mooncake's tool-agent trace.
func writeMooncakeAgentTrace(t *testing.T, path string, sessions int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 38))
	next := int64(0)
	fresh := func() int64 { next++; return next }
	var systems [][]int64
	for _, n := range []int{3, 5, 8, 2} {
		var s []int64
		for range n {
			s = append(s, fresh())
		}
		systems = append(systems, s)
	}
	type req struct {
		ts, in, out int64
		blocks      []int64
	}
	var rows []mooncakeAgentLine
	emit := func(r req) { rows = append(rows, mooncakeAgentLine{TS: r.ts, In: r.in, Out: r.out, Blocks: r.blocks}) }
	child := func(p req) req {
		growth := int64(600 + rng.ExpFloat64()*1500)
		in := p.in + p.out + growth
		full := p.in / 512
		blocks := slices.Clone(p.blocks[:full])
		for int64(len(blocks)) < (in+511)/512 {
			blocks = append(blocks, fresh())
		}
		service := 300 + p.out*15
		tool := int64(math.Exp(rng.NormFloat64()*0.8 + 7.5)) // ms, median 1.8 s
		return req{ts: p.ts + service + tool, in: in, out: int64(30 + rng.IntN(400)), blocks: blocks}
	}
	at := 0.0
	for range sessions {
		at += rng.ExpFloat64() * 500 // ms between sessions
		sys := systems[min(int(rng.ExpFloat64()*1.2), len(systems)-1)]
		in := int64(len(sys))*512 + int64(600+rng.IntN(3000))
		blocks := slices.Clone(sys)
		for int64(len(blocks)) < (in+511)/512 {
			blocks = append(blocks, fresh())
		}
		root := req{ts: int64(at), in: in, out: int64(30 + rng.IntN(400)), blocks: blocks}
		emit(root)
		steps := rng.IntN(7) // tool turns after the first call
		cur := root
		for range steps {
			if rng.Float64() < 0.2 { // sub-agents from here, the loop goes on from the same call
				for range 2 + rng.IntN(3) {
					sub := child(cur)
					emit(sub)
					if rng.Float64() < 0.5 {
						emit(child(sub))
					}
				}
			}
			cur = child(cur)
			emit(cur)
		}
	}
	slices.SortStableFunc(rows, func(a, b mooncakeAgentLine) int { return int(a.TS - b.TS) })
	var b strings.Builder
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	writeFile(t, filepath.Dir(path), filepath.Base(path), []byte(b.String()))
}

// fitGenerateValidate converts src (with convertArgs), fits it, generates
// from the fit and returns validate's checks of the workload against it.
func fitGenerateValidate(t *testing.T, src string, convertArgs ...string) map[string][2]float64 {
	t.Helper()
	dir := filepath.Dir(src)
	tr, model, wl := filepath.Join(dir, "trace"), filepath.Join(dir, "m.json"), filepath.Join(dir, "wl")
	for _, step := range [][]string{
		append([]string{"convert", src, "--out", tr}, convertArgs...),
		{"fit", tr, "--no-latent", "--out", model},
		{"generate", model, "--seed", "3", "--out", wl},
	} {
		code, out, errOut := runCLI(t, step...)
		if code != 0 {
			t.Fatalf("%v: %s", step, errOut)
		}
		t.Log(strings.TrimSpace(out))
	}
	return validateChecks(t, tr, wl)
}

// validateChecks runs validate --json and returns its checks by name.
func validateChecks(t *testing.T, real, synth string) map[string][2]float64 {
	t.Helper()
	code, out, errOut := runCLI(t, "validate", real, synth, "--json")
	if code != 0 && code != 1 {
		t.Fatalf("validate: %s", errOut)
	}
	var v struct {
		Checks []struct {
			Name      string  `json:"name"`
			Diff      float64 `json:"diff"`
			Threshold float64 `json:"threshold"`
			Real      float64 `json:"real"`
			Synth     float64 `json:"synth"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	checks := map[string][2]float64{}
	for _, c := range v.Checks {
		checks[c.Name] = [2]float64{c.Diff, c.Threshold}
		if strings.HasPrefix(c.Name, "lru_hit_") {
			t.Logf("%s: trace %.4f, generated %.4f", c.Name, c.Real, c.Synth)
		}
	}
	return checks
}

// checkAgentFidelity asserts the agent-graph checks of issue 38: KS 0.05
// on turns per session, fan-out width (and depth), wait and input
// growth, each LRU hit rate within 0.03 of the trace's, and the session
// starts' gaps within validate's default 30%.
func checkAgentFidelity(t *testing.T, checks map[string][2]float64) {
	t.Helper()
	want := map[string]float64{"session_turns_ks": 0.05, "graph_fanout_ks": 0.05, "graph_depth_ks": 0.05, "graph_delay_ks": 0.05, "graph_growth_ks": 0.05,
		"session_gap_p50": 0.3, "session_gap_p90": 0.3}
	lru := 0
	for name := range checks {
		if strings.HasPrefix(name, "lru_hit_") {
			want[name] = 0.03
			lru++
		}
	}
	if lru == 0 {
		t.Error("no LRU hit-rate check was made")
	}
	for name, limit := range want {
		c, ok := checks[name]
		switch {
		case !ok:
			t.Errorf("%s: not checked", name)
		case c[0] > limit:
			t.Errorf("%s = %.4f, want ≤ %g", name, c[0], limit)
		default:
			t.Logf("%s = %.4f", name, c[0])
		}
	}
}

// TestLongMooncakeToolAgentFitGenerateValidate converts a tool-agent
// trace in Mooncake's shape with its sessions linked by hash ids, fits it,
// generates from the fit and validates the agent graphs against it.
func TestLongMooncakeToolAgentFitGenerateValidate(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check (a fit): runs without -race in make test-timing")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "toolagent_trace.jsonl")
	writeMooncakeAgentTrace(t, src, 4000, 1)
	checkAgentFidelity(t, fitGenerateValidate(t, src, "--sessions-from-prefix"))
}

// agentLogWriter writes an OpenAI-style request log (the shape of
// datasets/testdata/logs/agent.jsonl: id, timestamp, end_time, user,
// status, request.messages, response.choices) of agent sessions: tool
// calls answered by tool messages, sub-agents that extend a planner's
// conversation and a join that quotes their answers, users who write
// again after thinking.
type agentLogWriter struct {
	rng   *rand.Rand
	vocab []string
	rows  []agentLogRow
	n     int
}

type agentLogRow struct {
	at   time.Time
	line []byte
}

type logMsg struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolCalls  any    `json:"tool_calls,omitempty"`
}

func (w *agentLogWriter) words(lo, hi int) string {
	n := lo + w.rng.IntN(hi-lo+1)
	out := make([]string, n)
	for i := range out {
		out[i] = w.vocab[w.rng.IntN(len(w.vocab))]
	}
	return strings.Join(out, " ")
}

// call logs one request at start with messages; its answer is a tool call
// or the text answer, and it ends after a service time by answer length.
func (w *agentLogWriter) call(user string, start time.Time, msgs []logMsg, answer string, toolCall bool) (end time.Time, reply logMsg) {
	w.n++
	id := fmt.Sprintf("req-%d", w.n)
	end = start.Add(time.Duration(200+len(answer)/2) * time.Millisecond)
	msg := map[string]any{"role": "assistant", "content": answer}
	finish := "stop"
	reply = logMsg{Role: "assistant", Content: answer}
	if toolCall {
		calls := []map[string]any{{"id": "call-" + id, "type": "function", "function": map[string]any{"name": "search", "arguments": `{"q":"` + answer + `"}`}}}
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": calls}
		finish = "tool_calls"
		reply = logMsg{Role: "assistant", Content: nil, ToolCalls: calls}
	}
	line, err := json.Marshal(map[string]any{"id": id, "timestamp": start.Format(time.RFC3339Nano), "end_time": end.Format(time.RFC3339Nano),
		"user": user, "status": 200,
		"request":  map[string]any{"model": "llama-3.1-8b", "messages": msgs, "max_tokens": 512, "stream": true},
		"response": map[string]any{"choices": []any{map[string]any{"message": msg, "finish_reason": finish}}}})
	if err != nil {
		panic(err)
	}
	w.rows = append(w.rows, agentLogRow{start, line})
	return end, reply
}

// session logs one agent session starting at start.
func (w *agentLogWriter) session(k int, start time.Time, systems []string) {
	user := fmt.Sprintf("agent-%d", k)
	conv := []logMsg{{Role: "system", Content: systems[min(int(w.rng.ExpFloat64()), len(systems)-1)]}, {Role: "user", Content: w.words(20, 150)}}
	toolCall := w.rng.Float64() < 0.6
	end, reply := w.call(user, start, conv, w.words(20, 120), toolCall)
	ms := func(median float64) time.Duration {
		return time.Duration(math.Exp(w.rng.NormFloat64()*0.7+math.Log(median))) * time.Millisecond
	}
	for range w.rng.IntN(6) {
		conv = append(slices.Clip(conv), reply)
		switch {
		case toolCall:
			conv = append(conv, logMsg{Role: "tool", ToolCallID: "call-" + fmt.Sprint(w.n), Content: w.words(30, 300)})
			toolCall = w.rng.Float64() < 0.5
			end, reply = w.call(user, end.Add(ms(1200)), conv, w.words(20, 120), toolCall)
		case w.rng.Float64() < 0.3: // sub-agents, then a join quoting their answers
			var answers []string
			last := end
			for h := range 2 + w.rng.IntN(3) {
				sub := append(slices.Clip(conv), logMsg{Role: "user", Content: fmt.Sprintf("Helper %d: %s", h, w.words(10, 60))})
				answer := w.words(15, 100)
				subEnd, _ := w.call(user, end.Add(ms(80)), sub, answer, false)
				answers = append(answers, answer)
				if subEnd.After(last) {
					last = subEnd
				}
			}
			conv = append(conv, logMsg{Role: "user", Content: "Here is what the helpers found."})
			for _, a := range answers {
				conv = append(conv, logMsg{Role: "user", Content: a})
			}
			end, reply = w.call(user, last.Add(ms(300)), conv, w.words(20, 120), false)
		default:
			conv = append(conv, logMsg{Role: "user", Content: w.words(10, 80)})
			toolCall = w.rng.Float64() < 0.4
			end, reply = w.call(user, end.Add(ms(5000)), conv, w.words(20, 120), toolCall)
		}
	}
}

// writeAgentLog writes sessions agent sessions to path, in time order.
func writeAgentLog(t *testing.T, path string, sessions int, seed uint64) {
	t.Helper()
	w := &agentLogWriter{rng: rand.New(rand.NewPCG(seed, 39))}
	for i := range 600 {
		w.vocab = append(w.vocab, fmt.Sprintf("w%x", i*7919%4093))
	}
	systems := []string{w.words(150, 150), w.words(300, 300), w.words(80, 80)}
	at := time.Date(2025, 3, 2, 9, 0, 0, 0, time.UTC)
	for k := range sessions {
		at = at.Add(time.Duration(w.rng.ExpFloat64() * float64(time.Second)))
		w.session(k, at, systems)
	}
	slices.SortStableFunc(w.rows, func(a, b agentLogRow) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, r := range w.rows {
		b.Write(r.line)
		b.WriteByte('\n')
	}
	writeFile(t, filepath.Dir(path), filepath.Base(path), []byte(b.String()))
}

// TestLongAgentLogFitGenerateValidate converts a gateway log of agent
// sessions (tool chains, fan-out and join), fits it, generates from the
// fit and validates the agent graphs against it.
func TestLongAgentLogFitGenerateValidate(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check (a fit): runs without -race in make test-timing")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "agents.jsonl")
	writeAgentLog(t, src, 1500, 2)
	checkAgentFidelity(t, fitGenerateValidate(t, src, "--block-size", "128"))
}
