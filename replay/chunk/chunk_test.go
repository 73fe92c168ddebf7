package chunk

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// referenceEvent decodes data with encoding/json, independently of the
// scanner, into the same Event fields. ok is false for documents the scanner
// must reject; comparable is false when the document repeats an object key
// (encoding/json keeps the last, the scanner sees each).
func referenceEvent(data []byte) (ev Event, ok, comparable bool) {
	var top any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return ev, false, true
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ev, false, true // trailing data
	}
	obj, isObj := top.(map[string]any)
	if !isObj {
		return ev, false, true
	}
	if hasDuplicateKeys(data) {
		return ev, true, false
	}
	if e, present := obj["error"]; present && e != nil {
		ev.IsError = true
		return ev, true, true
	}
	num := func(v any) (int64, bool) {
		n, isNum := v.(json.Number)
		if !isNum {
			return 0, false
		}
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		f, _ := n.Float64()
		return int64(f), true
	}
	nonEmpty := func(v any) bool { s, ok := v.(string); return ok && s != "" }
	if choices, isArr := obj["choices"].([]any); isArr {
		for _, c := range choices {
			ev.Choices++
			ch, isObj := c.(map[string]any)
			if !isObj {
				continue
			}
			before, textStart := ev.Content, len(ev.Text)
			ev.Content = false
			if nonEmpty(ch["text"]) {
				ev.Content, ev.Answer = true, true
				ev.Text = append(ev.Text, ch["text"].(string)...)
			}
			if d, isObj := ch["delta"].(map[string]any); isObj {
				if nonEmpty(d["content"]) {
					ev.Content, ev.Answer = true, true
					ev.Text = append(ev.Text, d["content"].(string)...)
				}
				if nonEmpty(d["reasoning_content"]) || nonEmpty(d["reasoning"]) {
					ev.Content = true
				}
				if tc, isArr := d["tool_calls"].([]any); isArr && len(tc) > 0 {
					ev.Content, ev.Answer = true, true
				}
			}
			if nonEmpty(ch["finish_reason"]) {
				ev.Finish = ch["finish_reason"].(string)
			}
			index := int32(0)
			if n, isNum := ch["index"].(json.Number); isNum {
				if i, err := n.Int64(); err == nil && i >= 0 && i <= 1<<20 {
					index = int32(i)
				}
			}
			if ev.Content {
				ev.Index = index
			}
			if len(ev.Text) > textStart {
				ev.Pieces = append(ev.Pieces, Piece{Index: index, End: len(ev.Text)})
			}
			ev.Content = ev.Content || before
		}
	}
	if u, isObj := obj["usage"].(map[string]any); isObj {
		if n, isNum := num(u["completion_tokens"]); isNum {
			ev.HasUsage, ev.CompletionTokens = true, n
		}
		if n, isNum := num(u["prompt_tokens"]); isNum {
			ev.HasPromptTokens, ev.PromptTokens = true, n
		}
		if d, isObj := u["completion_tokens_details"].(map[string]any); isObj {
			if n, isNum := num(d["reasoning_tokens"]); isNum {
				ev.HasReasoningTokens, ev.ReasoningTokens = true, n
			}
		}
		if d, isObj := u["prompt_tokens_details"].(map[string]any); isObj {
			if n, isNum := num(d["cached_tokens"]); isNum {
				ev.HasCachedTokens, ev.CachedTokens = true, n
			}
		}
	}
	return ev, true, true
}

// hasDuplicateKeys reports whether any object in data repeats a key.
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				ks, _ := k.(string)
				if seen[ks] {
					return true
				}
				seen[ks] = true
				if walk() {
					return true
				}
			}
			dec.Token()
		case json.Delim('['):
			for dec.More() {
				if walk() {
					return true
				}
			}
			dec.Token()
		}
		return false
	}
	return walk()
}

func compareWithReference(t *testing.T, data []byte) {
	t.Helper()
	var got Event
	err := Decode(data, &got)
	want, ok, comparable := referenceEvent(data)
	if ok != (err == nil) {
		t.Fatalf("%q: scanner error %v, encoding/json accepts: %v", data, err, ok)
	}
	if !ok || !comparable {
		return
	}
	if got.IsError != want.IsError {
		t.Fatalf("%q: isError %v, reference %v", data, got.IsError, want.IsError)
	}
	if want.IsError {
		return
	}
	if got.Choices != want.Choices || got.Content != want.Content || got.Finish != want.Finish ||
		got.HasUsage != want.HasUsage || got.CompletionTokens != want.CompletionTokens ||
		got.HasPromptTokens != want.HasPromptTokens || got.PromptTokens != want.PromptTokens ||
		got.HasReasoningTokens != want.HasReasoningTokens || got.ReasoningTokens != want.ReasoningTokens ||
		got.HasCachedTokens != want.HasCachedTokens || got.CachedTokens != want.CachedTokens ||
		string(got.Text) != string(want.Text) || !slices.Equal(got.Pieces, want.Pieces) || got.Index != want.Index || got.Answer != want.Answer {
		t.Fatalf("%q:\n scanner   %+v\n reference %+v", data, got, want)
	}
}

// replayTestdata holds the captured server transcripts and SSE fixtures,
// which the replay client's tests read too.
const replayTestdata = "../testdata"

// eventCorpus are hand-picked hard cases plus every Event of the captured
// server transcripts.
func eventCorpus(t testing.TB) []string {
	corpus := []string{
		`{}`, `{"choices":[]}`, `{"choices":null}`, `{"choices":{}}`, `{"choices":[1,"x",null]}`,
		`{"choices":[{"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"delta":{"content":"a\"b\\c\u00e9\ud83d\ude00\n"}}]}`,
		`{"choices":[{"text":" hi","finish_reason":null},{"text":"","finish_reason":"stop"}]}`,
		`{"choices":[{"delta":{"reasoning_content":"think","content":null}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[]}}]}`,
		`{"choices":[{"index":1,"delta":{"content":"b"}}]}`, `{"choices":[{"delta":{"content":"b"},"index":3}]}`,
		`{"choices":[{"index":2,"delta":{"content":"x"}},{"index":1,"delta":{"content":""}}]}`,
		`{"choices":[{"index":1,"delta":{"content":"ab"}},{"delta":{"content":"c"},"index":0},{"index":2,"text":"d"}]}`,
		`{"choices":[{"index":1.0,"delta":{"content":"x"}}]}`, `{"choices":[{"index":-1,"text":"x"}]}`, `{"choices":[{"index":1e400,"text":"x"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"completion_tokens_details":{"reasoning_tokens":2}}}`,
		`{"usage":{"completion_tokens":1e2,"prompt_tokens":-0.0}}`,
		`{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":768,"audio_tokens":0}}}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":null}}}`, `{"usage":{"prompt_tokens_details":[]}}`,
		`{"usage":{"completion_tokens":null}}`,
		`{"error":{"message":"engine died","code":500}}`, `{"error":"plain"}`, `{"error":null,"choices":[]}`,
		` {"a":[true,false,null,{"b":[[]]}]} `,
		// rejected by both
		``, `[]`, `"x"`, `{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":"\x01"}`, `{"a":"\q"}`, `{"a":"\u12g4"}`,
		`{"a":1} x`, `{"a"1}`, `{"a":tru}`, `{"a":nullx}`, `{"choices":[{"text":"x"]}`, `{a:1}`, `{"a":-}`, `{"a":1e}`,
		`{"choices": [{` + "\n",
	}
	files := []string{filepath.Join("ollama-0.17.4", "chat-stream-usage.http"), filepath.Join("ollama-0.17.4", "completions-stream-usage.http")}
	fixtures, _ := filepath.Glob(filepath.Join(replayTestdata, "fixtures", "*.sse"))
	for _, f := range fixtures {
		files = append(files, strings.TrimPrefix(f, replayTestdata+string(filepath.Separator)))
	}
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(replayTestdata, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "data: "); ok && d != "[DONE]" {
				corpus = append(corpus, d)
			}
		}
	}
	return corpus
}

func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range eventCorpus(t) {
		compareWithReference(t, []byte(c))
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range eventCorpus(f) {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareWithReference(t, data)
	})
}

// TestDecodePieces: each choice's text is told apart, in the event's
// order, whatever the order of its keys.
func TestDecodePieces(t *testing.T) {
	var ev Event
	data := `{"choices":[{"index":1,"delta":{"content":"ab"}},{"delta":{"content":"c\u00e9"},"index":0},{"index":2,"delta":{"content":""}},{"index":3,"text":"d"}]}`
	if err := Decode([]byte(data), &ev); err != nil {
		t.Fatal(err)
	}
	want := []Piece{{Index: 1, End: 2}, {Index: 0, End: 5}, {Index: 3, End: 6}}
	if string(ev.Text) != "abcéd" || !slices.Equal(ev.Pieces, want) {
		t.Errorf("text %q pieces %+v; want \"abcéd\" and %+v", ev.Text, ev.Pieces, want)
	}
}

// TestDecodeSaturatesCountsPastInt64: a usage count past int64 reads as
// the largest count, which the caller refuses as impossible; before,
// 1e20 wrapped to a negative count.
func TestDecodeSaturatesCountsPastInt64(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int64
	}{{"1e20", math.MaxInt64}, {"1e300", math.MaxInt64}, {"-1e20", math.MinInt64}, {"12.0", 12}} {
		var ev Event
		if err := Decode([]byte(`{"choices":[],"usage":{"completion_tokens":`+c.raw+`}}`), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.CompletionTokens != c.want {
			t.Errorf("%s read as %d, want %d", c.raw, ev.CompletionTokens, c.want)
		}
	}
}
