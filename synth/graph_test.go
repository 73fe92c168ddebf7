package synth

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// agentRows builds sessions of two shapes, alternately: a chain of three
// (tool follow-ups, 2 s each) and a planner with two sub-agents and a join
// (sub-agents 0.1 s after it, the join 0.5 s after the slower one).
func agentRows(sessions int) []trace.Request {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var rows []trace.Request
	add := func(s, k int, ts int64, in int64, parents []int, tool, think float64) {
		r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("s%d-%d", s, k), SessionID: fmt.Sprintf("s%d", s), Model: "m"},
			TS: ts, Shape: trace.Shape{InputTokens: in, OutputTokens: 50, MaxTokens: 50, N: 1, API: trace.APIChat}}
		for _, p := range parents {
			r.ParentIDs = append(r.ParentIDs, fmt.Sprintf("s%d-%d", s, p))
		}
		if tool > 0 {
			r.ToolMs = new(tool)
		}
		if think > 0 {
			r.ThinkTimeMs = new(think)
		}
		rows = append(rows, r)
	}
	for s := range sessions {
		t0 := base + int64(s)*10_000_000
		if s%2 == 0 {
			add(s, 0, t0, 1000, nil, 0, 0)
			add(s, 1, t0+2_500_000, 1250, []int{0}, 2000, 0)
			add(s, 2, t0+5_000_000, 1500, []int{1}, 2000, 0)
			continue
		}
		add(s, 0, t0, 1000, nil, 0, 0)
		add(s, 1, t0+600_000, 1100, []int{0}, 0, 100)
		add(s, 2, t0+600_000, 1100, []int{0}, 0, 100)
		add(s, 3, t0+1_600_000, 1300, []int{0, 1, 2}, 0, 500)
	}
	slices.SortStableFunc(rows, func(a, b trace.Request) int { return int(a.TS - b.TS) })
	return rows
}

func TestShapeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		parents [][]int32
		want    string
	}{
		{[][]int32{nil}, ""},
		{[][]int32{nil, {0}, {1}}, "1 1"},
		{[][]int32{nil, {0}, {0}, {0, 1, 2}}, "1 2 3,2,1"},
	} {
		n := graphNodes{parents: tc.parents}
		if got := n.shape(); got != tc.want {
			t.Errorf("%v: shape %q, want %q", tc.parents, got, tc.want)
		}
		back, err := decodeShape(tc.want)
		if err != nil || !slices.EqualFunc(back, tc.parents, slices.Equal) {
			t.Errorf("decode %q = %v, %v; want %v", tc.want, back, err, tc.parents)
		}
	}
	for _, bad := range []string{"0", "2", "1 x", "1 1,", "1  1"} {
		if _, err := decodeShape(bad); err == nil {
			t.Errorf("decode %q: no error", bad)
		}
	}
}

// TestFitAgentGraphs fits the two shapes and their laws from agentRows,
// then generates: every session has one of the two shapes, a child comes
// after its parents and names them, and each kind waits as fitted.
func TestFitAgentGraphs(t *testing.T) {
	dir := writeBucket(t, agentRows(400), &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	m, err := Fit(context.Background(), dir, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	gr := m.Sessions.Graph
	if gr == nil {
		t.Fatal("no graph model")
	}
	want := []GraphShape{{Weight: 200, Parents: "1 1"}, {Weight: 200, Parents: "1 2 3,2,1"}}
	slices.SortFunc(gr.Shapes, func(a, b GraphShape) int { return len(a.Parents) - len(b.Parents) })
	if !slices.Equal(gr.Shapes, want) || gr.Share != 1 {
		t.Errorf("shapes %v, share %g; want %v, 1", gr.Shapes, gr.Share, want)
	}
	if math.Abs(gr.ToolShare-0.4) > 1e-9 { // 400 tool waits of 1000
		t.Errorf("tool share %g, want 0.4", gr.ToolShare)
	}
	kinds := map[string]GraphKind{}
	for _, k := range gr.ByKind {
		kinds[k.Kind] = k
	}
	for kind, wantS := range map[string]float64{"chain": 2, "fan-out": 0.1, "join": 0.5} {
		k, ok := kinds[kind]
		if !ok || math.Abs(k.DelayS.Quantile(0.5)-wantS) > 1e-9 {
			t.Errorf("%s: median wait %v, want %g s", kind, k.DelayS.Quantile(0.5), wantS)
		}
	}
	// The chain's parent took 0.5 s (2.5 s gap, 2 s tool), the planner 0.5 s.
	if gr.ServiceS == nil || math.Abs(gr.ServiceS.Quantile(0.5)-0.5) > 1e-9 {
		t.Errorf("service %+v, want 0.5 s", gr.ServiceS)
	}
	var rows []trace.Request
	if _, err := Generate(context.Background(), m, GenerateOptions{Duration: time.Hour, Seed: 2}, func(r trace.Request) error {
		rows = append(rows, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]trace.Request{}
	sessions := map[string][]trace.Request{}
	for _, r := range rows {
		for _, p := range r.ParentIDs {
			parent, ok := seen[p]
			if !ok || parent.SessionID != r.SessionID || parent.TS > r.TS {
				t.Fatalf("%s names parent %s, not emitted before it in its session", r.RequestID, p)
			}
		}
		seen[r.RequestID] = r
		sessions[r.SessionID] = append(sessions[r.SessionID], r)
	}
	counts := map[int]int{}
	for id, s := range sessions {
		counts[len(s)]++
		if len(s) == 4 && (len(s[3].ParentIDs) != 3 || s[3].ThinkTimeMs == nil || math.Abs(*s[3].ThinkTimeMs-500) > 1e-6) {
			t.Errorf("session %s: join %+v, want 3 parents and 500 ms", id, s[3])
		}
	}
	if counts[3]+counts[4] != len(sessions) || counts[3] < len(sessions)/3 || counts[4] < len(sessions)/3 {
		t.Errorf("sessions by size %v, want only chains of 3 and fan-outs of 4, about half each", counts)
	}
}

// TestFitAgentGraphsIsDeterministic fits more sessions than the shape
// sample holds, twice: the same model both times, whatever order the
// open sessions close in.
func TestFitAgentGraphsIsDeterministic(t *testing.T) {
	dir := writeBucket(t, agentRows(3*maxGraphShapes), &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	var first []GraphShape
	for i := range 3 {
		m, err := Fit(context.Background(), dir, FitOptions{NoLatent: true})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = m.Sessions.Graph.Shapes
		} else if !slices.Equal(m.Sessions.Graph.Shapes, first) {
			t.Fatalf("fit %d: shapes %v, first fit %v", i, m.Sessions.Graph.Shapes, first)
		}
	}
}

// TestValidateGraphsOnOneSide: a workload without agent graphs fails the
// graph checks against a trace with them (KS of an empty sample is no
// evidence of a match).
func TestValidateGraphsOnOneSide(t *testing.T) {
	rows := agentRows(40)
	real := writeBucket(t, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	for i := range rows {
		rows[i].ParentIDs, rows[i].SessionID = nil, ""
	}
	syn := writeBucket(t, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	v, err := Validate(context.Background(), real, syn, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"graph_fanout_ks", "graph_delay_ks", "graph_growth_ks"} {
		i := slices.IndexFunc(v.Checks, func(c Check) bool { return c.Name == name })
		if i < 0 || v.Checks[i].Diff != 1 || v.Checks[i].Pass {
			t.Errorf("%s: %+v, want a failing diff of 1", name, v.Checks)
		}
	}
}

// TestShardedFitKeepsAgentGraphs fits agentRows in two shards through
// partial files and merges them: the graph laws survive the files.
func TestShardedFitKeepsAgentGraphs(t *testing.T) {
	dir := writeBucket(t, agentRows(400), &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	var paths []string
	for shard := range 2 {
		p, err := FitPartial(context.Background(), dir, FitOptions{NoLatent: true}, shard, 2)
		if err != nil {
			t.Fatal(err)
		}
		path := fmt.Sprintf("%s/part-%d.json", t.TempDir(), shard)
		if err := WritePartial(path, p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	m, err := FitMerged(context.Background(), paths, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	gr := m.Sessions.Graph
	if gr == nil || gr.Sessions < 398 || len(gr.ByKind) != 3 || gr.ServiceS == nil {
		t.Fatalf("merged graph model %+v; want about 400 sessions, three kinds and a service law", gr)
	}
}
