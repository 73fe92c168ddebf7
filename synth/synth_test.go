package synth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

func TestDispersionIndexHandComputed(t *testing.T) {
	// Windows of 1 s over [0, 4): counts 3, 1, 0, 0 → mean 1, variance
	// (4+0+1+1)/3 = 2, index 2.
	ts := []float64{0.1, 0.2, 0.3, 1.5}
	if got := DispersionIndex(ts, 0, 4, 1); math.Abs(got-2) > 1e-12 {
		t.Errorf("index %v, want 2", got)
	}
}

func TestLRUHitRatesHandComputed(t *testing.T) {
	// Blocks A B | A C | B: with room for 2 blocks, A hits (A,B in cache),
	// C evicts B, B misses → 1 hit of 5. With room for 3: A and B hit → 2/5.
	blocks := [][]int64{{1, 2}, {1, 3}, {2}}
	got := lruHitRates(blocks, 1, []float64{2, 3})
	if got[0] != 0.2 || got[1] != 0.4 {
		t.Errorf("hit rates %v, want [0.2 0.4]", got)
	}
}

// TestMarginalKeepsAtoms checks that a value carrying mass (a context cap)
// comes back with its share, not smeared by interpolation.
func TestMarginalKeepsAtoms(t *testing.T) {
	h := histogram{}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 9400 {
		h[1+rng.Int64N(7000)]++
	}
	h[7680] += 600 // 6% at the cap
	m := h.marginal(257)
	hits := 0
	for range 100000 {
		if m.Quantile(rng.Float64()) == 7680 {
			hits++
		}
	}
	if share := float64(hits) / 100000; math.Abs(share-0.06) > 0.005 {
		t.Errorf("cap share %.4f, want 0.06", share)
	}
}

// sessionFixture writes sessions with known turns per session (1 + a
// geometric of mean 2) and think times (exponential, mean 20 s), each turn's
// input holding the history.
func sessionFixture(t *testing.T, sessions int) string {
	rng := rand.New(rand.NewPCG(5, 5))
	var rows []trace.Request
	ts := 0.0
	for s := range sessions {
		ts += rng.ExpFloat64() * 2
		turns := 1
		for rng.Float64() < 2.0/3 {
			turns++
		}
		in, at := int64(200+rng.IntN(800)), ts
		for k := 1; k <= turns; k++ {
			out := int64(20 + rng.IntN(200))
			think := rng.ExpFloat64() * 20000
			r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d-%d", s, k), SessionID: fmt.Sprintf("s%d", s), Turn: int32(k - 1)},
				TS: int64(at * 1e6), Shape: trace.Shape{InputTokens: in, OutputTokens: out, API: trace.APIChat}}
			if k > 1 {
				r.ThinkTimeMs = &think
			}
			rows = append(rows, r)
			at += think / 1000
			in += out + int64(50+rng.IntN(100))
		}
	}
	return writeBucket(t, rows, nil)
}

func TestSessionsFitAndRegenerate(t *testing.T) {
	real := sessionFixture(t, 3000)
	m, err := Fit(context.Background(), real, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	s := m.Sessions
	if s == nil {
		t.Fatal("no session model fitted from multi-turn sessions")
	}
	if math.Abs(s.ThinkS.Mean-20) > 1.5 {
		t.Errorf("think time mean %.1f s, want about 20", s.ThinkS.Mean)
	}
	if math.Abs(s.Turns.Mean-3) > 0.15 {
		t.Errorf("turns per session mean %.2f, want about 3", s.Turns.Mean)
	}
	gen := generateBucket(t, m, GenerateOptions{Seed: 3})
	v, err := Validate(context.Background(), real, gen, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ks *Check
	for i := range v.Checks {
		if v.Checks[i].Name == "session_turns_ks" {
			ks = &v.Checks[i]
		}
	}
	if ks == nil || ks.Diff > 0.05 {
		t.Fatalf("session-length KS %+v, want ≤ 0.05", ks)
	}
	t.Logf("session-length KS %.4f", ks.Diff)
	// Later turns hold the history: input grows and the prefix repeats.
	b, _ := trace.OpenBucket(gen)
	turns := map[string][]trace.Request{}
	b.Scan(context.Background(), func(r *trace.Request) error {
		if r.SessionID != "" {
			turns[r.SessionID] = append(turns[r.SessionID], *r)
		}
		return nil
	})
	for id, rs := range turns {
		for k := 1; k < len(rs); k++ {
			if rs[k].Turn != rs[k-1].Turn+1 || rs[k].InputTokens <= rs[k-1].InputTokens+rs[k-1].OutputTokens || rs[k].ThinkTimeMs == nil {
				t.Fatalf("session %s turn %d does not extend turn %d: %+v then %+v", id, rs[k].Turn, rs[k-1].Turn, rs[k-1].Shape, rs[k].Shape)
			}
		}
	}
}

func hashTree(t *testing.T, dir string) string {
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %x\n", rel, sha256.Sum256(b))
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestGenerateIsDeterministic writes the same workload twice (and once with
// another seed) through GenerateToBucket and compares every byte.
func TestGenerateIsDeterministic(t *testing.T) {
	m, err := Fit(context.Background(), sampleBucket(t, "mooncake-synthetic"), FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.json")
	if err := WriteModel(path, m); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() > MaxModelBytes {
		t.Errorf("model.json is %d bytes", fi.Size())
	}
	sc, err := ParseScenario("flash-crowd:at=60s,for=30s,factor=3")
	if err != nil {
		t.Fatal(err)
	}
	gen := func(seed uint64) string {
		out := filepath.Join(t.TempDir(), "w")
		if _, err := GenerateToBucket(context.Background(), path, out, GenerateOptions{Seed: seed, Duration: 3 * 60e9, Scenarios: []Scenario{sc}}, false); err != nil {
			t.Fatal(err)
		}
		return hashTree(t, out)
	}
	a, b, c := gen(9), gen(9), gen(10)
	if a != b {
		t.Error("the same model, options and seed gave different files")
	}
	if a == c {
		t.Error("different seeds gave identical files")
	}
}

// readRows returns a bucket's rows.
func readRows(t *testing.T, dir string) []trace.Request {
	b, err := trace.OpenBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rows []trace.Request
	if err := b.Scan(context.Background(), func(r *trace.Request) error { rows = append(rows, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestScenarios generates each scenario and checks its effect on the rows
// it labels against the rows outside its window.
func TestScenarios(t *testing.T) {
	m, err := Fit(context.Background(), sampleBucket(t, "mooncake-synthetic"), FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	const dur = 6 * 60e9
	inWindow := func(r trace.Request, name string) bool { return strings.Contains(r.Phase, name) }
	count := func(rows []trace.Request, f func(trace.Request) bool) (n int) {
		for _, r := range rows {
			if f(r) {
				n++
			}
		}
		return n
	}
	rate := func(rows []trace.Request, from, to float64) float64 {
		start := trace.DefaultStart.UnixMicro()
		return float64(count(rows, func(r trace.Request) bool {
			s := float64(r.TS-start) / 1e6
			return s >= from && s < to
		})) / (to - from)
	}
	for _, tc := range []struct {
		spec  string
		check func(t *testing.T, rows []trace.Request)
	}{
		{"flash-crowd:at=120s,for=60s,factor=5", func(t *testing.T, rows []trace.Request) {
			in, out := rate(rows, 120, 180), rate(rows, 0, 120)
			if in < 3*out {
				t.Errorf("rate in the crowd %.1f/s, before %.1f/s: want about 5x", in, out)
			}
		}},
		{"ramp:rates=2/8,step=60s,gap=30s", func(t *testing.T, rows []trace.Request) {
			r1, gap, r2 := rate(rows, 0, 60), rate(rows, 60, 90), rate(rows, 90, 150)
			if math.Abs(r1-2) > 0.6 || gap != 0 || math.Abs(r2-8) > 1.5 {
				t.Errorf("ramp rates %.2f, gap %.2f, %.2f; want 2, 0, 8", r1, gap, r2)
			}
			if n := count(rows, func(r trace.Request) bool { return r.Phase == "step-2" }); n == 0 {
				t.Error("no rows labelled step-2")
			}
		}},
		{"long-context-storm:at=120s,for=60s,quantile=0.9", func(t *testing.T, rows []trace.Request) {
			var in, out []float64
			for _, r := range rows {
				if inWindow(r, "long-context-storm") {
					in = append(in, float64(r.InputTokens))
				} else {
					out = append(out, float64(r.InputTokens))
				}
			}
			slices.Sort(in)
			slices.Sort(out)
			if rank.Percentile(in, 0.5) < rank.Percentile(out, 0.9)*0.95 {
				t.Errorf("storm input p50 %.0f is not in the tail (p90 outside %.0f)", rank.Percentile(in, 0.5), rank.Percentile(out, 0.9))
			}
		}},
		{"cold-cache", func(t *testing.T, rows []trace.Request) {
			var blocks [][]int64
			for _, r := range rows {
				blocks = append(blocks, r.PrefixBlocks)
			}
			if h := lruHitRates(blocks, 512, []float64{1e12})[0]; h != 0 {
				t.Errorf("cold cache hit rate %.3f, want 0", h)
			}
		}},
		{"hot-prefix-shift:at=180s", func(t *testing.T, rows []trace.Request) {
			early := map[int64]bool{}
			start := trace.DefaultStart.UnixMicro()
			for _, r := range rows {
				if float64(r.TS-start)/1e6 < 180 {
					for _, b := range r.PrefixBlocks {
						early[b] = true
					}
				} else if len(r.PrefixBlocks) > 0 && early[r.PrefixBlocks[0]] {
					t.Fatalf("row at %.0f s reuses a prefix from before the shift", float64(r.TS-start)/1e6)
				}
			}
		}},
		{"cancel-storm:at=60s,for=60s,share=0.5,after_tokens=8", func(t *testing.T, rows []trace.Request) {
			in := count(rows, func(r trace.Request) bool { return inWindow(r, "cancel-storm") })
			c := count(rows, func(r trace.Request) bool { return r.CancelAfterTokens != nil && *r.CancelAfterTokens == 8 })
			outside := count(rows, func(r trace.Request) bool { return !inWindow(r, "cancel-storm") && r.CancelAfterTokens != nil })
			if share := float64(c) / float64(in); math.Abs(share-0.5) > 0.1 || outside != 0 {
				t.Errorf("cancel share %.2f in window (want 0.5), %d outside", share, outside)
			}
		}},
		{"subagent-storm:at=60s,for=60s,share=0.5,width=4,tool_ms=80", func(t *testing.T, rows []trace.Request) {
			byID := map[string]int{}
			for i, r := range rows {
				byID[r.RequestID] = i
			}
			planners, firsts := 0, 0
			for i, r := range rows {
				if r.Role == trace.RoleSubAgent || len(r.ParentIDs) > 0 {
					continue
				}
				if inWindow(r, "subagent-storm") {
					firsts++
				}
				if r.Role != trace.RolePlanner {
					continue
				}
				planners++
				// Its 4 sub-agents wait on it after the tool's 80 ms; its
				// join, right after them, waits on the 4.
				if i+5 >= len(rows) {
					t.Fatalf("planner %s is not followed by its graph", r.RequestID)
				}
				var subs []string
				for _, s := range rows[i+1 : i+5] {
					if s.Role != trace.RoleSubAgent || !slices.Equal(s.ParentIDs, []string{r.RequestID}) || s.ToolMs == nil || *s.ToolMs != 80 || s.SessionID != r.SessionID || s.SessionID == "" {
						t.Fatalf("after planner %s: %+v", r.RequestID, s)
					}
					subs = append(subs, s.RequestID)
				}
				if join := rows[i+5]; !slices.Equal(join.ParentIDs, subs) || join.InputTokens < r.InputTokens+4*64 {
					t.Fatalf("planner %s's join: parents %v input %d", r.RequestID, join.ParentIDs, join.InputTokens)
				}
				if err := rows[i+5].Validate(); err != nil {
					t.Fatal(err)
				}
			}
			if share := float64(planners) / float64(firsts); firsts < 50 || math.Abs(share-0.5) > 0.15 {
				t.Errorf("%d planners of %d requests in the window (%.2f); want about half", planners, firsts, share)
			}
		}},
		{"long-horizon:at=60s,for=60s,share=0.2,turns=6,tool_result=500", func(t *testing.T, rows []trace.Request) {
			loops := 0
			for i, r := range rows {
				if r.Role != trace.RolePlanner {
					continue
				}
				loops++
				// Five tool follow-ups, each waiting on the one before after
				// 500 ms, its input the one before's input and output and
				// the tool's 500 tokens.
				prev := r
				for _, c := range rows[i+1 : i+6] {
					if c.Role != trace.RoleToolFollowUp || !slices.Equal(c.ParentIDs, []string{prev.RequestID}) || c.ToolMs == nil || *c.ToolMs != 500 ||
						c.InputTokens != min(prev.InputTokens+prev.OutputTokens+500, 200_000) || c.SessionID != r.SessionID || c.SessionID == "" {
						t.Fatalf("after %s: %+v", prev.RequestID, c)
					}
					if err := c.Validate(); err != nil {
						t.Fatal(err)
					}
					prev = c
				}
			}
			if loops == 0 {
				t.Error("no agent loop in the window")
			}
		}},
		{"slow-consumer:share=0.3,read_delay_ms=150", func(t *testing.T, rows []trace.Request) {
			c := count(rows, func(r trace.Request) bool { return r.ReadDelayMs != nil && *r.ReadDelayMs == 150 })
			if share := float64(c) / float64(len(rows)); math.Abs(share-0.3) > 0.05 {
				t.Errorf("slow share %.2f, want 0.3", share)
			}
		}},
		{"mixed-sampling", func(t *testing.T, rows []trace.Request) {
			greedy := count(rows, func(r trace.Request) bool { return r.Temperature != nil && *r.Temperature == 0 })
			js := count(rows, func(r trace.Request) bool { return slices.Contains(r.Features, "json_schema") })
			lp := count(rows, func(r trace.Request) bool { return slices.Contains(r.Features, "logprobs") })
			for name, n := range map[string]int{"greedy": greedy, "json_schema": js, "logprobs": lp} {
				if share := float64(n) / float64(len(rows)); math.Abs(share-0.25) > 0.05 {
					t.Errorf("%s share %.2f, want 0.25", name, share)
				}
			}
		}},
		{"version-switch:at=180s,to=model-b", func(t *testing.T, rows []trace.Request) {
			start := trace.DefaultStart.UnixMicro()
			for _, r := range rows {
				if after := float64(r.TS-start)/1e6 >= 180; after != (r.Model == "model-b") {
					t.Fatalf("row at %.0f s has model %q", float64(r.TS-start)/1e6, r.Model)
				}
			}
		}},
		{"adapter-churn:adapters=8,exponent=1.5,rotate=60s", func(t *testing.T, rows []trace.Request) {
			// The hottest adapter of each minute: rank 1 moves by 8/4 = 2
			// adapters a minute, so minute m's favourite is churn-(2m mod 8).
			start := trace.DefaultStart.UnixMicro()
			by := map[int]map[string]int{}
			for _, r := range rows {
				m := int(float64(r.TS-start) / 60e6)
				if by[m] == nil {
					by[m] = map[string]int{}
				}
				by[m][r.Adapter]++
			}
			for m := range 6 {
				best, n := "", 0
				for a, k := range by[m] {
					if k > n {
						best, n = a, k
					}
				}
				if want := fmt.Sprintf("churn-%d", 2*m%8); best != want || len(by[m]) < 6 {
					t.Errorf("minute %d: hottest adapter %s of %d, want %s among most of 8", m, best, len(by[m]), want)
				}
			}
		}},
		{"image-storm:at=60s,for=60s,share=1,images=3,width=2048,height=1024", func(t *testing.T, rows []trace.Request) {
			ids := map[int64]bool{}
			for _, r := range rows {
				storm := inWindow(r, "image-storm")
				if storm != (r.ImageCount == 3) || storm && (r.ImageWidthsPx[2] != 2048 || r.ImageHeightsPx[0] != 1024 || !slices.Contains(r.Features, "image")) {
					t.Fatalf("row in storm %v has %d images %v×%v, features %v", storm, r.ImageCount, r.ImageWidthsPx, r.ImageHeightsPx, r.Features)
				}
				for _, id := range r.ImageIDs {
					if ids[id] {
						t.Fatal("an image-storm image repeats: each must be new")
					}
					ids[id] = true
				}
			}
		}},
		{"schema-storm:share=0.5,schemas=0,schema_tokens=300", func(t *testing.T, rows []trace.Request) {
			ids := map[int64]bool{}
			n := 0
			for _, r := range rows {
				if r.OutputFormat == "json_schema" {
					n++
					if r.SchemaTokens != 300 || ids[r.SchemaID] {
						t.Fatalf("schema %d of %d tokens: want a new schema of 300 tokens each time", r.SchemaID, r.SchemaTokens)
					}
					ids[r.SchemaID] = true
				}
			}
			if share := float64(n) / float64(len(rows)); math.Abs(share-0.5) > 0.05 {
				t.Errorf("schema share %.2f, want 0.5", share)
			}
		}},
		{"tenant-skew:share=0.8,tenant=hot", func(t *testing.T, rows []trace.Request) {
			c := count(rows, func(r trace.Request) bool { return r.Tenant == "hot" })
			if share := float64(c) / float64(len(rows)); math.Abs(share-0.8) > 0.05 {
				t.Errorf("hot tenant share %.2f, want 0.8", share)
			}
		}},
	} {
		t.Run(strings.SplitN(tc.spec, ":", 2)[0], func(t *testing.T) {
			sc, err := ParseScenario(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			d := 0.0
			if sc.Name != ScenarioRamp {
				d = dur
			}
			rows := readRows(t, generateBucket(t, m, GenerateOptions{Seed: 4, Duration: timeDuration(d), Scenarios: []Scenario{sc}}))
			if n := count(rows, func(r trace.Request) bool { return r.Phase != "" }); n == 0 {
				t.Fatal("no row labelled with the scenario's phase")
			}
			tc.check(t, rows)
		})
	}
}

func TestParseScenarioErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"flash-mob", "unknown scenario"},
		{"flash-crowd:factor", "not key=value"},
		{"flash-crowd:colour=red", "unknown field"},
		{"cancel-storm:share=2", "share"},
		{"subagent-storm:width=300", "width"},
		{"long-horizon:turns=1", "turns"},
		{"subagent-storm:tool_ms=-1", "tool_ms"},
		{"version-switch:at=1m", "to=MODEL"},
		{"ramp:rates=1/-2", "positive"},
		{"ramp:rates=1/2,factors=1/2/3", "not both"}, // once an index out of range in bound
	} {
		if _, err := ParseScenario(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
	path := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(path, []byte("scenarios:\n  - name: flash-crowd\n    at: 1m\n    facter: 3\n"), 0o644)
	if _, err := ReadScenarioFile(path); err == nil || !strings.Contains(err.Error(), "facter") {
		t.Errorf("a misspelt key: %v", err)
	}
	os.WriteFile(path, []byte("scenarios:\n  - name: flash-crowd\n    at: 1m\n    for: 30s\n    factor: 3\n  - name: cold-cache\n"), 0o644)
	if s, err := ReadScenarioFile(path); err != nil || len(s) != 2 || s[0].For.Seconds() != 30 {
		t.Errorf("a good file: %v %+v", err, s)
	}
}

func TestRateAndTimeScale(t *testing.T) {
	m, err := Fit(context.Background(), sampleBucket(t, "mooncake-synthetic"), FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	base := len(readRows(t, generateBucket(t, m, GenerateOptions{Seed: 2, Duration: 300e9})))
	double := len(readRows(t, generateBucket(t, m, GenerateOptions{Seed: 2, Duration: 300e9, RateScale: 2})))
	if r := float64(double) / float64(base); math.Abs(r-2) > 0.2 {
		t.Errorf("rate scale 2 gave %.2fx the requests", r)
	}
	// A time scale shortens the default duration by the same factor.
	o := GenerateOptions{TimeScale: 4}
	if got, want := o.EffectiveDuration(m).Seconds(), m.Source.SpanS()/4; math.Abs(got-want) > 1e-6 {
		t.Errorf("time-scaled duration %v s, want %v", got, want)
	}
}

func TestReadModelRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage.json": "not json",
		"old.json":     `{"version": 1}`,
		"rate.json":    `{"version": 2, "arrivals": {"intensity": {"kind": "piecewise", "mean_rate_per_s": -1}}}`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := ReadModel(p); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v should name the file", name, err)
		}
	}
}
