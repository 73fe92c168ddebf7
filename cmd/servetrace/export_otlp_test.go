package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestExportOTLPRun exports a run dir as OTLP/JSON spans to a file and to
// standard output, and refuses a trace bucket in its place with a message
// saying what it wants.
func TestExportOTLPRun(t *testing.T) {
	dir := t.TempDir()
	run, _ := oneResultRun(t, filepath.Join(dir, "run"), trace.Result{
		Identity: trace.Identity{RequestID: "q1", Model: "m"}, Shape: trace.Shape{InputTokens: 9, OutputTokens: 2, API: trace.APIChat, N: 1},
		SentNs: new(int64(10)), DoneNs: new(int64(30)), TokenTimesNs: []int64{5, 20}, ObservedOutputTokens: 2,
		HTTPStatus: 200, Outcome: trace.OutcomeOK, RunID: "r1",
	})
	out := filepath.Join(dir, "run.otlp.jsonl")
	code, _, stderr := runCLI(t, "export", run, "--format", "otlp", "--out", out)
	if code != 0 || !strings.Contains(stderr, "wrote 1 spans") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []struct {
					Name   string
					Events []json.RawMessage
				}
			}
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if sp := doc.ResourceSpans[0].ScopeSpans[0].Spans; len(sp) != 1 || sp[0].Name != "chat m" || len(sp[0].Events) != 2 {
		t.Fatalf("spans %+v", sp)
	}
	code, stdout, _ := runCLI(t, "export", run, "--format", "otlp")
	if code != 0 || stdout != string(b) {
		t.Fatalf("exit %d; standard output differs from the file", code)
	}
	bucket := rawBucket(t, filepath.Join(dir, "wl"), plainRows(2))
	code, _, stderr = runCLI(t, "export", bucket, "--format", "otlp")
	if code != 1 || !strings.Contains(stderr, "run.json") {
		t.Fatalf("a bucket for --format otlp: exit %d, %s", code, stderr)
	}
}
