package synth

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestScenarioRegistryMatchesDocs holds the registry and docs/scenarios.md
// to one list: every registered scenario has a row in the docs' table and
// every row names a registered scenario.
func TestScenarioRegistryMatchesDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "scenarios.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(documented)
	if names := ScenarioNames(); !slices.Equal(names, documented) {
		t.Errorf("registered scenarios %v, documented %v", names, documented)
	}
}

// TestScenarioKeysBelongToTheirScenario wants a key given to a scenario
// that does not take it refused, naming the key, the scenario and the
// scenarios that do take it.
func TestScenarioKeysBelongToTheirScenario(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"flash-crowd:share=0.5", []string{"flash-crowd", `"share"`, "cancel-storm", "tenant-skew"}},
		{"cold-cache:factor=2", []string{"cold-cache", `"factor"`, "flash-crowd", "long-context-storm"}},
		{"tenant-skew:to=model-b", []string{"tenant-skew", `"to"`, "version-switch"}},
		{"ramp:quantile=0.5", []string{"ramp", `"quantile"`, "long-context-storm"}},
		{"flash-crowd:colour=red", []string{"flash-crowd", `"colour"`, "unknown field", "factor"}},
	} {
		_, err := ParseScenario(tc.spec)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one containing %q", tc.spec, err, w)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(path, []byte("scenarios:\n  - name: cold-cache\n  - name: slow-consumer\n    after_tokens: 8\n"), 0o644)
	if _, err := ReadScenarioFile(path); err == nil || !strings.Contains(err.Error(), `scenario 2: slow-consumer: unknown field "after_tokens": a key of cancel-storm`) {
		t.Errorf("a cancel-storm key in a slow-consumer: %v", err)
	}
	// Every key of every kind, given to each kind that lacks it.
	for _, owner := range ScenarioNames() {
		for _, k := range paramKeys(scenarioKinds[owner]()) {
			for _, other := range ScenarioNames() {
				if hasKey(paramKeys(scenarioKinds[other]()), k) {
					continue
				}
				var s Scenario
				err := json.Unmarshal([]byte(`{"name":"`+other+`","`+k+`":1}`), &s)
				if err == nil || !strings.Contains(err.Error(), other+`: unknown field "`+k+`"`) || !strings.Contains(err.Error(), owner) {
					t.Errorf("%s given %s's key %s: error %v, want one naming both", other, owner, k, err)
				}
			}
		}
	}
}

// TestScenarioJSONRoundTrip wants a scenario written flat, window first
// and then its kind's keys with their defaults filled (the manifest
// records it so), and read back equal.
func TestScenarioJSONRoundTrip(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"cold-cache:at=10s", `{"name":"cold-cache","at":"10s"}`},
		{"cancel-storm:at=1m,for=30s,after_tokens=8", `{"name":"cancel-storm","at":"1m0s","for":"30s","share":0.5,"after_tokens":8}`},
		{"ramp:rates=2/8,step=20s", `{"name":"ramp","rates":[2,8],"step":"20s","gap":"20s"}`},
		{"mixed-sampling", `{"name":"mixed-sampling","sampling":{"greedy":1,"json_schema":1,"logprobs":1,"sampling":1}}`},
	} {
		s, err := ParseScenario(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(s)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: wrote %s (%v), want %s", tc.spec, b, err, tc.want)
		}
		var back Scenario
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: read back: %v", tc.spec, err)
		}
		if !reflect.DeepEqual(back, s) {
			t.Errorf("%s: read back %+v, want %+v", tc.spec, back, s)
		}
	}
}

// TestScenarioCheckRefusesOtherKindsParams wants parameters of one kind
// under another's name refused: the name labels the rows they shape.
func TestScenarioCheckRefusesOtherKindsParams(t *testing.T) {
	s := Scenario{Name: ScenarioRamp, Params: &FlashCrowd{Factor: 2}}
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "FlashCrowd") {
		t.Errorf("ramp holding flash-crowd parameters: %v", err)
	}
}

// TestToolLatencyShift generates the same agent workload with and without
// tool-latency-shift (same seed) and compares them row by row: a tool delay
// in the shift's window (a graph's rows judged at their head's arrival, the
// ts they hold) is reshaped exactly, one outside it or a row without one is
// not, and nothing else of any row changes but the phase label.
func TestToolLatencyShift(t *testing.T) {
	m, err := Fit(context.Background(), sampleBucket(t, "mooncake-synthetic"), FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	start := trace.DefaultStart.UnixMicro()
	gen := func(specs ...string) []trace.Request {
		var scs []Scenario
		for _, spec := range specs {
			sc, err := ParseScenario(spec)
			if err != nil {
				t.Fatal(err)
			}
			scs = append(scs, sc)
		}
		var rows []trace.Request
		if _, err := Generate(context.Background(), m, GenerateOptions{Seed: 11, Duration: 3 * 60e9, Scenarios: scs},
			func(r trace.Request) error { rows = append(rows, r); return nil }); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	for _, tc := range []struct {
		name, graph, shift string
		from, to           float64 // the shift's window, s
		want               func(ms float64) float64
		shiftFirst         bool // listed before the graph scenario
	}{
		{"long-horizon factor 3", "long-horizon:share=0.2,turns=4", "tool-latency-shift:at=60s,for=60s,factor=3", 60, 120,
			func(ms float64) float64 { return 3 * ms }, false},
		{"sub-agents add_ms", "subagent-storm:share=0.3,width=3,tool_ms=80", "tool-latency-shift:at=30s,for=90s,add_ms=120", 30, 120,
			func(ms float64) float64 { return ms + 120 }, false},
		{"faster, floored at 0", "long-horizon:share=0.2,turns=3,tool_ms=100", "tool-latency-shift:at=90s,factor=0.5,add_ms=-70", 90, math.Inf(1),
			func(ms float64) float64 { return max(0, ms*0.5-70) }, false},
		{"default factor 4", "long-horizon:share=0.1,turns=3", "tool-latency-shift", 0, math.Inf(1),
			func(ms float64) float64 { return 4 * ms }, false},
		{"listed first", "long-horizon:share=0.2,turns=4", "tool-latency-shift:at=60s,for=60s,factor=3", 60, 120,
			func(ms float64) float64 { return 3 * ms }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs := []string{tc.graph, tc.shift}
			if tc.shiftFirst {
				specs = []string{tc.shift, tc.graph}
			}
			base, shifted := gen(tc.graph), gen(specs...)
			if len(base) != len(shifted) {
				t.Fatalf("%d rows without the shift, %d with it", len(base), len(shifted))
			}
			var in, out int
			for i := range base {
				b, s := base[i], shifted[i]
				at := float64(s.TS-start) / 1e6
				inside := at >= tc.from && at < tc.to
				if labelled := strings.Contains(s.Phase, ScenarioToolLatencyShift); labelled != inside {
					t.Fatalf("row %s at %.3f s: phase %q, in the window %v", s.RequestID, at, s.Phase, inside)
				}
				switch {
				case (b.ToolMs == nil) != (s.ToolMs == nil):
					t.Fatalf("row %s: tool_ms %v without the shift, %v with it", s.RequestID, b.ToolMs, s.ToolMs)
				case b.ToolMs == nil:
				case inside:
					if want := tc.want(*b.ToolMs); *s.ToolMs != want {
						t.Fatalf("row %s at %.3f s: tool_ms %v, want %v (from %v)", s.RequestID, at, *s.ToolMs, want, *b.ToolMs)
					}
					in++
				default:
					if *s.ToolMs != *b.ToolMs {
						t.Fatalf("row %s at %.3f s, outside the window: tool_ms %v, want %v", s.RequestID, at, *s.ToolMs, *b.ToolMs)
					}
					out++
				}
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				s.ToolMs, s.Phase = b.ToolMs, b.Phase
				if !reflect.DeepEqual(s, b) {
					t.Fatalf("row %d differs beyond tool_ms and phase:\n%+v\n%+v", i, s, b)
				}
			}
			if in == 0 || out == 0 && tc.from > 0 {
				t.Errorf("%d tool delays in the window, %d outside: want some of each", in, out)
			}
		})
	}
}

// TestToolLatencyShiftParams wants the defaults filled (factor 4, or 1
// beside add_ms alone) and a bad value refused, naming its key.
func TestToolLatencyShiftParams(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"tool-latency-shift", `{"name":"tool-latency-shift","factor":4}`},
		{"tool-latency-shift:add_ms=250", `{"name":"tool-latency-shift","factor":1,"add_ms":250}`},
		{"tool-latency-shift:at=1m,for=2m,factor=0.5,add_ms=-20", `{"name":"tool-latency-shift","at":"1m0s","for":"2m0s","factor":0.5,"add_ms":-20}`},
		{"tool-latency-shift:factor=-1", "factor"},
		{"tool-latency-shift:factor=1001", "factor"},
		{"tool-latency-shift:add_ms=1e12", "add_ms"},
		{"tool-latency-shift:add_ms=-1e12", "add_ms"},
		{"tool-latency-shift:add_ms=fast", "add_ms"},
		{"tool-latency-shift:tool_ms=5", `unknown field "tool_ms": a key of long-horizon, subagent-storm`},
		{"tool-latency-shift:for=-1s", "at and for"},
	} {
		s, err := ParseScenario(tc.spec)
		if strings.HasPrefix(tc.want, "{") {
			b, _ := json.Marshal(s)
			if err != nil || string(b) != tc.want {
				t.Errorf("%s: %s (%v), want %s", tc.spec, b, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ScenarioToolLatencyShift) {
			t.Errorf("%s: error %v, want one naming %s and %q", tc.spec, err, ScenarioToolLatencyShift, tc.want)
		}
	}
	for _, p := range []*ToolLatencyShift{{Factor: math.NaN()}, {AddMs: math.Inf(1)}} {
		s := Scenario{Name: ScenarioToolLatencyShift, Params: p}
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), "finite") {
			t.Errorf("%+v: error %v, want one refusing a number that is not finite", p, err)
		}
	}
}
