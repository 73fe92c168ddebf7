package sim

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/tokenize"
)

// pngOf encodes a blank width×height PNG with the standard library, apart
// from internal/media's synthesizer.
func pngOf(t *testing.T, width, height int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, width, height))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func dataURI(mediaType string, b []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(b)
}

func wavOf(t *testing.T, id uint64, ms int64) string {
	t.Helper()
	b, err := media.SynthWAV(id, ms)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func cl100k(t *testing.T) *tokenize.Tokenizer {
	t.Helper()
	tok, err := tokenize.Get(tokenize.CL100K)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// response is the part of a non-streamed response the tests read.
type response struct {
	Choices []struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content string `json:"content"`
		} `json:"message"`
		Logprobs json.RawMessage `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			ImageTokens int `json:"image_tokens"`
			AudioTokens int `json:"audio_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// call posts a JSON body and decodes the answer.
func call(t *testing.T, url, body string) (int, response) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("answer is not JSON (status %d): %v: %s", resp.StatusCode, err, b)
	}
	return resp.StatusCode, r
}

// streamTTFT posts a streaming request and returns the time to its first
// event carrying content (or reasoning), reading the rest of the stream.
func streamTTFT(t *testing.T, url, body string) time.Duration {
	t.Helper()
	start := time.Now()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var ttft time.Duration
	for sc.Scan() {
		line := sc.Text()
		if ttft == 0 && (strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) || strings.Contains(line, `"text":"`) && !strings.Contains(line, `"text":""`)) {
			ttft = time.Since(start)
		}
	}
	if ttft == 0 {
		t.Fatal("no token in the stream")
	}
	return ttft
}

// minTTFT is the least of three TTFTs: a stall of the loaded test machine
// lengthens one, not all three.
func minTTFT(t *testing.T, url, body string) time.Duration {
	t.Helper()
	best := time.Duration(math.MaxInt64)
	for range 3 {
		best = min(best, streamTTFT(t, url, body))
	}
	return best
}

func chatBody(extra string, content string) string {
	return `{"model":"servetrace-sim","max_tokens":1,"stream":true,"messages":[{"role":"user","content":` + content + `}]` + extra + `}`
}

// TestPromptTokenRule: a request's prompt tokens are each message's text
// (its text parts joined), each image's and clip's tokens, and the tools'
// JSON as sent, counted here independently: the image and audio token
// counts by hand from Qwen2-VL's and Qwen2-Audio's rules, the text and the
// tools with the tokenizer.
func TestPromptTokenRule(t *testing.T) {
	img := pngOf(t, 300, 200)
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(img) }))
	defer images.Close()
	rs := start(t, fast())
	tok := cl100k(t)
	// 640×480: sides rounded to multiples of 28, 476×644 = 17×23 blocks;
	// 300×200: 196×308 = 7×11 blocks; 2.5 s of audio at 25 tokens/s = 63
	// (rounded up).
	const tok640x480, tok300x200, tok2500ms = 391, 77, 63
	tools := `[ {"type": "function", "function": {"name": "get_weather",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}} ]`
	cases := []struct {
		name              string
		messages, extra   string
		text              []string // each message's text, joined
		images, audio     int
		wantUsageDetails  bool
		wantToolsInPrompt bool
	}{
		{"text, two inline images, a clip and tools",
			`[{"role":"system","content":"You answer briefly."},{"role":"user","content":[{"type":"text","text":"Compare these"},` +
				`{"type":"image_url","image_url":{"url":"` + dataURI("image/png", pngOf(t, 640, 480)) + `"}},{"type":"text","text":" two pictures and this clip"},` +
				`{"type":"image_url","image_url":{"url":"` + dataURI("image/png", img) + `","detail":"high"}},` +
				`{"type":"input_audio","input_audio":{"data":"` + wavOf(t, 3, 2500) + `","format":"wav"}}]}]`,
			`,"tools":` + tools + `,"tool_choice":"auto"`,
			[]string{"You answer briefly.", "Compare these two pictures and this clip"}, tok640x480 + tok300x200, tok2500ms, true, true},
		{"an image fetched from a loopback URL",
			`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + images.URL + `/cat.png?size=small"}},{"type":"text","text":"what is it?"}]}]`,
			"", []string{"what is it?"}, tok300x200, 0, true, false},
		{"image_url as a bare string, tools null",
			`[{"role":"user","content":[{"type":"image_url","image_url":"` + dataURI("image/png", img) + `"}]}]`,
			`,"tools":null`, []string{""}, tok300x200, 0, true, false},
		{"text only, empty tools", `[{"role":"user","content":"just text"},{"role":"assistant","content":null}]`, `,"tools":[]`,
			[]string{"just text", ""}, 0, 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.images + c.audio
			for _, s := range c.text {
				want += tok.Count(s)
			}
			if c.wantToolsInPrompt {
				want += tok.Count(tools)
			}
			status, r := call(t, rs.URL+"/v1/chat/completions", `{"model":"servetrace-sim","max_tokens":2,"messages":`+c.messages+c.extra+`}`)
			if status != 200 {
				t.Fatalf("status %d: %+v", status, r.Error)
			}
			if r.Usage.PromptTokens != want {
				t.Errorf("prompt_tokens %d, want %d", r.Usage.PromptTokens, want)
			}
			d := r.Usage.PromptTokensDetails
			switch {
			case !c.wantUsageDetails && d != nil && (d.ImageTokens != 0 || d.AudioTokens != 0):
				t.Errorf("prompt_tokens_details %+v for a text-only prompt", *d)
			case c.wantUsageDetails && (d == nil || d.ImageTokens != c.images || d.AudioTokens != c.audio):
				t.Errorf("prompt_tokens_details %+v, want image %d, audio %d", d, c.images, c.audio)
			}
			// /tokenize counts the same way.
			resp := post(t, rs.URL+"/tokenize", `{"model":"servetrace-sim","messages":`+c.messages+c.extra+`}`)
			var tk struct{ Count int }
			if err := json.NewDecoder(resp.Body).Decode(&tk); err != nil || tk.Count != want {
				t.Errorf("/tokenize count %d (%v), want %d", tk.Count, err, want)
			}
		})
	}
}

// TestBadRequestsNameWhatIsWrong: media that does not decode is refused
// naming its message and part; an image URL off loopback is refused before
// any connection; malformed feature fields are refused.
func TestBadRequestsNameWhatIsWrong(t *testing.T) {
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	rs := start(t, fast())
	part := func(p string) string {
		return `[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},` + p + `]}]`
	}
	cases := []struct {
		name, messages, extra, want string
	}{
		{"an image that is not one", part(`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAA"}}`), "", "messages[1].content[2]: image does not decode"},
		{"bad base64", part(`{"type":"image_url","image_url":{"url":"data:image/png;base64,!!!"}}`), "", "messages[1].content[2]: image_url does not decode"},
		{"a public host", part(`{"type":"image_url","image_url":{"url":"http://192.0.2.7/cat.png"}}`), "",
			"messages[1].content[2]: image URL host not allowed: the simulator fetches loopback URLs only"},
		{"a host name", part(`{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}`), "", "image URL host not allowed"},
		{"a URL answering 404", part(`{"type":"image_url","image_url":{"url":"` + missing.URL + `/x.png"}}`), "", "messages[1].content[2]: image URL answered HTTP 404"},
		{"not a URL", part(`{"type":"image_url","image_url":{"url":"ftp://127.0.0.1/x.png"}}`), "", "neither a data URI nor an http(s) URL"},
		{"mp3 audio", part(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"mp3"}}`), "", `messages[1].content[2]: input_audio format "mp3" is not supported`},
		{"audio that is not WAV", part(`{"type":"input_audio","input_audio":{"data":"AAAAAAAA","format":"wav"}}`), "", "messages[1].content[2]: input_audio does not decode"},
		{"an unknown part", part(`{"type":"video_url","video_url":{"url":"x"}}`), "", `messages[1].content[2]: part type "video_url" is not supported`},
		{"n of 129", part(`{"type":"text","text":"c"}`), `,"n":129`, "n must be between 1 and 128"},
		{"n of 0", part(`{"type":"text","text":"c"}`), `,"n":0`, "n must be between 1 and 128"},
		{"top_logprobs of 21", part(`{"type":"text","text":"c"}`), `,"logprobs":true,"top_logprobs":21`, "top_logprobs must be between 0 and 20"},
		{"tool_choice unknown", part(`{"type":"text","text":"c"}`), `,"tool_choice":"always"`, "tool_choice must be"},
		{"tools not a list", part(`{"type":"text","text":"c"}`), `,"tools":{"type":"function"}`, "tools must be a list"},
		{"stop a number", part(`{"type":"text","text":"c"}`), `,"stop":5`, "stop must be a string or a list of strings"},
		{"two structured outputs", part(`{"type":"text","text":"c"}`), `,"response_format":{"type":"json_object"},"guided_regex":"a+"`,
			"only one kind of structured output may be asked; got response_format and guided_regex"},
		{"json_schema without a schema", part(`{"type":"text","text":"c"}`), `,"response_format":{"type":"json_schema"}`, "needs a json_schema object"},
		{"guided_json not JSON", part(`{"type":"text","text":"c"}`), `,"guided_json":"{nope"`, "guided_json is not a JSON schema"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, r := call(t, rs.URL+"/v1/chat/completions", `{"model":"servetrace-sim","max_tokens":1,"messages":`+c.messages+c.extra+`}`)
			if status != 400 || r.Error == nil || !strings.Contains(r.Error.Message, c.want) {
				t.Errorf("status %d, error %+v; want 400 containing %q", status, r.Error, c.want)
			}
		})
	}
}

// TestImageEncoderCostAndCache: an image request's TTFT exceeds a text
// request's of the same text by the encoder's cost for its tokens, which
// the engine charges exactly; the same image again is an encoder cache hit
// and costs nothing more.
func TestImageEncoderCostAndCache(t *testing.T) {
	const perToken = 500 * time.Microsecond
	const imageTokens = 391 // 640×480, by hand (see TestPromptTokenRule)
	const encoderCost = imageTokens * perToken
	url, s := startEngine(t, CostModel{IterBase: 2 * time.Millisecond, EncoderPerImageToken: perToken}, nil)
	url += "/v1/chat/completions"
	text := chatBody("", `"describe the picture"`)
	withImage := chatBody("", `[{"type":"text","text":"describe the picture"},{"type":"image_url","image_url":{"url":"`+dataURI("image/png", pngOf(t, 640, 480))+`"}}]`)

	base := minTTFT(t, url, text)
	first := streamTTFT(t, url, withImage)
	t.Logf("TTFT: text %v, with a %d-token image %v; encoder cost %v", base, imageTokens, first, encoderCost)
	if first-base < encoderCost*8/10 {
		t.Errorf("the image added %v to TTFT, want at least 0.8 × %v", first-base, encoderCost)
	}
	st := idleStats(t, s.engine)
	if st.charged.encoder != encoderCost || st.mmQueries != 1 || st.mmHits != 0 {
		t.Errorf("after the first image: encoder charged %v, %d queries, %d hits; want %v, 1, 0", st.charged.encoder, st.mmQueries, st.mmHits, encoderCost)
	}
	streamTTFT(t, url, withImage)
	st = idleStats(t, s.engine)
	if st.charged.encoder != encoderCost || st.mmQueries != 2 || st.mmHits != 1 {
		t.Errorf("after the same image again: encoder charged %v, %d queries, %d hits; want %v (no more), 2, 1", st.charged.encoder, st.mmQueries, st.mmHits, encoderCost)
	}
	m := scrape(t, strings.TrimSuffix(url, "/v1/chat/completions"))
	if m["vllm:mm_cache_queries_total"] != 2 || m["vllm:mm_cache_hits_total"] != 1 {
		t.Errorf("/metrics: mm cache queries %v, hits %v; want 2, 1", m["vllm:mm_cache_queries_total"], m["vllm:mm_cache_hits_total"])
	}
}

// sample is one sample of a metric family: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// labelled returns the samples of one metric family.
func labelled(t *testing.T, url, name string) []sample {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	var out []sample
	for _, m := range fams[name].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out = append(out, sample{l, m.GetGauge().GetValue() + m.GetCounter().GetValue()})
	}
	return out
}

// TestLoRALoadsAndEvictions: with one adapter slot, the first request of
// an adapter pays the load cost and a repeat does not; each other adapter
// loads and evicts the last. /v1/models lists the adapters with their base
// model as parent, and /metrics has vLLM's info gauge.
func TestLoRALoadsAndEvictions(t *testing.T) {
	const load = 200 * time.Millisecond
	url, s := startEngine(t, CostModel{IterBase: time.Millisecond, LoRALoadCost: load}, func(o *Options) {
		o.LoRAModules, o.MaxLoRAs = []string{"sql-lora", "chat-lora", "code-lora"}, 1
	})
	body := func(model string) string {
		return `{"model":"` + model + `","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	}
	gen := url + "/v1/chat/completions"
	base := minTTFT(t, gen, body(DefaultModel))
	first := streamTTFT(t, gen, body("sql-lora"))
	t.Logf("TTFT: base model %v, first request of an adapter %v; load cost %v", base, first, load)
	if first-base < load*8/10 {
		t.Errorf("the adapter's first request added %v to TTFT, want at least 0.8 × %v", first-base, load)
	}
	steps := []struct {
		model            string
		loads, evictions float64
		wantCharged      time.Duration
	}{
		{"sql-lora", 1, 0, load}, // a repeat: already in its slot
		{"chat-lora", 2, 1, 2 * load},
		{"code-lora", 3, 2, 3 * load},
		{DefaultModel, 3, 2, 3 * load},
	}
	for _, st := range steps {
		streamTTFT(t, gen, body(st.model))
		es := idleStats(t, s.engine)
		m := scrape(t, url)
		if m["servetrace_sim:lora_loads_total"] != st.loads || m["servetrace_sim:lora_evictions_total"] != st.evictions || es.charged.loraLoad != st.wantCharged {
			t.Errorf("after %s: %v loads, %v evictions, %v charged; want %v, %v, %v", st.model, m["servetrace_sim:lora_loads_total"],
				m["servetrace_sim:lora_evictions_total"], es.charged.loraLoad, st.loads, st.evictions, st.wantCharged)
		}
	}
	info := labelled(t, url, "vllm:lora_requests_info")
	want := map[string]string{"max_lora": "1", "running_lora_adapters": "", "waiting_lora_adapters": ""}
	if len(info) != 1 || !reflect.DeepEqual(info[0].labels, want) {
		t.Errorf("vllm:lora_requests_info %v, want one sample labelled %v", info, want)
	} else if now := float64(time.Now().Unix()); math.Abs(info[0].value-now) > 300 {
		t.Errorf("vllm:lora_requests_info is %v, want the scrape's unix time (about %.0f)", info[0].value, now)
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		}
	}
	json.NewDecoder(resp.Body).Decode(&list)
	var got []string
	for _, d := range list.Data {
		p := "null"
		if d.Parent != nil {
			p = *d.Parent
		}
		got = append(got, d.ID+"<"+p)
	}
	if want := []string{DefaultModel + "<null", "sql-lora<" + DefaultModel, "chat-lora<" + DefaultModel, "code-lora<" + DefaultModel}; !reflect.DeepEqual(got, want) {
		t.Errorf("/v1/models %v, want %v", got, want)
	}
	if status, _ := call(t, gen, strings.Replace(body("other-lora"), `"stream":true,`, "", 1)); status != 404 {
		t.Errorf("an adapter not served: status %d, want 404", status)
	}
}

// TestBatchHoldsAtMostMaxLoRAsAdapters: with one slot, a request for a
// second adapter waits until the first adapter's request has finished,
// while a base-model request runs beside it. The order is the engine's own
// (its token timestamps), not the client's.
func TestBatchHoldsAtMostMaxLoRAsAdapters(t *testing.T) {
	e := newEngineWith(EngineOptions{Cost: CostModel{IterBase: time.Millisecond}, MaxNumBatchedTokens: 1024, MaxNumSeqs: 8, KVBlocks: 256, BlockSize: 16, MaxWaiting: 8},
		engineFeatures{maxLoRAs: 1})
	defer e.stop()
	a := &seq{id: 1, promptLen: 20, maxTokens: 40, stopAt: 40, adapter: "a"}
	b := &seq{id: 2, promptLen: 20, maxTokens: 5, stopAt: 5, adapter: "b"}
	base := &seq{id: 3, promptLen: 20, maxTokens: 5, stopAt: 5}
	for _, s := range []*seq{a, b, base} {
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*seq{a, b, base} {
		waitDone(t, s)
	}
	if !b.firstAt.After(a.lastAt) {
		t.Errorf("adapter b's first token at %v, before adapter a's last at %v: two adapters in a batch of one slot", b.firstAt, a.lastAt)
	}
	if !base.lastAt.Before(a.lastAt) {
		t.Errorf("the base-model request ended at %v, not beside adapter a (ended %v)", base.lastAt, a.lastAt)
	}
	if st := e.snapshot(); st.loraLoads != 2 || st.loraEvictions != 1 {
		t.Errorf("%d loads, %d evictions; want 2, 1", st.loraLoads, st.loraEvictions)
	}
}

// waitDone reads a sequence's events until its choice 0 is done.
func waitDone(t *testing.T, s *seq) {
	t.Helper()
	var evs []tokenEvent
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-s.out.ready:
		case <-deadline:
			t.Fatalf("sequence %d not done after 10 s", s.id)
		}
		evs = s.out.take(evs)
		for _, ev := range evs {
			if ev.done && ev.choice == 0 {
				return
			}
		}
	}
}

// TestGrammarCompiledOnceThenCached: each form of structured output is
// compiled on its first use, the request waiting the compile cost, and
// found in the cache the second time, written differently (keys reordered,
// spacing) but the same constraint.
func TestGrammarCompiledOnceThenCached(t *testing.T) {
	const compile = 150 * time.Millisecond
	url, s := startEngine(t, CostModel{IterBase: time.Millisecond, GrammarCompileCost: compile}, nil)
	gen := url + "/v1/chat/completions"
	cases := []struct{ name, first, again string }{
		{"response_format json_schema",
			`,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}}}}`,
			`,"response_format":{"json_schema":{"schema":{"properties":{"b":{"type":"string"},"a":{"type":"integer"}}, "type":"object"},"name":"p"},"type":"json_schema"}`},
		{"guided_json as a string", `,"guided_json":"{\"type\":\"array\"}"`, `,"guided_json":{"type": "array"}`},
		{"json_object", `,"response_format":{"type":"json_object"}`, `,"structured_outputs":{"json_object":true}`},
		{"guided_regex", `,"guided_regex":"[a-z]+@[a-z]+\\.com"`, `,"structured_outputs":{"regex":"[a-z]+@[a-z]+\\.com"}`},
		{"guided_choice", `,"guided_choice":["yes","no"]`, `,"structured_outputs":{"choice":["yes","no"]}`},
		{"guided_grammar", `,"guided_grammar":"root ::= \"a\" | \"b\""`, `,"guided_grammar":"root ::= \"a\" | \"b\""`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ttft := streamTTFT(t, gen, chatBody(c.first, `"answer"`))
			st := idleStats(t, s.engine)
			if ttft < compile {
				t.Errorf("first use: TTFT %v, below the compile cost %v", ttft, compile)
			}
			if st.grammarCompiles != uint64(i+1) || st.grammarHits != uint64(i) || st.grammarCompileTime != time.Duration(i+1)*compile {
				t.Errorf("after the first use: %d compiles, %d hits, %v compiling; want %d, %d, %v", st.grammarCompiles, st.grammarHits, st.grammarCompileTime, i+1, i, time.Duration(i+1)*compile)
			}
			streamTTFT(t, gen, chatBody(c.again, `"answer"`))
			st = idleStats(t, s.engine)
			if st.grammarCompiles != uint64(i+1) || st.grammarHits != uint64(i+1) {
				t.Errorf("after the repeat: %d compiles, %d hits; want %d, %d", st.grammarCompiles, st.grammarHits, i+1, i+1)
			}
		})
	}
	m := scrape(t, url)
	if n := float64(len(cases)); m["servetrace_sim:grammar_compiles_total"] != n || m["servetrace_sim:grammar_cache_hits_total"] != n {
		t.Errorf("/metrics: %v compiles, %v hits; want %v each", m["servetrace_sim:grammar_compiles_total"], m["servetrace_sim:grammar_cache_hits_total"], n)
	}
}

// TestPerTokenFeatureCharges: on an idle engine, one request's grammar
// masks and logprobs cost their per-token constants for every token of
// every choice, and its adapter its per-adapter constant in every
// iteration it ran in, exactly as the cost model says.
func TestPerTokenFeatureCharges(t *testing.T) {
	const mask, lp, adapter = 7 * time.Microsecond, 11 * time.Microsecond, 13 * time.Microsecond
	cases := []struct {
		name             string
		n, maxTokens     int
		tokens, iterated int // tokens over the choices; iterations the request ran in
	}{
		{"one choice", 1, 20, 20, 20},    // a prefill with the first token, then 19 decodes
		{"three choices", 3, 10, 30, 10}, // one prefill gives each choice its first token
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, s := startEngine(t, CostModel{IterBase: time.Millisecond, GrammarMaskPerToken: mask, LogprobsPerToken: lp, LoRAPerAdapter: adapter},
				func(o *Options) { o.LoRAModules = []string{"a"} })
			status, r := call(t, url+"/v1/chat/completions", fmt.Sprintf(`{"model":"a","n":%d,"max_tokens":%d,"ignore_eos":true,"logprobs":true,"guided_regex":"[0-9]+",`+
				`"messages":[{"role":"user","content":"count"}]}`, c.n, c.maxTokens))
			if status != 200 || r.Usage.CompletionTokens != c.tokens {
				t.Fatalf("status %d, %d completion tokens; want 200, %d", status, r.Usage.CompletionTokens, c.tokens)
			}
			st := idleStats(t, s.engine).charged
			want := charges{grammarMask: time.Duration(c.tokens) * mask, logprobs: time.Duration(c.tokens) * lp, loraAdapters: time.Duration(c.iterated) * adapter}
			if st != want {
				t.Errorf("charged %+v, want %+v", st, want)
			}
		})
	}
}

// streamChoices reads a chat stream into each choice's content, finish
// reason and events, and the usage.
func streamChoices(t *testing.T, resp *http.Response) (content map[int]string, finish map[int]string, events [][]byte, completion int) {
	t.Helper()
	content, finish = map[int]string{}, map[int]string{}
	for _, e := range sseEvents(t, resp) {
		if e == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %s: %v", e, err)
		}
		if c.Usage != nil {
			completion = c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			content[ch.Index] += ch.Delta.Content + ch.Text
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
			if ch.Delta.Content+ch.Text != "" {
				events = append(events, []byte(e))
			}
		}
	}
	return content, finish, events, completion
}

// TestNChoices: n choices share one prefill (the prefix cache is queried
// once, for the prompt), stop on their own, stream with their index, and
// their tokens add up to usage.completion_tokens; every block is freed.
func TestNChoices(t *testing.T) {
	o := fast()
	o.StopRate = 1 // every choice stops early, at its own drawn length
	rs := start(t, o)
	s := rs.sim
	tok := cl100k(t)
	pb := promptBuilder(t)
	prompt := pb.Build(320, nil, 9)
	before := s.engine.snapshot()
	resp := post(t, rs.URL+"/v1/chat/completions", `{"model":"servetrace-sim","n":2,"max_tokens":60,"seed":5,"stream":true,"stream_options":{"include_usage":true},`+
		`"messages":[{"role":"user","content":"`+prompt+`"}]}`)
	content, finish, _, completion := streamChoices(t, resp)
	if len(content) != 2 || len(finish) != 2 {
		t.Fatalf("choices streamed %v, finish reasons %v; want indices 0 and 1", content, finish)
	}
	sum := 0
	for i, c := range content {
		n := tok.Count(c)
		sum += n
		t.Logf("choice %d: %d tokens, %s", i, n, finish[i])
	}
	if sum != completion || completion == 0 {
		t.Errorf("choices hold %d tokens, usage says %d", sum, completion)
	}
	st := idleStats(t, s.engine)
	if q := st.prefixQueries - before.prefixQueries; q != 320 {
		t.Errorf("the prefix cache was queried for %d tokens, want 320: the prompt prefilled once for both choices", q)
	}
	if st.usedBlocks != 0 {
		t.Errorf("%d blocks still referenced once idle", st.usedBlocks)
	}

	status, r := call(t, rs.URL+"/v1/completions", `{"model":"servetrace-sim","prompt":"tell me","n":3,"max_tokens":30}`)
	if status != 200 || len(r.Choices) != 3 {
		t.Fatalf("non-streamed n=3: status %d, %d choices", status, len(r.Choices))
	}
	sum = 0
	for i, c := range r.Choices {
		if c.Index != i {
			t.Errorf("choice %d has index %d", i, c.Index)
		}
		sum += tok.Count(c.Text)
	}
	if sum != r.Usage.CompletionTokens {
		t.Errorf("non-streamed choices hold %d tokens, usage says %d", sum, r.Usage.CompletionTokens)
	}
}

// TestLogprobsShape: streamed chat chunks carry a logprobs entry per token
// with the top alternatives asked; a completion carries the legacy lists,
// one entry per token.
func TestLogprobsShape(t *testing.T) {
	rs := start(t, fast())
	resp := post(t, rs.URL+"/v1/chat/completions", `{"model":"servetrace-sim","max_tokens":4,"logprobs":true,"top_logprobs":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	tokens := 0
	for _, e := range sseEvents(t, resp) {
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []struct {
						Token       string  `json:"token"`
						Logprob     float64 `json:"logprob"`
						TopLogprobs []struct {
							Token   string  `json:"token"`
							Logprob float64 `json:"logprob"`
						} `json:"top_logprobs"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil || len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		lp := c.Choices[0].Logprobs
		if lp == nil || len(lp.Content) != 1 {
			t.Fatalf("a one-token chunk without one logprobs entry: %s", e)
		}
		x := lp.Content[0]
		if x.Token != c.Choices[0].Delta.Content || x.Logprob > 0 || len(x.TopLogprobs) != 2 || x.TopLogprobs[0].Token != x.Token || x.TopLogprobs[1].Logprob >= x.Logprob {
			t.Errorf("logprobs entry %+v for token %q", x, c.Choices[0].Delta.Content)
		}
		tokens++
	}
	if tokens != 4 {
		t.Errorf("%d tokens with logprobs, want 4", tokens)
	}
	status, r := call(t, rs.URL+"/v1/completions", `{"model":"servetrace-sim","prompt":"hi","max_tokens":5,"logprobs":3}`)
	var legacy struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	if status != 200 || len(r.Choices) != 1 || json.Unmarshal(r.Choices[0].Logprobs, &legacy) != nil {
		t.Fatalf("status %d, choices %+v", status, r.Choices)
	}
	if len(legacy.Tokens) != 5 || len(legacy.TokenLogprobs) != 5 || len(legacy.TopLogprobs) != 5 || len(legacy.TopLogprobs[0]) != 3 ||
		strings.Join(legacy.Tokens, "") != r.Choices[0].Text || legacy.TextOffset[1] != len(legacy.Tokens[0]) {
		t.Errorf("legacy logprobs %+v for text %q", legacy, r.Choices[0].Text)
	}
}

func TestSpecAlpha(t *testing.T) {
	for _, c := range []struct {
		p float64
		k int
	}{{0.7, 4}, {0.5, 1}, {0.9, 8}, {0.3, 3}} {
		a := specAlpha(c.p, c.k)
		sum, pow := 0.0, 1.0
		for range c.k {
			pow *= a
			sum += pow
		}
		if rate := sum / float64(c.k); math.Abs(rate-c.p) > 1e-9 {
			t.Errorf("specAlpha(%v, %d) = %v: acceptance rate %v", c.p, c.k, a, rate)
		}
	}
	if specAlpha(0, 4) != 0 || specAlpha(1, 4) != 1 || specAlpha(0.5, 0) != 0 {
		t.Error("specAlpha at the edges")
	}
}

// specRun streams one long completion under speculative decoding and
// returns its content events' token counts and the metrics after.
func specRun(t *testing.T, maxTokens int) ([]int, map[string]float64, *Server) {
	t.Helper()
	url, s := startEngine(t, CostModel{PerDraftToken: time.Nanosecond}, func(o *Options) {
		o.SpecTokens, o.SpecAcceptance, o.Seed = 4, 0.7, 11
	})
	tok := cl100k(t)
	resp := post(t, url+"/v1/completions", fmt.Sprintf(`{"model":"servetrace-sim","prompt":"go","max_tokens":%d,"ignore_eos":true,"stream":true}`, maxTokens))
	_, _, events, _ := streamChoices(t, resp)
	var sizes []int
	for _, e := range events {
		var c struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		json.Unmarshal(e, &c)
		sizes = append(sizes, tok.Count(c.Choices[0].Text))
	}
	idleStats(t, s.engine)
	return sizes, scrape(t, url), s
}

// TestSpecDecodingStreamsBursts: under speculative decoding each step's
// tokens come in one event: one event per draft step after the first
// token, k draft tokens a step, and the tokens add up.
func TestSpecDecodingStreamsBursts(t *testing.T) {
	sizes, m, s := specRun(t, 400)
	total, multi := 0, 0
	for _, n := range sizes {
		total += n
		if n > 1 {
			multi++
		}
	}
	drafts, draftTokens, accepted := m["vllm:spec_decode_num_drafts_total"], m["vllm:spec_decode_num_draft_tokens_total"], m["vllm:spec_decode_num_accepted_tokens_total"]
	if total != 400 || multi == 0 {
		t.Errorf("%d tokens in %d events, %d with several; want 400, some with several", total, len(sizes), multi)
	}
	if float64(len(sizes)) != drafts+1 || draftTokens != 4*drafts || accepted > draftTokens || accepted < 400-1-drafts {
		t.Errorf("%d events, %v drafts, %v draft tokens, %v accepted: want events = drafts + 1, 4 draft tokens a draft, accepted ≥ tokens − 1 − drafts", len(sizes), drafts, draftTokens, accepted)
	}
	if ch := idleStats(t, s.engine).charged.drafts; ch != time.Duration(draftTokens) {
		t.Errorf("draft verification charged %v, want %v draft tokens × 1 ns", ch, draftTokens)
	}
}

// TestLongSpecDecodingAcceptance: over some 5,000 seeded draft steps the
// counters' acceptance rate is SpecAcceptance within 0.02 (about 4 standard
// deviations) and the mean accepted length 1 + k·p.
func TestLongSpecDecodingAcceptance(t *testing.T) {
	if raceEnabled {
		t.Skip("a seeded statistical check: run by make test-timing")
	}
	_, m, _ := specRun(t, 20000)
	drafts, draftTokens, accepted := m["vllm:spec_decode_num_drafts_total"], m["vllm:spec_decode_num_draft_tokens_total"], m["vllm:spec_decode_num_accepted_tokens_total"]
	rate, length := accepted/draftTokens, 1+accepted/drafts
	t.Logf("%v drafts, %v draft tokens, %v accepted: acceptance rate %.4f (want 0.7), mean accepted length %.3f (want 3.8)", drafts, draftTokens, accepted, rate, length)
	if math.Abs(rate-0.7) > 0.02 || math.Abs(length-3.8) > 0.08 {
		t.Errorf("acceptance rate %.4f, mean accepted length %.3f; want 0.7 ± 0.02, 3.8 ± 0.08", rate, length)
	}
}

// TestRefuse: each refused feature gets vLLM's 400 (an unserved adapter
// its 404) and a request without it goes through.
func TestRefuse(t *testing.T) {
	img := dataURI("image/png", pngOf(t, 64, 64))
	user := func(content string) string { return `"messages":[{"role":"user","content":` + content + `}]` }
	cases := []struct {
		feature, body string
		status        int
		message       string
		typ           string
	}{
		{"image", user(`[{"type":"image_url","image_url":{"url":"` + img + `"}}]`), 400, "servetrace-sim is not a multimodal model", "BadRequestError"},
		{"audio", user(`[{"type":"input_audio","input_audio":{"data":"` + wavOf(t, 1, 100) + `","format":"wav"}}]`), 400, "servetrace-sim does not support audio input", "BadRequestError"},
		{"tools", user(`"hi"`) + `,"tools":[{"type":"function","function":{"name":"f"}}]`, 400,
			`tool calling is not enabled for this server ("auto" tool choice requires enable-auto-tool-choice and a tool-call-parser)`, "BadRequestError"},
		{"json", user(`"hi"`) + `,"response_format":{"type":"json_object"}`, 400, "structured output (response_format) is not supported", "BadRequestError"},
		{"json_schema", user(`"hi"`) + `,"guided_json":{"type":"object"}`, 400, "structured output (response_format) is not supported", "BadRequestError"},
		{"grammar", user(`"hi"`) + `,"structured_outputs":{"regex":"a+"}`, 400, "structured output (response_format) is not supported", "BadRequestError"},
		{"logprobs", user(`"hi"`) + `,"logprobs":true`, 400, "logprobs are not supported", "BadRequestError"},
		{"n", user(`"hi"`) + `,"n":2`, 400, "n > 1 is not supported", "BadRequestError"},
		{"seed", user(`"hi"`) + `,"seed":7`, 400, "seed is not supported", "BadRequestError"},
		{"lora", user(`"hi"`), 404, "The model `sql-lora` does not exist.", "NotFoundError"},
	}
	for _, c := range cases {
		t.Run(c.feature, func(t *testing.T) {
			o := fast()
			o.Refuse, o.LoRAModules = []string{c.feature}, []string{"sql-lora"}
			rs := start(t, o)
			model := "servetrace-sim"
			if c.feature == "lora" {
				model = "sql-lora"
			}
			resp := post(t, rs.URL+"/v1/chat/completions", `{"model":"`+model+`","max_tokens":1,`+c.body+`}`)
			var got map[string]any
			json.NewDecoder(resp.Body).Decode(&got)
			want := map[string]any{"error": map[string]any{"message": c.message, "type": c.typ, "param": nil, "code": float64(c.status)}}
			if resp.StatusCode != c.status || !reflect.DeepEqual(got, want) {
				t.Errorf("status %d, body %v; want %d, %v", resp.StatusCode, got, c.status, want)
			}
			if status, r := call(t, rs.URL+"/v1/chat/completions", `{"model":"servetrace-sim","max_tokens":1,`+user(`"plain text"`)+`}`); status != 200 {
				t.Errorf("a plain request: status %d, %+v", status, r.Error)
			}
		})
	}
}

func TestFeatureOptionsChecked(t *testing.T) {
	cases := []struct {
		field string
		mod   func(*Options)
	}{
		{"SpecTokens", func(o *Options) { o.SpecTokens = -1 }},
		{"SpecTokens", func(o *Options) { o.SpecTokens = 65 }},
		{"SpecAcceptance", func(o *Options) { o.SpecAcceptance = 1.5 }},
		{"SpecAcceptance", func(o *Options) { o.SpecAcceptance = math.NaN() }},
		{"Refuse", func(o *Options) { o.Refuse = []string{"video"} }},
		{"MaxLoRAs", func(o *Options) { o.MaxLoRAs = -1 }},
		{"LoRAModules", func(o *Options) { o.LoRAModules = []string{"a", "a"} }},
		{"LoRAModules", func(o *Options) { o.LoRAModules = []string{DefaultModel} }},
		{"LoRAModules", func(o *Options) { o.LoRAModules = []string{""} }},
		{"EncoderPerImageToken", func(o *Options) { o.Engine.Cost.EncoderPerImageToken = -1 }},
		{"PerDraftToken", func(o *Options) { o.Engine.Cost.PerDraftToken = -1 }},
	}
	for _, c := range cases {
		o := fast()
		c.mod(&o)
		_, err := New(o)
		var oe *opterr.Error
		if !errors.As(err, &oe) || oe.Field != c.field {
			t.Errorf("%s: err %v, want an opterr.Error naming %s", c.field, err, c.field)
		}
	}
}

func TestReasoningShare(t *testing.T) {
	for _, c := range []struct {
		ratio  float64
		effort string
		want   float64
	}{{0.4, "", 0.4}, {0.4, "medium", 0.4}, {0.4, "low", 0.2}, {0.4, "high", 0.8}, {0.6, "high", 0.9}, {0.95, "high", 0.95}, {0.4, "extreme", 0.4}} {
		if got := reasoningShare(c.ratio, c.effort); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("reasoningShare(%v, %q) = %v, want %v", c.ratio, c.effort, got, c.want)
		}
	}
}

// collect reads a request's events until all n choices are done and
// returns the tokens each got.
func collect(t *testing.T, s *seq, n int) []int {
	t.Helper()
	got := make([]int, n)
	done := 0
	var evs []tokenEvent
	deadline := time.After(20 * time.Second)
	for done < n {
		select {
		case <-s.out.ready:
		case <-deadline:
			t.Fatalf("after 20 s, %d of %d choices done, tokens %v", done, n, got)
		}
		evs = s.out.take(evs)
		for _, ev := range evs {
			got[ev.choice] += ev.tokens
			if ev.done {
				done++
			}
		}
	}
	return got
}

// TestChoicesSurvivePreemption: four choices sharing a prompt's blocks in a
// cache too small for all of them are preempted and recomputed, each still
// gets its full output, and every block is freed at the end.
func TestChoicesSurvivePreemption(t *testing.T) {
	e := newEngine(EngineOptions{Cost: CostModel{IterBase: time.Millisecond}, MaxNumBatchedTokens: 1024, MaxNumSeqs: 8, KVBlocks: 14, BlockSize: 16,
		MaxWaiting: 8, PrefixCaching: true})
	defer e.stop()
	ids := make([]int, 100)
	for i := range ids {
		ids[i] = i
	}
	// 100 + 60 tokens is 10 blocks a choice: one fits, four sharing their
	// 6 full prompt blocks need 6 + 4 × 4.
	s := &seq{id: 1, promptLen: 100, blockHashes: e.hashBlocks(ids), maxTokens: 60, stopAt: 60, n: 4, stopAts: []int{60, 60, 60, 60}}
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, s, 4); !reflect.DeepEqual(got, []int{60, 60, 60, 60}) {
		t.Errorf("choices got %v tokens, want 60 each", got)
	}
	st := idleStats(t, e)
	if st.preemptions == 0 {
		t.Error("no preemption in a cache too small for four choices")
	}
	if st.usedBlocks != 0 {
		t.Errorf("%d blocks still referenced once idle", st.usedBlocks)
	}
}

// TestAbortedChoicesFreeEverything: aborting a request after its choices
// forked drops every choice, frees every block and counts one abort.
func TestAbortedChoicesFreeEverything(t *testing.T) {
	e := newEngine(EngineOptions{Cost: CostModel{IterBase: time.Millisecond}, MaxNumBatchedTokens: 1024, MaxNumSeqs: 8, KVBlocks: 256, BlockSize: 16, MaxWaiting: 8})
	defer e.stop()
	s := &seq{id: 1, promptLen: 40, maxTokens: 1000, stopAt: 1000, n: 3, stopAts: []int{1000, 1000, 1000}}
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	var evs []tokenEvent
	for len(seen) < 3 { // every choice has tokens: all three are running
		<-s.out.ready
		evs = s.out.take(evs)
		for _, ev := range evs {
			seen[ev.choice] = true
		}
	}
	e.abort(s)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.snapshot()
		if st.running == 0 && st.aborted == 1 && st.usedBlocks == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the abort: %d running, %d aborted, %d blocks; want 0, 1, 0", st.running, st.aborted, st.usedBlocks)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUsageCachedTokens: the second of two identical prompts is served
// from the prefix cache, and usage says how much: every full block but
// the one holding the last token (vLLM's rule), the first time none.
func TestUsageCachedTokens(t *testing.T) {
	rs := start(t, fast())
	body := `{"model":"servetrace-sim","max_tokens":2,"messages":[{"role":"user","content":"` + strings.Repeat("the cache keeps this text ", 60) + `"}]}`
	var cached []int
	prompt := 0
	for range 2 {
		resp, err := http.Post(rs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || r.Usage.PromptTokensDetails == nil || r.Usage.PromptTokensDetails.CachedTokens == nil {
			t.Fatalf("usage %+v (%v): no cached_tokens", r.Usage, err)
		}
		prompt = r.Usage.PromptTokens
		cached = append(cached, *r.Usage.PromptTokensDetails.CachedTokens)
	}
	bs := DefaultOptions().Engine.BlockSize
	if want := []int{0, (prompt - 1) / bs * bs}; !slices.Equal(cached, want) || want[1] == 0 {
		t.Errorf("cached_tokens %v for a %d-token prompt sent twice, want %v", cached, prompt, want)
	}
}
