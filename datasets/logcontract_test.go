package datasets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

var updateContract = flag.Bool("update-contract", false, "rewrite testdata/logs/contract.jsonl")

// contractImage encodes a w×h image with the standard library's encoders
// (an independent writer of the bytes the converter measures).
func contractImage(t testing.TB, w, h int, format string, shade uint8) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{shade, uint8(x), uint8(y), 255})
		}
	}
	var buf bytes.Buffer
	var err error
	if format == "png" {
		err = png.Encode(&buf, img)
	} else {
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 50})
	}
	if err != nil {
		t.Fatal(err)
	}
	return media.DataURI("image/"+format, buf.Bytes())
}

// contractWAV is a RIFF/WAVE clip of ms milliseconds at 8 kHz, 16-bit mono,
// written by hand from the format's documented header.
func contractWAV(ms int) []byte {
	samples := 8 * ms
	data := make([]byte, 2*samples)
	var b bytes.Buffer
	le := func(v uint32, n int) {
		for i := 0; i < n; i++ {
			b.WriteByte(byte(v >> (8 * i)))
		}
	}
	b.WriteString("RIFF")
	le(uint32(36+len(data)), 4)
	b.WriteString("WAVEfmt ")
	le(16, 4)
	le(1, 2)     // PCM
	le(1, 2)     // mono
	le(8000, 4)  // sample rate
	le(16000, 4) // byte rate
	le(2, 2)     // block align
	le(16, 2)    // bits per sample
	b.WriteString("data")
	le(uint32(len(data)), 4)
	b.Write(data)
	return b.Bytes()
}

// contractCase is one request of the contract log with what its row must
// hold.
type contractCase struct {
	rec  map[string]any
	want func(t *testing.T, r trace.Request)
}

// contractLog is an OpenAI-style request log whose requests carry every
// feature of the workload contract: images as data URIs of known sizes (one
// repeated) and by URL, audio, tools and tool_choice, JSON schemas through
// response_format and vLLM's guided_json (one schema repeated), a grammar,
// logprobs, n = 2, seeds, top_k, penalties, stop sequences, reasoning effort
// and LoRA adapters served under their own model names.
func contractLog(t testing.TB) []contractCase {
	imgA := contractImage(t, 640, 480, "png", 10)
	imgB := contractImage(t, 300, 200, "jpeg", 200)
	wav := contractWAV(1500)
	tools := []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather_secretTool", "description": "Weather for a city",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "lookup_order_secretTool", "description": "Find an order",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "integer"}}}}},
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"answer_secretSchema": map[string]any{"type": "string"},
		"confidence": map[string]any{"type": "number"}}, "required": []any{"answer_secretSchema"}}
	user := func(parts ...any) []any {
		return []any{map[string]any{"role": "system", "content": "You are terse."}, map[string]any{"role": "user", "content": parts}}
	}
	text := func(s string) any { return map[string]any{"type": "text", "text": s} }
	img := func(url string) any {
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}}
	}
	rec := func(i int, model string, req map[string]any, prompt, completion int) map[string]any {
		req["model"], req["max_tokens"], req["stream"] = model, completion, true
		return map[string]any{"id": fmt.Sprintf("contract-%d", i), "timestamp": 1767225600.0 + float64(i)*0.5, "end_time": 1767225600.0 + float64(i)*0.5 + 0.4,
			"request":  req,
			"response": map[string]any{"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion}, "choices": []any{map[string]any{"finish_reason": "stop"}}}}
	}
	sized := func(w, h []int32) func(t *testing.T, r trace.Request) {
		return func(t *testing.T, r trace.Request) {
			t.Helper()
			if int(r.ImageCount) != len(w) || !slices.Equal(r.ImageWidthsPx, w) || !slices.Equal(r.ImageHeightsPx, h) {
				t.Errorf("images %d %v×%v, want %v×%v", r.ImageCount, r.ImageWidthsPx, r.ImageHeightsPx, w, h)
			}
		}
	}
	return []contractCase{
		{rec(0, "sql-lora", map[string]any{"messages": user(text("Describe both pictures."), img(imgA), img(imgB)), "tools": tools, "tool_choice": "auto", "seed": 7}, 2200, 40),
			func(t *testing.T, r trace.Request) {
				sized([]int32{640, 300}, []int32{480, 200})(t, r)
				if r.Model != "llama-3.1-8b" || r.Adapter != "sql-lora" {
					t.Errorf("model %q adapter %q, want the base and the adapter apart", r.Model, r.Adapter)
				}
				if r.ToolCount != 2 || r.ToolTokens < 40 || r.ToolChoice != "auto" || r.Seed == nil || *r.Seed != 7 {
					t.Errorf("tools %d (%d tokens) choice %q seed %v", r.ToolCount, r.ToolTokens, r.ToolChoice, r.Seed)
				}
			}},
		{rec(1, "llama-3.1-8b", map[string]any{"messages": user(text("Again, and this one."), img(imgA), img("https://img.example/cat.png")),
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "strict": true, "schema": schema}},
			"logprobs":        true, "top_logprobs": 3, "n": 2}, 1500, 30),
			func(t *testing.T, r trace.Request) {
				sized([]int32{640, 0}, []int32{480, 0})(t, r)
				if r.OutputFormat != trace.OutputJSONSchema || r.SchemaTokens < 20 || r.SchemaID == 0 || !r.Logprobs || r.TopLogprobs == nil || *r.TopLogprobs != 3 || r.N != 2 {
					t.Errorf("format %q schema %d tokens id %d logprobs %v top %v n %d", r.OutputFormat, r.SchemaTokens, r.SchemaID, r.Logprobs, r.TopLogprobs, r.N)
				}
				if r.Adapter != "" {
					t.Errorf("a base model's request has adapter %q", r.Adapter)
				}
			}},
		{rec(2, "chat-lora", map[string]any{"messages": user(text("Transcribe."), map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": media.DataURI("", wav)[len("data:;base64,"):], "format": "wav"}}),
			"stop": []any{"\n\n", "END"}, "presence_penalty": 0.5}, 120, 20),
			func(t *testing.T, r trace.Request) {
				if r.AudioCount != 1 || !slices.Equal(r.AudioMs, []int64{1500}) || len(r.AudioIDs) != 1 || r.StopCount != 2 || r.PresencePenalty == nil || *r.PresencePenalty != 0.5 {
					t.Errorf("audio %d %v stops %d presence %v", r.AudioCount, r.AudioMs, r.StopCount, r.PresencePenalty)
				}
				if r.Adapter != "chat-lora" || !slices.Contains(r.Features, trace.FeatureAudio) {
					t.Errorf("adapter %q features %v", r.Adapter, r.Features)
				}
			}},
		{rec(3, "llama-3.1-8b", map[string]any{"messages": user(text("Give me JSON.")), "guided_json": schema, "reasoning_effort": "high", "top_k": 40, "frequency_penalty": -0.5}, 60, 50),
			func(t *testing.T, r trace.Request) {
				if r.OutputFormat != trace.OutputJSONSchema || r.ReasoningEffort != "high" || r.TopK == nil || *r.TopK != 40 || r.FrequencyPenalty == nil || *r.FrequencyPenalty != -0.5 {
					t.Errorf("format %q effort %q top_k %v frequency %v", r.OutputFormat, r.ReasoningEffort, r.TopK, r.FrequencyPenalty)
				}
			}},
		{rec(4, "llama-3.1-8b", map[string]any{"prompt": "Once upon a time", "seed": 11}, 5, 16),
			func(t *testing.T, r trace.Request) {
				if r.API != trace.APICompletions || r.Seed == nil || *r.Seed != 11 || r.ImageCount != 0 {
					t.Errorf("api %q seed %v images %d", r.API, r.Seed, r.ImageCount)
				}
			}},
		{rec(5, "llama-3.1-8b", map[string]any{"messages": user(text("JSON please.")), "response_format": map[string]any{"type": "json_object"}}, 30, 20),
			func(t *testing.T, r trace.Request) {
				if r.OutputFormat != trace.OutputJSONObject || r.SchemaTokens != 0 || !slices.Contains(r.Features, trace.FeatureJSON) {
					t.Errorf("format %q schema %d features %v", r.OutputFormat, r.SchemaTokens, r.Features)
				}
			}},
		{rec(6, "sql-lora", map[string]any{"messages": user(text("Weather?"), img(imgB)), "tools": tools[:1],
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather_secretTool"}}, "n": 2, "seed": 3}, 900, 25),
			func(t *testing.T, r trace.Request) {
				sized([]int32{300}, []int32{200})(t, r)
				if r.ToolCount != 1 || r.ToolChoice != "function" || r.N != 2 {
					t.Errorf("tools %d choice %q n %d", r.ToolCount, r.ToolChoice, r.N)
				}
			}},
		{rec(7, "llama-3.1-8b", map[string]any{"messages": user(text("Same schema, new question.")),
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "schema": schema}}, "guided_regex": "ignored"}, 40, 30),
			func(t *testing.T, r trace.Request) {
				if r.OutputFormat != trace.OutputJSONSchema {
					t.Errorf("format %q", r.OutputFormat)
				}
			}},
		{rec(8, "llama-3.1-8b", map[string]any{"messages": user(text("Pick one.")), "structured_outputs": map[string]any{"regex": "(yes|no)_secretRegex"}}, 20, 2),
			func(t *testing.T, r trace.Request) {
				if r.OutputFormat != trace.OutputRegex || r.SchemaTokens == 0 || !slices.Contains(r.Features, trace.FeatureGrammar) {
					t.Errorf("format %q schema %d features %v", r.OutputFormat, r.SchemaTokens, r.Features)
				}
			}},
	}
}

// contractLogBytes is the contract log as JSONL.
func contractLogBytes(t testing.TB) []byte {
	var b bytes.Buffer
	for _, c := range contractLog(t) {
		line, err := json.Marshal(c.rec)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	// A rejected line (no timestamp) with a tool and a schema: the rejects
	// file must not carry them either.
	b.WriteString(`{"id":"contract-bad","request":{"model":"m","tools":[{"type":"function","function":{"name":"bad_secretTool"}}],"guided_json":{"title":"x_secretSchema"},"prompt":"x"}}` + "\n")
	return b.Bytes()
}

// TestContractFixtureIsCurrent keeps testdata/logs/contract.jsonl (read by
// the replay round-trip test in cmd/servetrace) equal to what contractLog
// builds; -update-contract rewrites it.
func TestContractFixtureIsCurrent(t *testing.T) {
	path := filepath.Join("testdata", "logs", "contract.jsonl")
	want := contractLogBytes(t)
	if *updateContract {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: go test ./datasets -run TestContractFixtureIsCurrent -update-contract", path)
	}
}

func TestContractConverts(t *testing.T) {
	rows, man, out := convertLog(t, filepath.Join("testdata", "logs", "contract.jsonl"), filepath.Join("testdata", "logs", "contract.map"))
	cases := contractLog(t)
	if len(rows) != len(cases) || man.Rejects != 1 {
		t.Fatalf("%d rows and %d rejects, want %d and 1", len(rows), man.Rejects, len(cases))
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) { c.want(t, rows[i]) })
	}
	// The same image, in two requests, has one id; two images differ.
	if rows[0].ImageIDs[0] != rows[1].ImageIDs[0] || rows[0].ImageIDs[0] == rows[0].ImageIDs[1] || rows[0].ImageIDs[1] != rows[6].ImageIDs[0] {
		t.Errorf("image ids %v %v %v: a repeated image must keep its id", rows[0].ImageIDs, rows[1].ImageIDs, rows[6].ImageIDs)
	}
	// The same schema through response_format and guided_json: one id.
	if rows[1].SchemaID != rows[7].SchemaID || rows[1].SchemaID != rows[3].SchemaID || rows[1].SchemaTokens != rows[3].SchemaTokens {
		t.Errorf("schema ids %d %d %d (tokens %d, %d): the same schema must keep its id and size", rows[1].SchemaID, rows[7].SchemaID, rows[3].SchemaID, rows[1].SchemaTokens, rows[3].SchemaTokens)
	}
	if !slices.ContainsFunc(man.Notes, func(n string) bool { return bytes.Contains([]byte(n), []byte("1 images were logged by URL only")) }) {
		t.Errorf("notes %q: the URL-only image must be counted", man.Notes)
	}
	// Nothing of an image's bytes, a tool's name or a schema's text
	// reaches any file: the data URIs' base64, and the names.
	var needles []needle
	for _, s := range []string{"secretTool", "secretSchema", "secretRegex", "img.example", "Weather for a city"} {
		needles = append(needles, needle{what: s, b: []byte(s)})
	}
	for _, c := range cases[:1] {
		parts := c.rec["request"].(map[string]any)["messages"].([]any)[1].(map[string]any)["content"].([]any)
		for _, p := range parts[1:] {
			uri := p.(map[string]any)["image_url"].(map[string]any)["url"].(string)
			_, raw, _ := media.ParseDataURI(uri)
			needles = append(needles, needle{what: "image base64", b: []byte(uri[40:80])}, needle{what: "image bytes", b: raw[100:132]})
		}
	}
	scanForNeedles(t, out, needles)
}

func TestContractInputCountedWithoutUsage(t *testing.T) {
	// Without usage, the prompt is the text's tokens plus the images' by
	// media's rule plus the tool definitions' JSON.
	img := contractImage(t, 512, 512, "png", 1)
	line := fmt.Sprintf(`{"timestamp":1767225600,"request":{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":%q}}]}],"tools":[{"type":"function","function":{"name":"f"}}]}}`, img)
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, _, _ := convertLog(t, path, "openai")
	tok, err := tokenize.Get("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	text := int64(tok.Count(message{role: "user", text: "hi"}.render()))
	tools := int64(tok.Count(`[{"function":{"name":"f"},"type":"function"}]`))
	if want := text + 324 + tools; rows[0].InputTokens != want {
		t.Errorf("input %d, want %d (text %d + 324 image tokens of 512×512 + tools %d)", rows[0].InputTokens, want, text, tools)
	}
	if rows[0].ToolTokens != tools {
		t.Errorf("tool tokens %d, want %d", rows[0].ToolTokens, tools)
	}
}

// TestAudioDataURIsKeepTheirIdentity: input_audio data given as data URIs
// or unpadded base64 decode; two different clips keep different ids, and
// data that does not decode still gets an id of its own.
func TestAudioDataURIsKeepTheirIdentity(t *testing.T) {
	a, b := contractWAV(1000), contractWAV(2000)
	line := func(ts int, data string) string {
		return fmt.Sprintf(`{"timestamp":%d,"request":{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":%q,"format":"wav"}}]}]}}`, 1767225600+ts, data)
	}
	raw := base64.RawStdEncoding.EncodeToString(b)
	lines := []string{line(0, media.DataURI("audio/wav", a)), line(1, media.DataURI("audio/wav", b)), line(2, raw), line(3, "!!not base64!!"), line(4, "??other??")}
	path := filepath.Join(t.TempDir(), "audio.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, _, _ := convertLog(t, path, "openai")
	ms := []int64{rows[0].AudioMs[0], rows[1].AudioMs[0], rows[2].AudioMs[0], rows[3].AudioMs[0]}
	if !slices.Equal(ms, []int64{1000, 2000, 2000, 0}) {
		t.Errorf("durations %v, want 1000, 2000, 2000 (unpadded base64), 0 (undecodable)", ms)
	}
	if rows[0].AudioIDs[0] == rows[1].AudioIDs[0] || rows[1].AudioIDs[0] != rows[2].AudioIDs[0] || rows[3].AudioIDs[0] == rows[4].AudioIDs[0] {
		t.Errorf("audio ids %d %d %d %d %d: different clips must differ, the same clip match", rows[0].AudioIDs[0], rows[1].AudioIDs[0], rows[2].AudioIDs[0], rows[3].AudioIDs[0], rows[4].AudioIDs[0])
	}
}
