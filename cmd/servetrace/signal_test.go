package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

// cliChildEnv makes the test binary run the CLI's main with the JSON-encoded
// arguments, so a test can send it real signals.
const cliChildEnv = "SERVETRACE_CLI_CHILD"

func TestMain(m *testing.M) {
	if args := os.Getenv(cliChildEnv); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			os.Exit(3)
		}
		os.Args = append([]string{"servetrace"}, argv...)
		main()
		return
	}
	dir, err := os.MkdirTemp("", "servetrace-models-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	modelCacheDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestSignalsLeaveAnalyzableRunDirs sends SIGINT, SIGTERM and SIGKILL to a
// replay in flight: the first two give a run dir marked incomplete (exit
// 130), SIGKILL leaves the provisional run.json and every closed results
// part; analyze reads all three and says they are partial.
func TestSignalsLeaveAnalyzableRunDirs(t *testing.T) {
	url := startFastSim(t, nil)
	dir := t.TempDir()
	wl := workloadViaCLI(t, dir, "azure-code-2023", "60s")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			run := filepath.Join(dir, "run-"+strings.ReplaceAll(sig.String(), " ", "-"))
			cmd, stderr, exited := startCLIChild(t, "replay", wl, "--target", url, "--out", run, "--rotate-every", "200ms", "--grace", "1s")
			// Signal once the replay has written its provisional run.json and
			// closed a results part: a fresh child under -race on a busy
			// host can take seconds to get there. The deadline fails a hang.
			if err := waitForRunDir(run, exited, 60*time.Second); err != nil {
				cmd.Process.Kill()
				<-exited
				t.Fatalf("%v; stderr:\n%s", err, stderr.String())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := <-exited
			code := cmd.ProcessState.ExitCode()
			switch sig {
			case syscall.SIGKILL:
				if err == nil {
					t.Fatal("a killed replay exited cleanly")
				}
			default:
				if code != 130 || !strings.Contains(stderr.String(), "replay incomplete") {
					t.Fatalf("exit %d, stderr %q; want 130 and 'replay incomplete'", code, stderr.String())
				}
			}
			ri, err := trace.ReadRunInfo(run)
			if err != nil {
				t.Fatalf("no readable run.json after %s: %v", sig, err)
			}
			if ri.Complete {
				t.Error("an interrupted run is marked complete")
			}
			rows, err := trace.ReadResults(run)
			if err != nil || len(rows) == 0 {
				t.Fatalf("after %s: %d result rows (%v); want the closed parts' rows", sig, len(rows), err)
			}
			rep, err := analyze.Analyze([]string{run}, analyze.Options{Bootstrap: analyze.BootstrapOptions{Resamples: 100}})
			if err != nil {
				t.Fatalf("analyze after %s: %v", sig, err)
			}
			if !strings.Contains(strings.Join(rep.Notes, "\n"), "partial") {
				t.Errorf("analyze does not say the run is partial: %v", rep.Notes)
			}
			t.Logf("%s: exit %d, %d rows kept, scheduled %d", sig, code, len(rows), ri.Scheduled)
		})
	}
}

// startCLIChild starts the CLI with args in a child process (this test
// binary, see TestMain), so that a test can send it real signals; exited
// yields the child's exit.
func startCLIChild(t *testing.T, args ...string) (cmd *exec.Cmd, stderr *bytes.Buffer, exited <-chan error) {
	t.Helper()
	argv, _ := json.Marshal(args)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliChildEnv+"="+string(argv))
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, stderr, done
}

// waitForRunDir waits until run holds run.json and a closed results part,
// or the replay exits (exited yields its error), or d passes.
func waitForRunDir(run string, exited <-chan error, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		parts, _ := filepath.Glob(filepath.Join(run, trace.ResultsDir, "part-*.parquet"))
		if _, err := os.Stat(filepath.Join(run, trace.RunInfoName)); err == nil && len(parts) > 0 {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the replay exited (%v) before it wrote run.json and a results part", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no run.json and results part in %s after %v", run, d)
		}
	}
}

// TestSweepResumesAfterSIGINT interrupts a sweep in its second step with
// SIGINT (exit 130, sweep.json says interrupted), then finishes it with
// --resume: the first step is not run again and the second is rerun.
func TestSweepResumesAfterSIGINT(t *testing.T) {
	url := startFastSim(t, nil)
	dir := t.TempDir()
	wl := workloadViaCLI(t, dir, "azure-code-2023", "60s")
	out := filepath.Join(dir, "sweep")
	// Steps of 8 and 16 requests decide nothing: no extensions, so that
	// each level runs once.
	args := []string{"sweep", wl, "--target", url, "--rates", "4,8", "--step-duration", "2s", "--max-extensions", "0", "--grace", "500ms", "--out", out}
	cmd, stderr, exited := startCLIChild(t, args...)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if rec, err := readSweep(out); err == nil && len(rec.Steps) == 2 && rec.Steps[1].Status == "running" {
			time.Sleep(500 * time.Millisecond) // into the step's schedule
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the sweep exited (%v) before its second step; stderr:\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("no second step after 90 s; stderr:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-exited
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "--resume") {
		t.Fatalf("exit %d, stderr %q; want 130 and a hint to --resume", code, stderr.String())
	}
	rec, err := readSweep(out)
	if err != nil || rec.Status != "interrupted" {
		t.Fatalf("sweep.json after SIGINT: %+v, %v", rec, err)
	}
	first := filepath.Join(out, rec.Steps[0].RunDir, trace.RunInfoName)
	before, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := runCLI(t, append(args, "--resume")...)
	if code != 0 {
		t.Fatalf("--resume: exit %d: %s", code, errOut)
	}
	rec, err = readSweep(out)
	if err != nil || rec.Status != "complete" {
		t.Fatalf("after --resume: %+v, %v", rec, err)
	}
	var done []float64
	for _, s := range rec.Steps {
		if s.Status == "done" {
			done = append(done, s.Level)
		}
	}
	if len(done) != 2 || done[0] != 4 || done[1] != 8 || len(rec.Steps) != 3 || rec.Steps[1].Status != "set-aside" {
		t.Errorf("steps after --resume: %+v", rec.Steps)
	}
	if after, err := os.Stat(first); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("--resume ran the first step again (%v)", err)
	}
	if !strings.Contains(stdout, "configuration A") {
		t.Errorf("the summary: %s", stdout)
	}
}

// sweepRecord is what the test reads of sweep.json.
type sweepRecord struct {
	Status string `json:"status"`
	Steps  []struct {
		Level  float64 `json:"level"`
		Status string  `json:"status"`
		RunDir string  `json:"run_dir"`
	} `json:"steps"`
}

func readSweep(dir string) (*sweepRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		return nil, err
	}
	var r sweepRecord
	return &r, json.Unmarshal(b, &r)
}
