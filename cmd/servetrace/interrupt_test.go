package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// cpuSeconds is the CPU time process pid has used, from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // clock ticks; 100 per second on Linux
}

// TestLongCommandsStopOnSignal interrupts each long command in the middle
// of its work (it has used a second of CPU, and where it writes a bucket
// its staging directory exists) with SIGINT and SIGTERM: it must exit 130
// promptly and leave no output, no staging directory and no lock behind.
// The time to exit is logged; the bound asserted only catches a command
// that ignores the signal.
func TestLongCommandsStopOnSignal(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: run by make test-timing")
	}
	dir := t.TempDir()
	csv := filepath.Join(dir, "big.csv")
	f, err := os.Create(csv)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3_000_000 {
		fmt.Fprintf(w, "%s,%d,%d\n", t0.Add(time.Duration(i)*10*time.Millisecond).Format("2006-01-02 15:04:05.0000000"), 100+i%4000, 1+i%300)
	}
	w.Flush()
	f.Close()
	bucket := filepath.Join(dir, "azure")
	model := filepath.Join(dir, "model.json")
	for _, step := range [][]string{{"convert", "azure-code-2023", "--out", bucket}, {"fit", bucket, "--no-latent", "--out", model}} {
		if code, _, errOut := runCLI(t, step...); code != 0 {
			t.Fatalf("%v: %s", step, errOut)
		}
	}
	run := filepath.Join(dir, "run")
	rw, err := trace.NewResultWriter(run, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400_000 {
		sent, first, done := int64(i)*1e6, int64(i)*1e6+int64(5e6+i%7919*1e3), int64(i)*1e6+int64(50e6+i%104729*1e3)
		rw.Write(trace.Result{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, ScheduledNs: sent, AdmittedNs: sent, SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first,
			DoneNs: &done, TokenTimesNs: []int64{first - sent, done - sent}, ObservedOutputTokens: 2, Outcome: trace.OutcomeOK, RunID: "big", Shape: trace.Shape{Stream: true}})
	}
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	trace.WriteJSONAtomic(filepath.Join(run, trace.RunInfoName), &trace.RunInfo{RunID: "big", Complete: true, Parts: rw.Parts()})

	for _, c := range []struct {
		name   string
		args   func(out string) []string
		staged bool // writes a bucket: wait for its staging directory
	}{
		{"convert", func(out string) []string { return []string{"convert", csv, "--out", out} }, true},
		{"fit", func(out string) []string { return []string{"fit", bucket, "--out", out} }, false},
		{"generate", func(out string) []string { return []string{"generate", model, "--duration", "2000h", "--out", out} }, true},
		{"analyze", func(out string) []string {
			return []string{"analyze", run, "--resamples", "200000", "--by", "turn", "--html", out}
		}, false},
	} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			t.Run(c.name+"/"+sig.String(), func(t *testing.T) {
				parent := t.TempDir()
				out := filepath.Join(parent, "out")
				cmd, stderr, exited := startCLIChild(t, c.args(out)...)
				deadline := time.After(2 * time.Minute)
			wait:
				for {
					staging, _ := filepath.Glob(filepath.Join(parent, ".out.staging-*"))
					if cpuSeconds(cmd.Process.Pid) >= 1 && (!c.staged || len(staging) > 0) {
						break
					}
					select {
					case err := <-exited:
						t.Fatalf("finished before it could be interrupted (%v): make its input larger\n%s", err, stderr.String())
					case <-deadline:
						cmd.Process.Kill()
						t.Fatal("never got to work")
					case <-time.After(20 * time.Millisecond):
						continue wait
					}
				}
				signalled := time.Now()
				cmd.Process.Signal(sig)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
					t.Fatalf("still running 30 s after %v", sig)
				}
				took := time.Since(signalled)
				t.Logf("%s stopped %v after %v", c.name, took.Round(time.Millisecond), sig)
				if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
					t.Errorf("exit %d, want %d\n%s", code, exitInterrupted, stderr.String())
				}
				left, _ := os.ReadDir(parent)
				for _, e := range left {
					t.Errorf("left behind: %s", e.Name())
				}
			})
		}
	}
}
