package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/sweep"
)

// The test binary is not servetrace: the demo's simulator runs as this
// binary re-executed as the CLI (TestMain's cliChildEnv).
func init() {
	simCommand = func(ctx context.Context, args ...string) (*exec.Cmd, error) {
		argv, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), cliChildEnv+"="+string(argv))
		return cmd, nil
	}
}

// TestDemoSimulatorRunsInItsOwnProcess: the demo's simulator is a child
// process that serves on loopback, and stop ends it.
func TestDemoSimulatorRunsInItsOwnProcess(t *testing.T) {
	p, err := startSimProcess(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.cmd.Process.Pid == os.Getpid() {
		t.Fatal("the simulator runs in this process")
	}
	resp, err := http.Get(p.URL + "/v1/models")
	if err != nil {
		p.stop()
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/models: %s", resp.Status)
	}
	p.stop()
	if p.cmd.ProcessState == nil {
		t.Fatal("stop returned before the simulator exited")
	}
	if _, err := http.Get(p.URL + "/v1/models"); err == nil {
		t.Error("the simulator still answers after stop")
	}
}

// TestDemoSimulatorThatFailsSaysWhy: a child that exits before serving
// is reported with what it wrote, not waited on.
func TestDemoSimulatorThatFailsSaysWhy(t *testing.T) {
	orig := simCommand
	defer func() { simCommand = orig }()
	simCommand = func(ctx context.Context, args ...string) (*exec.Cmd, error) {
		return orig(ctx, "sim", "--addr", "192.0.2.1:1") // not loopback, no --allow-remote
	}
	_, err := startSimProcess(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not start") || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("error %v, want one saying the simulator did not start and why", err)
	}
}

// TestDemoSimulatorOutlivesTheThreadThatStartedIt: Linux sends the child
// its parent-death signal when the thread that started it ends, and the Go
// runtime ends the thread of a goroutine that exits locked to it (replay
// encodes its results on such threads). The demo's simulator must serve
// on after the thread its caller ran on is gone.
func TestDemoSimulatorOutlivesTheThreadThatStartedIt(t *testing.T) {
	started := make(chan *simProcess, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		p, err := startSimProcess(context.Background())
		if err != nil {
			t.Error(err)
		}
		started <- p
	}()
	p := <-started
	if p == nil {
		t.FailNow()
	}
	defer p.stop()
	// The thread exits once the goroutine has; give the signal time to land.
	time.Sleep(500 * time.Millisecond)
	resp, err := http.Get(p.URL + "/v1/models")
	if err != nil {
		t.Fatalf("the simulator no longer serves: %v", err)
	}
	resp.Body.Close()
}

// TestLongDemoRunsEndToEnd runs `servetrace demo`, the README's first
// command, as a new user does, on a 5 s workload: every step must succeed
// and every request be answered by the simulator child. Nothing else in
// make test runs the demo whole.
func TestLongDemoRunsEndToEnd(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: runs without -race in make test-timing")
	}
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := runCLI(t, "demo", "--out", dir, "--duration", "5s", "--sweep-step", "2s")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "success rate 100.0%") {
		t.Errorf("demo: not every request answered:\n%s", out)
	}
	// A 5-second workload cannot fill the sweep's steps (make demo's can):
	// the lines must be there, not their verdicts.
	for _, line := range []string{"capacity: the simulator's cost model serves this workload's requests at", "the replay above: a mean",
		"where the time went (the server's spans of"} {
		if !strings.Contains(out, line) {
			t.Errorf("demo: no line %q:\n%s", line, out)
		}
	}
	if m := agentSessionsLine.FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("demo: no agent sessions line with a session in it (%q):\n%s", m, out)
	}
	for _, f := range []string{"model.json", "report.html", "run/run.json", "sweep/sweep.json", "agents/run/run.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("demo left no %s: %v", f, err)
		}
	}
}

// agentSessionsLine is the demo's agentic line, its session count captured.
var agentSessionsLine = regexp.MustCompile(`agent sessions: (\d+) sessions, makespan p50 `)

// TestDemoSessionsLine: the demo's agentic line says the sessions and
// their makespans in seconds, each percentile with its interval or, where
// the sessions cannot bound it above, as a floor; the end-to-end demo test
// finds it by agentSessionsLine.
func TestDemoSessionsLine(t *testing.T) {
	makespans := make([]float64, 40)
	for i := range makespans {
		makespans[i] = 1000 + 50*float64(i) // 1.00 to 2.95 s
	}
	s := &analyze.Sessions{Sessions: 40, Requests: 240, MakespanMs: analyze.Summarize(makespans, []float64{50, 99})}
	got := demoSessionsText(s)
	if m := agentSessionsLine.FindStringSubmatch(got); m == nil || m[1] != "40" {
		t.Errorf("line %q: agentSessionsLine finds %q, want 40 sessions", got, m)
	}
	if !regexp.MustCompile(`, makespan p50 1\.98 s \[1\.[0-9]{2}, 2\.[0-9]{2}\], p99 ≥2\.9[0-9] s$`).MatchString(got) {
		t.Errorf("line %q: want p50 1.98 s with its interval and p99 as a floor", got)
	}
	s.Incomplete = 2
	if got := demoSessionsText(s); !strings.HasSuffix(got, "; 2 with a request not ok left out") {
		t.Errorf("line %q does not count the incomplete sessions", got)
	}
	if got := demoSessionsText(nil); got != "agent sessions: 0 sessions" {
		t.Errorf("no sessions: %q", got)
	}
}

// TestDemoReplayVerdict: the demo's replay disagrees with the sweep only
// where the sweep decided otherwise: meeting the SLO at a mean rate at or
// past a level the sweep failed, or missing it with every window under a
// level that passed; a rate past an undecided level contradicts nothing
// (before, it "met the SLO at a mean rate the sweep failed").
func TestDemoReplayVerdict(t *testing.T) {
	undecided8 := sweep.Result{Bracket: [2]float64{4, 8}, Undecided: []float64{8},
		Levels: []sweep.LevelStat{{Level: 4, Verdict: "pass"}, {Level: 8, Verdict: "undecided"}, {Level: 16, Verdict: "fail"}}}
	failed8 := sweep.Result{Bracket: [2]float64{4, 8}, Levels: []sweep.LevelStat{{Level: 4, Verdict: "pass"}, {Level: 8, Verdict: "fail"}}}
	for _, c := range []struct {
		name          string
		r             sweep.Result
		met           bool
		offered, peak float64
		want, wantNot string
	}{
		{"met past a failing level", failed8, true, 9, 12, "disagrees: it met the SLO at a mean rate the sweep failed (8)", ""},
		{"met past an undecided level", undecided8, true, 9, 12, "does not contradict it: its mean rate is at or past 8, which the sweep left undecided", "failed"},
		{"met past the failing level above an undecided one", undecided8, true, 17, 20, "disagrees: it met the SLO at a mean rate the sweep failed (16)", ""},
		{"missed under a passing level", failed8, false, 2, 3, "disagrees: it missed the SLO though even its busiest window stayed under the limit", ""},
		{"missed in bursts", failed8, false, 3, 9, "agrees: its bursts pass the limit", ""},
		{"met under the limit", failed8, true, 3, 5, "agrees: its rate stays under the limit", ""},
	} {
		got := demoReplayVerdict(c.r, c.met, c.offered, c.peak)
		if got != c.want || (c.wantNot != "" && strings.Contains(got, c.wantNot)) {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
}
