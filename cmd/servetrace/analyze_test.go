package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestAnalyzeStreamsPastInMemoryRows: a run of more rows than
// --in-memory-rows is analyzed streamed, and what needs the rows held is
// refused by naming the flag.
func TestAnalyzeStreamsPastInMemoryRows(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	w, err := trace.NewResultWriter(run, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		sent, first, done := int64(i)*1e9, int64(i)*1e9+2e8, int64(i)*1e9+5e8
		w.Write(trace.Result{Identity: trace.Identity{RequestID: "r"}, Shape: trace.Shape{Stream: true}, ScheduledNs: sent, AdmittedNs: sent,
			SentNs: &sent, FirstChunkNs: &first, FirstTokenNs: &first, DoneNs: &done, TokenTimesNs: []int64{2e8, 3e8},
			ObservedOutputTokens: 2, PromptTokensSent: 10, Outcome: trace.OutcomeOK, HTTPStatus: 200, RunID: "x"})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := trace.WriteJSONAtomic(filepath.Join(run, trace.RunInfoName), &trace.RunInfo{RunID: "x", Complete: true, Parts: w.Parts()}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "analyze", "--in-memory-rows", "2", run)
	if code != 0 || !strings.Contains(out, "streamed analysis of 3 result rows") {
		t.Fatalf("exit %d; stdout %q; stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "analyze", "--in-memory-rows", "2", "--window", "1s", run)
	if code == 0 || !strings.Contains(errOut, "--in-memory-rows 2: asking for a time series needs every result row") {
		t.Fatalf("--window on a streamed run: exit %d; stdout %q; stderr %q", code, out, errOut)
	}
}
