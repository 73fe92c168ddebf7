package synth

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
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
