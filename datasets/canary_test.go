package datasets

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// TestNoCanaryReachesAnyOutputFile converts request logs seeded with canary
// strings (in prompts, replies, tool calls, ids, an API key header, a
// rejected line) and scans every byte of every file the conversion wrote —
// Parquet parts, manifest, rejects — for the canaries, the raw ids, and the
// canaries' token ids as decimal text and as little-endian int32 and int64,
// one by one (ids of 30,000 and up, where a chance match is negligible) and
// as sequences.
func TestNoCanaryReachesAnyOutputFile(t *testing.T) {
	canaries := []string{" Kumquatronics", " Canarywharfish", " xylophonequartz", " zebraphantasm"}
	rawIDs := []string{"user-kumquat-501", "tenant-canary-77", "conv-xylo-9", "req-zebra-", "sk-canary-5e3cret"}
	var sb strings.Builder
	for i := range 200 {
		c := canaries[i%len(canaries)]
		rec := map[string]any{
			"id":              fmt.Sprintf("req-zebra-%d", i),
			"timestamp":       1740823200.0 + float64(i),
			"end_time":        1740823200.5 + float64(i),
			"user":            "user-kumquat-501",
			"tenant":          "tenant-canary-77",
			"conversation_id": fmt.Sprintf("conv-xylo-9-%d", i/4),
			"status":          200,
			"headers":         map[string]string{"Authorization": "Bearer sk-canary-5e3cret"},
			"request": map[string]any{
				"model": "llama-3.1-8b", "stream": true, "max_tokens": 32,
				"messages": []map[string]any{
					{"role": "system", "content": "Secret system prompt:" + c},
					{"role": "user", "content": []map[string]any{{"type": "text", "text": "Tell me about" + c}}},
					{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"function": map[string]any{"name": "lookup" + strings.TrimSpace(c), "arguments": `{"q":"` + c + `"}`}}}},
				},
			},
			"response": map[string]any{"choices": []map[string]any{{"message": map[string]any{"content": "Here is" + c}, "finish_reason": "stop"}}},
		}
		if i%3 == 0 { // no usage: counts come from the tokenizer
			rec["response"].(map[string]any)["usage"] = map[string]any{"prompt_tokens": 40 + i, "completion_tokens": 5}
		}
		b, _ := json.Marshal(rec)
		sb.Write(b)
		sb.WriteByte('\n')
	}
	sb.WriteString(`{"id":"req-zebra-bad","timestamp":"not a time","request":{"prompt":"Kumquatronics secret"}}` + "\n")
	dir := t.TempDir()
	in := filepath.Join(dir, "logs.jsonl")
	if err := os.WriteFile(in, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bucket")
	m, _ := LoadMapping("openai")
	man, err := Convert(context.Background(), []string{in}, out, ConvertOptions{Options: Options{Format: FormatOpenAILog, Log: LogOptions{Mapping: m, Salt: testSalt(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	if man.Rows != 200 || man.Rejects != 1 {
		t.Fatalf("%d rows, %d rejects", man.Rows, man.Rejects)
	}
	scanForNeedles(t, out, canaryNeedles(t, canaries, rawIDs))
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	// The conversion still kept what shapes load.
	sessions := map[string]bool{}
	for _, r := range rows {
		sessions[r.SessionID] = true
		if r.InputTokens == 0 || len(r.PrefixBlocks) == 0 {
			t.Fatalf("a row lost its shape: %+v", r.Shape)
		}
	}
	if len(sessions) != 50 {
		t.Errorf("%d sessions, want 50 (four turns each)", len(sessions))
	}
}

// needle is a byte string no output file may hold.
type needle struct {
	what string
	b    []byte
	// bounded: a decimal that must not be part of a longer number.
	bounded bool
}

// canaryNeedles are the canaries, their cl100k_base token ids (as decimal
// text and as little-endian int32 and int64, one by one for ids of 30,000
// and up, where a chance match is negligible, and as sequences) and the
// raw ids.
func canaryNeedles(t *testing.T, canaries, rawIDs []string) []needle {
	t.Helper()
	tok, err := tokenize.Get("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	var needles []needle
	for _, c := range canaries {
		needles = append(needles, needle{"canary " + c, []byte(strings.TrimSpace(c)), false})
		ids := tok.Encode(c)
		var seq32, seq64 []byte
		var dec []string
		for _, id := range ids {
			seq32 = binary.LittleEndian.AppendUint32(seq32, uint32(id))
			seq64 = binary.LittleEndian.AppendUint64(seq64, uint64(id))
			dec = append(dec, strconv.Itoa(id))
			if id >= 30000 {
				needles = append(needles,
					needle{fmt.Sprintf("token id %d of %q as decimal", id, c), []byte(strconv.Itoa(id)), true},
					needle{fmt.Sprintf("token id %d of %q as int32", id, c), binary.LittleEndian.AppendUint32(nil, uint32(id)), false},
					needle{fmt.Sprintf("token id %d of %q as int64", id, c), binary.LittleEndian.AppendUint64(nil, uint64(id)), false})
			}
		}
		needles = append(needles, needle{"token ids of " + c + " as int32s", seq32, false}, needle{"token ids of " + c + " as int64s", seq64, false},
			needle{"token ids of " + c + " as text", []byte(strings.Join(dec, ",")), false}, needle{"token ids of " + c + " as text", []byte(strings.Join(dec, " ")), false})
	}
	for _, id := range rawIDs {
		needles = append(needles, needle{"raw id " + id, []byte(id), false})
	}
	return needles
}

// scanForNeedles fails the test where any file of the bucket at out —
// Parquet parts, manifest, rejects — or any decoded row holds a needle
// (case-insensitively), and checks parts, manifest and rejects were there.
func scanForNeedles(t *testing.T, out string, needles []needle) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if n.bounded {
				re := regexp.MustCompile(`(^|[^0-9])` + string(n.b) + `([^0-9]|$)`)
				if re.Match(data) {
					t.Errorf("%s found in %s", n.what, path)
				}
				continue
			}
			if bytes.Contains(data, n.b) || bytes.Contains(bytes.ToLower(data), bytes.ToLower(n.b)) {
				t.Errorf("%s found in %s", n.what, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 {
		t.Fatalf("scanned %d files, want parts, manifest and rejects", files)
	}
	// Parquet pages are compressed, so a leak could hide from the byte scan:
	// scan the decoded rows too, every column rendered as JSON.
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	decoded, _ := json.Marshal(rows)
	for _, n := range needles {
		if n.bounded {
			if regexp.MustCompile(`(^|[^0-9])` + string(n.b) + `([^0-9]|$)`).Match(decoded) {
				t.Errorf("%s found in the decoded rows", n.what)
			}
		} else if bytes.Contains(bytes.ToLower(decoded), bytes.ToLower(n.b)) {
			t.Errorf("%s found in the decoded rows", n.what)
		}
	}
}

// TestNoCanaryReachesAnyOutputFileOTLP converts an OTLP/JSON fixture whose
// GenAI spans carry canary text in every content attribute and event the
// GenAI conventions define (gen_ai.input.messages as a JSON string,
// gen_ai.output.messages structured, gen_ai.system_instructions, the older
// gen_ai.prompt and gen_ai.completion, tool call arguments, prompt and
// choice events), raw user, conversation, response and span ids, an
// Authorization header attribute, a non-GenAI span and rejected spans with
// canaries, and scans every output file and decoded row for them.
func TestNoCanaryReachesAnyOutputFileOTLP(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bucket")
	man, err := Convert(context.Background(), []string{"testdata/otlp/canary.jsonl"}, out, ConvertOptions{MaxRejectRatio: -1,
		Options: Options{Format: FormatOTLP, Log: LogOptions{Salt: testSalt(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	if man.Rows != 12 || man.Rejects != 3 {
		t.Fatalf("%d rows, %d rejects; want 12 and 3", man.Rows, man.Rejects)
	}
	canaries := []string{" Kumquatronics", " Canarywharfish", " xylophonequartz", " zebraphantasm"}
	rawIDs := []string{"user-kumquat-501", "tenant-canary-77", "conv-xylo-9", "resp-zebra-", "sk-canary-5e3cret", "c0ffee0000000000", "facade0000"}
	scanForNeedles(t, out, canaryNeedles(t, canaries, rawIDs))
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[string]bool{}
	for _, r := range rows {
		sessions[r.SessionID] = true
		if r.InputTokens == 0 || r.Tenant == "" {
			t.Fatalf("a row lost its shape or tenant: %+v", r)
		}
	}
	if len(sessions) != 3 {
		t.Errorf("%d sessions, want 3 (four turns each)", len(sessions))
	}
}

// TestNoCanaryInBatchOrStringBodies is TestNoCanaryReachesAnyOutputFile for
// the shapes whose text arrives another way: a Batch API output joined to
// its batch input (prompts, instructions, tool names and user ids in the
// input's bodies, replies in the output's), and a gateway log whose bodies
// are JSON strings. Both convert in one conversion, with a rejected line
// each.
func TestNoCanaryInBatchOrStringBodies(t *testing.T) {
	canaries := []string{" Kumquatronics", " Canarywharfish", " xylophonequartz", " zebraphantasm"}
	rawIDs := []string{"user-kumquat-501", "tenant-canary-77", "conv-xylo-9", "cid-zebra-", "breq-xylo-", "sk-canary-5e3cret"}
	dir := t.TempDir()
	var input, output, gateway strings.Builder
	line := func(sb *strings.Builder, v any) {
		b, _ := json.Marshal(v)
		sb.Write(b)
		sb.WriteByte('\n')
	}
	for i := range 40 {
		c := canaries[i%len(canaries)]
		cid := fmt.Sprintf("cid-zebra-%d", i)
		tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup" + strings.TrimSpace(c), "description": "Finds" + c}}}
		if i%2 == 0 {
			line(&input, map[string]any{"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": map[string]any{
				"model": "gpt-4o-mini", "user": "user-kumquat-501", "max_tokens": 64, "tools": tools,
				"messages": []map[string]any{{"role": "system", "content": "Secret system prompt:" + c}, {"role": "user", "content": []map[string]any{{"type": "text", "text": "Tell me about" + c}}}}}})
			line(&output, map[string]any{"id": fmt.Sprintf("breq-xylo-%d", i), "custom_id": cid, "error": nil, "response": map[string]any{"status_code": 200, "request_id": "rq-" + cid,
				"body": map[string]any{"created": 1741476500 + i, "model": "gpt-4o-mini", "choices": []map[string]any{{"message": map[string]any{"role": "assistant", "content": "Here is" + c}, "finish_reason": "stop"}},
					"usage": map[string]any{"prompt_tokens": 40 + i, "completion_tokens": 5}}}})
		} else {
			line(&input, map[string]any{"custom_id": cid, "method": "POST", "url": "/v1/responses", "body": map[string]any{
				"model": "gpt-4.1-mini", "user": "user-kumquat-501", "instructions": "Never say" + c, "input": "What is" + c + "?", "max_output_tokens": 64, "tools": tools}})
			line(&output, map[string]any{"id": fmt.Sprintf("breq-xylo-%d", i), "custom_id": cid, "error": nil, "response": map[string]any{"status_code": 200,
				"body": map[string]any{"created_at": 1741476500 + i, "model": "gpt-4.1-mini", "output": []map[string]any{{"type": "message", "content": []map[string]any{{"type": "output_text", "text": "It is" + c}}}},
					"usage": map[string]any{"input_tokens": 30 + i, "output_tokens": 7}}}})
		}
		req, _ := json.Marshal(map[string]any{"model": "llama-3.1-8b", "user": "user-kumquat-501", "max_tokens": 32, "tools": tools,
			"messages": []map[string]any{{"role": "user", "content": "Tell me about" + c}}})
		resp, _ := json.Marshal(map[string]any{"choices": []map[string]any{{"message": map[string]any{"content": "Here is" + c}, "finish_reason": "stop"}},
			"usage": map[string]any{"prompt_tokens": 20 + i, "completion_tokens": 3}})
		line(&gateway, map[string]any{"id": cid + "-gw", "timestamp": 1741476500.0 + float64(i), "tenant": "tenant-canary-77", "conversation_id": fmt.Sprintf("conv-xylo-9-%d", i),
			"headers": map[string]string{"Authorization": "Bearer sk-canary-5e3cret"}, "request": string(req), "response": string(resp)})
	}
	// Rejected lines: an output the input lacks, a body string cut short.
	line(&output, map[string]any{"id": "breq-xylo-bad", "custom_id": "cid-zebra-missing", "response": map[string]any{"status_code": 200, "body": map[string]any{"created": 1741476600, "choices": []map[string]any{{"message": map[string]any{"content": "Kumquatronics"}}}}}})
	line(&gateway, map[string]any{"id": "cid-zebra-bad-gw", "timestamp": 1741476600.0, "user": "user-kumquat-501", "request": `{"messages":[{"role":"user","content":"Kumquatronics`})
	files := map[string]string{"batch_input.jsonl": input.String(), "batch_output.jsonl": output.String(), "gateway.jsonl": gateway.String()}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bi, err := LoadBatchInput(context.Background(), filepath.Join(dir, "batch_input.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bucket")
	man, err := Convert(context.Background(), []string{filepath.Join(dir, "batch_output.jsonl"), filepath.Join(dir, "gateway.jsonl")}, out,
		ConvertOptions{MaxRejectRatio: 0.05, Options: Options{Log: LogOptions{Salt: testSalt(t), BatchInput: bi}}})
	if err != nil {
		t.Fatal(err)
	}
	if man.Rows != 80 || man.Rejects != 2 {
		t.Fatalf("%d rows, %d rejects; want 80 and 2", man.Rows, man.Rejects)
	}
	scanForNeedles(t, out, canaryNeedles(t, canaries, rawIDs))
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	// The request side still came through: prompts counted into blocks,
	// tools and max tokens kept.
	for _, r := range rows {
		if len(r.PrefixBlocks) == 0 || r.MaxTokens == r.OutputTokens || !slices.Contains(r.Features, "tools") || r.Tenant == "" {
			t.Fatalf("a row lost its request side: %+v tenant %q", r.Shape, r.Tenant)
		}
	}
}
