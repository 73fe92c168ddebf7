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
	tok, err := tokenize.Get("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	type needle struct {
		what string
		b    []byte
		// bounded: a decimal that must not be part of a longer number.
		bounded bool
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
	files := 0
	err = filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
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
	t.Logf("scanned %d files for %d needles", files, len(needles))
}
