package peer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vllmDoc is a detailed vLLM result of the given per-request lists and
// extra top-level fields (JSON text each).
func vllmDoc(extra, inputs, outputs, ttfts, itls, latencies string) string {
	return `{"backend": "vllm", "model_id": "m", "request_rate": 4.0, "duration": 3.0, "completed": 3, "request_throughput": 1.0` + extra +
		`, "input_lens": ` + inputs + `, "output_lens": ` + outputs + `, "ttfts": ` + ttfts + `, "itls": ` + itls +
		`, "latencies": ` + latencies + `, "start_times": [100.0, 100.5, 101.0], "errors": ["", "", ""]}`
}

// TestHostilePeerValues (issue 42, 5 and 6): each row is another tool's
// file holding an impossible value. The value must be left out (never
// pooled as it is), the rest of the request kept, and a note must name
// the file, what was wrong, how often and where first; before, every one
// of these was used as it was or dropped with a note that blamed
// rounding.
func TestHostilePeerValues(t *testing.T) {
	ok3 := "[[0.01, 0.01], [0.01, 0.01], [0.01, 0.01]]"
	manyGaps := "[" + strings.Repeat("0.001, ", 199_999) + "0.001]" // the file had 2,000,000: the rule is the same
	for _, c := range []struct {
		name, file, text string
		// check looks at the run's requests.
		check func(t *testing.T, r Run)
		note  string
	}{
		{"completed 2e9 beside 3 records", "v.json", vllmDoc(`, "completed": 2e9`, "[10, 10, 10]", "[3, 3, 3]", "[0.1, 0.1, 0.1]", ok3, "[0.2, 0.2, 0.2]"),
			func(t *testing.T, r Run) {
				if r.Completed != 3 {
					t.Errorf("completed %d, want the 3 successful records", r.Completed)
				}
			}, "it says 2000000000 requests completed but holds 3 records"},
		{"200,000 token gaps for 3 output tokens", "v.json", vllmDoc("", "[10, 10, 10]", "[3, 3, 3]", "[0.1, 0.1, 0.1]", "[[0.01, 0.01], "+manyGaps+", [0.01, 0.01]]", "[0.2, 0.2, 0.2]"),
			func(t *testing.T, r Run) {
				if n := len(r.Requests[1].GapsNs); n != 0 {
					t.Errorf("%d gaps kept", n)
				}
				if q := r.Requests[1]; q.TTFTNs != 100e6 || q.E2ENs != 200e6 {
					t.Errorf("the rest of the request was lost: %+v", q)
				}
			}, "1 record(s) with more token gaps than output tokens: its token gaps left out (first: record 2)"},
		{"a negative and a 1e308 TTFT", "v.json", vllmDoc(`, "mean_ttft_ms": 3e307`, "[10, 10, 10]", "[3, 3, 3]", "[-0.5, 1e308, 0.1]", ok3, "[0.2, 0.2, 0.2]"),
			func(t *testing.T, r Run) {
				if r.Requests[0].TTFTNs != -1 || r.Requests[1].TTFTNs != -1 || r.Requests[2].TTFTNs != 100e6 {
					t.Errorf("TTFTs %d %d %d", r.Requests[0].TTFTNs, r.Requests[1].TTFTNs, r.Requests[2].TTFTNs)
				}
				if strings.Contains(strings.Join(r.Notes, "\n"), "rounded") {
					t.Errorf("a note blames rounding: %q", r.Notes)
				}
			}, "2 record(s) with a TTFT out of range (negative, not a number, or past a week): the TTFT left out (first: record 1)"},
		{"a latency shorter than the TTFT", "v.json", vllmDoc("", "[10, 10, 10]", "[3, 3, 3]", "[0.1, 0.1, 0.1]", ok3, "[0.05, 0.2, 0.2]"),
			func(t *testing.T, r Run) {
				if q := r.Requests[0]; q.E2ENs != -1 || !q.EndUnknown {
					t.Errorf("%+v", q)
				}
			}, "1 record(s) with a latency shorter than its TTFT"},
		{"an input length of 1e30", "v.json", vllmDoc("", "[10, 1e30, 10]", "[3, 3, 3]", "[0.1, 0.1, 0.1]", ok3, "[0.2, 0.2, 0.2]"),
			func(t *testing.T, r Run) {
				if r.Requests[1].InputTokens != -1 {
					t.Errorf("input tokens %d", r.Requests[1].InputTokens)
				}
			}, "1 record(s) with input tokens out of range"},
		{"a duration of 1e308", "v.json", vllmDoc(`, "duration": 1e308`, "[10, 10, 10]", "[3, 3, 3]", "[0.1, 0.1, 0.1]", ok3, "[0.2, 0.2, 0.2]"),
			func(t *testing.T, r Run) {
				if r.DurationS != 0 {
					t.Errorf("duration %g", r.DurationS)
				}
			}, "its duration 1e+308 s is out of range"},
		{"an LLMPerf latency of 1e308", "l.json", `[{"error_code": null, "error_msg": "", "ttft_s": 0.4, "end_to_end_latency_s": 1e308, "number_input_tokens": 5, "number_output_tokens": 3},
			{"error_code": null, "error_msg": "", "ttft_s": 0.4, "end_to_end_latency_s": 0.9, "number_input_tokens": 5, "number_output_tokens": 3}]`,
			func(t *testing.T, r Run) {
				if q := r.Requests[0]; q.E2ENs != -1 || !q.EndUnknown || q.TTFTNs != 400e6 {
					t.Errorf("%+v: want the latency left out and the end unknown, not the TTFT", q)
				}
			}, "1 record(s) with a latency out of range"},
		{"an AIPerf record with an absurd start time", "a.jsonl", aiperfLine(1759813207532900363, 120) + "\n" + aiperfLine(5, 130) + "\n" + aiperfLine(1759813207632900363, 140) + "\n",
			func(t *testing.T, r Run) {
				if len(r.Requests) != 2 || r.Records != 2 {
					t.Errorf("%d requests, %d records; want the absurd one left out", len(r.Requests), r.Records)
				}
			}, "1 record(s) with a metadata.request_start_ns that is not a time (epoch nanoseconds of the years 2000 to 2200): the record left out (first: record 2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.file)
			if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			runs, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			r := runs[0]
			notes := strings.Join(r.Notes, "\n")
			if !strings.Contains(notes, c.note) || !strings.Contains(notes, path) {
				t.Errorf("notes %q; want one naming %s and saying %q", r.Notes, path, c.note)
			}
			c.check(t, r)
		})
	}
}

// aiperfLine is one AIPerf record sent at start with a TTFT of ttft ms.
func aiperfLine(start int64, ttft float64) string {
	return fmt.Sprintf(`{"metadata":{"request_start_ns":%d,"benchmark_phase":"profiling"},"metrics":{"input_sequence_length":{"value":5,"unit":"tokens"},"time_to_first_token":{"value":%g,"unit":"ms"},"request_latency":{"value":%g,"unit":"ms"},"output_sequence_length":{"value":2,"unit":"tokens"},"inter_chunk_latency":{"value":[5.0],"unit":"ms"}},"error":null}`, start, ttft, ttft+6)
}
