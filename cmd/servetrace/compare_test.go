package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/analyze"
)

// TestCompareCLI replays one workload twice against the simulator with a
// label under test, compares the runs, and then compares runs of different
// workloads, which must be called not comparable.
func TestCompareCLI(t *testing.T) {
	url := startFastSim(t, nil)
	dir := t.TempDir()
	wl := workloadViaCLI(t, dir, "azure-code-2023", "20s")
	wl2 := filepath.Join(dir, "wl2")
	if code, _, errOut := runCLI(t, "generate", filepath.Join(dir, "m.json"), "--duration", "20s", "--seed", "7", "--out", wl2); code != 0 {
		t.Fatal(errOut)
	}
	// The lateness bound is loose on purpose: under -race on a busy CI
	// machine the client can fall 100 ms behind, and saturation is
	// exercised below by marking a run's run.json, not by chance.
	replayRun := func(name, workload, config string) string {
		out := filepath.Join(dir, name)
		if code, _, errOut := runCLI(t, "replay", workload, "--target", url, "--out", out, "--rate", "40", "--max-lateness", "5s", "--label", "config="+config); code != 0 {
			t.Fatalf("replay %s: %s", name, errOut)
		}
		return out
	}
	a, b, other := replayRun("a", wl, "x"), replayRun("b", wl, "y"), replayRun("c", wl2, "y")

	code, out, errOut := runCLI(t, "analyze", "compare", a, b, "--testing", "config", "--json")
	if code != 0 {
		t.Fatalf("compare: %s", errOut)
	}
	var res analyze.Comparison
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Comparable || len(res.Rows) != 6 {
		t.Fatalf("same workload, label under test: comparable %v reasons %v, %d rows", res.Comparable, res.Reasons, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.NA == 0 || r.NB == 0 || r.Verdict == "" {
			t.Errorf("row %+v", r)
		}
	}
	// Without --testing the differing label blocks the verdicts.
	code, out, _ = runCLI(t, "analyze", "compare", a, b)
	if code != 0 || !strings.Contains(out, "NOT COMPARABLE") || !strings.Contains(out, "label config") {
		t.Errorf("an untested label difference was not reported:\n%s", out)
	}
	// Different workloads.
	code, out, _ = runCLI(t, "analyze", "compare", a, other, "--testing", "config")
	if code != 0 || !strings.Contains(out, "different workloads") {
		t.Errorf("different workloads were not reported:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "ttft_ms") && !strings.Contains(line, "inconclusive") {
			t.Errorf("a verdict on incomparable runs: %s", line)
		}
	}
	// The same runs as a (flat) sweep: two steps, a table and a page.
	page := filepath.Join(dir, "env.html")
	code, out, errOut = runCLI(t, "analyze", "envelope", a, other, "--slo", "ttft=5s", "--html", page)
	if code != 0 || !strings.Contains(out, "service envelope") || strings.Count(out, "\n") < 5 {
		t.Errorf("envelope: code %d\n%s%s", code, out, errOut)
	}
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("envelope page: %v", err)
	}
	if code, _, errOut := runCLI(t, "analyze", "envelope", a); code == 0 || !strings.Contains(errOut, "phase") {
		t.Errorf("one run without phases: code %d, %q", code, errOut)
	}
	// A run whose client was saturated blocks the verdicts.
	sat := filepath.Join(dir, "a-saturated")
	if err := os.CopyFS(sat, os.DirFS(a)); err != nil {
		t.Fatal(err)
	}
	runJSON := filepath.Join(sat, "run.json")
	raw, err := os.ReadFile(runJSON)
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	info["client_saturated"] = true
	raw, _ = json.Marshal(info)
	if err := os.WriteFile(runJSON, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(t, "analyze", "compare", sat, b, "--testing", "config")
	if code != 0 || !strings.Contains(out, "saturated client") || !strings.Contains(out, "NOT COMPARABLE") {
		t.Errorf("a saturated client was not reported:\n%s", out)
	}
	// Bad arguments name what is wrong.
	if code, _, errOut := runCLI(t, "analyze", "compare", a); code != 2 || !strings.Contains(errOut, "two sides") {
		t.Errorf("one side: code %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "analyze", "compare", a, dir+"/nope"); code != 2 || !strings.Contains(errOut, "nope") {
		t.Errorf("missing side: code %d, %q", code, errOut)
	}
}
