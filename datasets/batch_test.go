package datasets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// The Batch API fixtures follow OpenAI's API reference (the batch object's
// request input and output lines: platform.openai.com/docs/api-reference/batch,
// BatchRequestOutput in its OpenAPI spec) and the chat completion and
// Responses API response objects. batch_output.jsonl holds two chat
// completions (out of input order), two Responses API responses, a request
// that expired (response null, error set) and one refused with a 400;
// batch_input.jsonl holds the six requests.

func loadBatchInput(t *testing.T) *BatchInput {
	t.Helper()
	bi, err := LoadBatchInput(context.Background(), "testdata/logs/batch_input.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return bi
}

// TestOpenAIBatchOutput converts a Batch API output file, detected by its
// keys, with and without its batch input: usage and times come from the
// output either way; the input adds the request side (the prompt counted
// and hashed into prefix blocks, max tokens, sampling, tools). The two
// failed requests have no time and are rejected, each on its own line.
func TestOpenAIBatchOutput(t *testing.T) {
	type row struct {
		custom   string
		ts       int64
		in, out  int64
		max      int64
		api      string
		model    string
		features string
	}
	withInput := []row{
		{"req-2", 1741476500, 57, 18, 300, trace.APIChat, "gpt-4o-mini-2024-07-18", "tools"},
		{"req-1", 1741476502, 33, 5, 200, trace.APIChat, "gpt-4o-mini-2024-07-18", ""},
		{"req-3", 1741476510, 26, 2, 500, trace.APIChat, "gpt-4.1-mini-2025-04-14", ""},
		{"req-4", 1741476511, 14, 40, 64, trace.APIChat, "gpt-4.1-mini-2025-04-14", "reasoning"},
	}
	// Without the input: no prompt (completions, no blocks), max tokens
	// default to the output length.
	var withoutInput []row
	for _, r := range withInput {
		r.max, r.api = r.out, trace.APICompletions
		if r.features == "tools" {
			r.features = ""
		}
		withoutInput = append(withoutInput, r)
	}
	for _, c := range []struct {
		name  string
		input *BatchInput
		rows  []row
	}{
		{"with batch input", loadBatchInput(t), withInput},
		{"output alone", nil, withoutInput},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The default reject ratio: the expired and the refused request
			// are skipped with a note, not rejected.
			rows, man, _ := convertWith(t, []string{"testdata/logs/batch_output.jsonl"},
				ConvertOptions{Options: Options{Log: LogOptions{BatchInput: c.input}}})
			if len(rows) != len(c.rows) || man.Rejects != 0 || man.Sources[0].Format != FormatOpenAIBatch {
				t.Fatalf("%d rows, %d rejects, format %s; want %d, 0, %s", len(rows), man.Rejects, man.Sources[0].Format, len(c.rows), FormatOpenAIBatch)
			}
			if !slices.ContainsFunc(man.Notes, func(n string) bool {
				return strings.Contains(n, "2 Batch API requests failed") && strings.Contains(n, "1 × batch_expired") && strings.Contains(n, "1 × status 400")
			}) {
				t.Errorf("notes %v lack the failed requests", man.Notes)
			}
			for i, w := range c.rows {
				r := rows[i]
				if r.TS != w.ts*1e6 || r.InputTokens != w.in || r.OutputTokens != w.out || r.MaxTokens != w.max || r.API != w.api ||
					r.Model != w.model || strings.Join(r.Features, ",") != w.features || *r.Status != 200 {
					t.Errorf("%s: ts %d %d/%d max %d api %s model %s features %v; want %+v", w.custom, r.TS, r.InputTokens, r.OutputTokens, r.MaxTokens, r.API, r.Model, r.Features, w)
				}
				if (len(r.PrefixBlocks) > 0) != (c.input != nil) {
					t.Errorf("%s: prefix blocks %v with input %v", w.custom, r.PrefixBlocks, c.input != nil)
				}
				if r.RequestID != testSalt(t).ID("request", w.custom) {
					t.Errorf("%s: request id is not the salted custom_id", w.custom)
				}
			}
			if c.input != nil {
				if rows[1].Temperature == nil || *rows[1].Temperature != 0 || *rows[0].FinishReason != "tool_calls" {
					t.Errorf("req-1 temperature %v, req-2 finish %v", rows[1].Temperature, rows[0].FinishReason)
				}
				if !slices.ContainsFunc(man.Notes, func(n string) bool { return strings.Contains(n, "batch input") && strings.Contains(n, "6 requests") }) {
					t.Errorf("notes %v lack the batch input", man.Notes)
				}
			}
		})
	}
}

// TestBatchInputCountsPrompts: where the output has no usage, the prompt
// joined from the batch input is counted like any log's: each message
// rendered as role and text, the Responses API's instructions as a system
// message before its input.
func TestBatchInputCountsPrompts(t *testing.T) {
	text := mappingPresets[FormatOpenAIBatch]
	var kept []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "prompt_tokens:") {
			kept = append(kept, l)
		}
	}
	m, err := parseMapping("batch-without-usage", strings.Join(kept, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	rows, _, _ := convertWith(t, []string{"testdata/logs/batch_output.jsonl"},
		ConvertOptions{MaxRejectRatio: -1, Options: Options{Log: LogOptions{Mapping: m, BatchInput: loadBatchInput(t)}}})
	tok, _ := tokenize.Get("cl100k_base")
	count := func(parts ...string) int64 {
		n := 0
		for _, p := range parts {
			n += tok.Count(p)
		}
		return int64(n)
	}
	want := map[int64]int64{
		1741476502e6: count("system\nYou label support tickets.\n", "user\nTicket: my printer is on fire. Label it.\n"),
		1741476510e6: count("system\nAnswer in one word.\n", "user\nWhat colour is the sky on a clear day?\n"),
		1741476511e6: count("user\nName three rivers in Europe.\n"),
	}
	seen := 0
	for _, r := range rows {
		if w, ok := want[r.TS]; ok {
			seen++
			if r.InputTokens != w {
				t.Errorf("%v: %d input tokens, want %d", time.UnixMicro(r.TS).UTC(), r.InputTokens, w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d rows checked were converted", seen, len(want))
	}
}

// TestBatchInputErrors: a file that is not one batch's input is refused
// whole, naming the line.
func TestBatchInputErrors(t *testing.T) {
	dir := t.TempDir()
	ok := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`
	for _, c := range []struct {
		name, text, want string
	}{
		{"repeated custom_id", ok + "\n" + ok + "\n", "line 2: the custom_id of line 1 again"},
		{"an output file", `{"id":"b","custom_id":"a","response":{"status_code":200,"body":{}},"error":null}` + "\n", "line 1: a Batch API output line"},
		{"no custom_id", `{"method":"POST","url":"/v1/chat/completions","body":{}}` + "\n", "line 1: no custom_id"},
		{"malformed", ok + "\n" + `{"custom_id":` + "\n", "line 2: malformed JSON"},
		{"empty", "\n", "no requests"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".jsonl")
		os.WriteFile(p, []byte(c.text), 0o644)
		if _, err := LoadBatchInput(context.Background(), p); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v; want %q naming the file", c.name, err, c.want)
		}
	}
	// A batch input given as the input to convert says what to do instead.
	_, err := Convert(context.Background(), []string{"testdata/logs/batch_input.jsonl"}, filepath.Join(dir, "out"), ConvertOptions{})
	if !errors.Is(err, ErrBatchInput) || !strings.Contains(err.Error(), "batch_input.jsonl line 1") {
		t.Errorf("batch input as input: %v", err)
	}
	// An output line whose custom_id the input lacks is rejected: the
	// files are of different batches.
	bi := loadBatchInput(t)
	_, err = Convert(context.Background(), []string{"testdata/logs/rejects/batch_unjoined.jsonl"}, filepath.Join(dir, "out2"), ConvertOptions{Options: Options{Log: LogOptions{BatchInput: bi}}})
	if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "custom_id: not in the batch input batch_input.jsonl") {
		t.Errorf("unjoined output: %v", err)
	}
}
