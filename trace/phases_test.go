package trace

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerPhasesRoundTrip: rows written are read back as they were,
// nulls included, and a run without the file reads as having none.
func TestServerPhasesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadServerPhases(dir); ok || err != nil {
		t.Fatalf("a run without phases: ok %v, err %v; want none and no error", ok, err)
	}
	rows := []ServerPhases{
		{TraceID: strings.Repeat("ab", 16), Source: "vllm", ServerRequestID: "cmpl-1", QueueS: Ptr(0.25), PrefillS: Ptr(0.125),
			DecodeS: Ptr(1.5), InferenceS: Ptr(1.625), TTFTS: Ptr(0.375), E2ES: Ptr(1.875), PromptTokens: Ptr[int64](512), CompletionTokens: Ptr[int64](64)},
		{TraceID: strings.Repeat("0f", 16), Source: "vllm", TTFTS: Ptr(0.5)},
	}
	if err := WriteServerPhases(dir, rows); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadServerPhases(dir)
	if err != nil || !ok || len(got) != 2 {
		t.Fatalf("read %d rows, ok %v, err %v", len(got), ok, err)
	}
	if *got[0].QueueS != 0.25 || *got[0].DecodeS != 1.5 || *got[0].CompletionTokens != 64 || got[0].ServerRequestID != "cmpl-1" {
		t.Errorf("row 1 read as %+v", got[0])
	}
	if got[1].QueueS != nil || got[1].PromptTokens != nil || *got[1].TTFTS != 0.5 {
		t.Errorf("row 2's nulls not kept: %+v", got[1])
	}
}

// TestServerPhasesRefused: a row out of bounds is refused by name and
// nothing is written.
func TestServerPhasesRefused(t *testing.T) {
	id := strings.Repeat("ab", 16)
	cases := []struct {
		name  string
		row   ServerPhases
		field string
	}{
		{"short trace id", ServerPhases{TraceID: "abc", Source: "vllm"}, "trace_id"},
		{"upper-case trace id", ServerPhases{TraceID: strings.Repeat("AB", 16), Source: "vllm"}, "trace_id"},
		{"negative queue", ServerPhases{TraceID: id, Source: "vllm", QueueS: Ptr(-0.1)}, "queue_s"},
		{"NaN decode", ServerPhases{TraceID: id, Source: "vllm", DecodeS: Ptr(math.NaN())}, "decode_s"},
		{"a prefill of two weeks", ServerPhases{TraceID: id, Source: "vllm", PrefillS: Ptr(14 * 86400.0)}, "prefill_s"},
		{"negative tokens", ServerPhases{TraceID: id, Source: "vllm", PromptTokens: Ptr[int64](-1)}, "prompt_tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			err := WriteServerPhases(dir, []ServerPhases{c.row})
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err %v, want one naming %s", err, c.field)
			}
			if _, serr := os.Stat(filepath.Join(dir, ServerPhasesName)); serr == nil {
				t.Error("a file was written for a refused row")
			}
		})
	}
}

// TestServerPhasesNoMoreThanTheRunsRequests: a phases file of more rows
// than the run scheduled requests is not the run's, and is refused from
// its footer before its rows are held.
func TestServerPhasesNoMoreThanTheRunsRequests(t *testing.T) {
	dir := t.TempDir()
	var rows []ServerPhases
	for i := range 5 {
		rows = append(rows, ServerPhases{TraceID: strings.Repeat("ab", 15) + fmt.Sprintf("%02x", i), Source: "vllm", TTFTS: Ptr(0.5)})
	}
	if err := WriteServerPhases(dir, rows); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RunInfoName), []byte(`{"scheduled":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadServerPhases(dir); err == nil || !strings.Contains(err.Error(), "5 rows, more than the run's 2 requests") {
		t.Fatalf("err %v; want the 5 rows refused for a run of 2", err)
	}
}
