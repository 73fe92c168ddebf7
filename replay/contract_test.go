package replay

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/trace"
)

// contractServer is an OpenAI-compatible endpoint that keeps every
// request body by X-Request-Id and streams one token per choice. With
// refuse set it answers a request holding an image part with vLLM's 400.
type contractServer struct {
	mu     sync.Mutex
	bodies map[string]map[string]any
	refuse bool
}

func (s *contractServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		io.WriteString(w, `{"object":"list","data":[{"id":"base","object":"model"}]}`)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.bodies[r.Header.Get("X-Request-Id")] = body
	s.mu.Unlock()
	if s.refuse && strings.Contains(string(raw), `"image_url"`) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"base is not a multimodal model","type":"BadRequestError","param":null,"code":400}}`)
		return
	}
	n := 1
	if v, ok := body["n"].(float64); ok {
		n = int(v)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range n {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":%d,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\n", i)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
}

// body returns the recorded body of request id.
func (s *contractServer) body(t *testing.T, runID, id string) map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bodies[runID+"-"+id]
	if !ok {
		t.Fatalf("request %s was not received", id)
	}
	return b
}

// contractWorkload writes requests carrying every feature of the workload
// contract.
func contractWorkload(t *testing.T) (string, []trace.Request) {
	t.Helper()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	chat := func(i int, input int64) trace.Request {
		return trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("c%d", i)}, TS: t0.Add(time.Duration(i) * 10 * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: input, OutputTokens: 4, MaxTokens: 4, API: trace.APIChat, Stream: true, N: 1}}
	}
	reqs := []trace.Request{chat(0, 3000), chat(1, 2000), chat(2, 400), chat(3, 50), chat(4, 60)}
	r := &reqs[0]
	r.Adapter, r.N, r.Seed = "lora-a", 2, new(int64(9))
	r.Media = trace.Media{ImageCount: 2, ImageWidthsPx: []int32{640, 300}, ImageHeightsPx: []int32{480, 200}, ImageIDs: []int64{5, 6}}
	r.Calls = trace.Calls{ToolCount: 3, ToolTokens: 300, ToolChoice: "required"}
	r = &reqs[1]
	r.Media = trace.Media{ImageCount: 2, ImageWidthsPx: []int32{640, 0}, ImageHeightsPx: []int32{480, 0}, ImageIDs: []int64{5, 7}}
	r.Calls = trace.Calls{OutputFormat: trace.OutputJSONSchema, SchemaTokens: 80, SchemaID: 42, Logprobs: true}
	r.TopLogprobs = new(int32(2))
	r = &reqs[2]
	r.Media = trace.Media{AudioCount: 1, AudioMs: []int64{1500}, AudioIDs: []int64{8}}
	r.Calls = trace.Calls{StopCount: 2, ReasoningEffort: "high", OutputFormat: trace.OutputJSONSchema, SchemaTokens: 80, SchemaID: 42}
	r.TopK, r.PresencePenalty = new(int32(20)), new(0.5)
	r = &reqs[3]
	r.API, r.Features, r.Logprobs, r.TopLogprobs = trace.APICompletions, []string{trace.FeatureImage}, true, new(int32(3))
	r = &reqs[4]
	r.Calls = trace.Calls{OutputFormat: trace.OutputRegex, SchemaTokens: 30, SchemaID: 77}
	dir := filepath.Join(t.TempDir(), "workload")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range reqs {
		if err := w.Write(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	return dir, reqs
}

// userParts returns the parts of a chat body's last message.
func userParts(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	msgs := body["messages"].([]any)
	content, ok := msgs[len(msgs)-1].(map[string]any)["content"].([]any)
	if !ok {
		return nil
	}
	var out []map[string]any
	for _, p := range content {
		out = append(out, p.(map[string]any))
	}
	return out
}

// imageOf decodes an image part's data URI and returns its bytes and size.
func imageOf(t *testing.T, part map[string]any) ([]byte, int, int) {
	t.Helper()
	url := part["image_url"].(map[string]any)["url"].(string)
	_, data, err := media.ParseDataURI(url)
	if err != nil {
		t.Fatalf("image part: %v", err)
	}
	w, h, _, err := media.ImageConfig(data)
	if err != nil {
		t.Fatalf("image part does not decode: %v", err)
	}
	return data, w, h
}

func TestReplaySendsTheWorkloadContract(t *testing.T) {
	wl, reqs := contractWorkload(t)
	srv := &contractServer{bodies: map[string]map[string]any{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	rows, info := replayTo(t, ts.URL, wl, func(o *Options) { o.RunID = "run" })
	byID := map[string]trace.Result{}
	for _, r := range rows {
		byID[r.RequestID] = r
	}

	b0 := srv.body(t, "run", "c0")
	parts := userParts(t, b0)
	if len(parts) != 3 || parts[0]["type"] != "text" {
		t.Fatalf("request 0 parts %v, want text and two images", parts)
	}
	imgA, w, h := imageOf(t, parts[1])
	if w != 640 || h != 480 {
		t.Errorf("image 1 is %dx%d, want 640x480", w, h)
	}
	if _, w, h := imageOf(t, parts[2]); w != 300 || h != 200 {
		t.Errorf("image 2 is %dx%d, want 300x200", w, h)
	}
	if tools := b0["tools"].([]any); len(tools) != 3 || b0["tool_choice"] != "required" {
		t.Errorf("%d tools, tool_choice %v; want 3 and required", len(tools), b0["tool_choice"])
	}
	if b0["seed"] != 9.0 || b0["n"] != 2.0 || b0["model"] != "lora-a" {
		t.Errorf("seed %v n %v model %v; want 9, 2, lora-a", b0["seed"], b0["n"], b0["model"])
	}
	if ci := byID["c0"].ChoiceIndex; !slices.Contains(ci, 0) || !slices.Contains(ci, 1) || len(ci) != len(byID["c0"].TokenTimesNs) {
		t.Errorf("choice index %v for token times %v: want both choices recorded", ci, byID["c0"].TokenTimesNs)
	}

	b1 := srv.body(t, "run", "c1")
	p1 := userParts(t, b1)
	if again, _, _ := imageOf(t, p1[1]); string(again) != string(imgA) {
		t.Error("image id 5 was sent twice with different bytes: a server's image cache would miss")
	}
	if _, w, h := imageOf(t, p1[2]); w != media.DefaultImageWidth || h != media.DefaultImageHeight {
		t.Errorf("an image of unknown size was sent at %dx%d, want the default", w, h)
	}
	rf := b1["response_format"].(map[string]any)
	if rf["type"] != "json_schema" || b1["logprobs"] != true || b1["top_logprobs"] != 2.0 {
		t.Errorf("response_format %v logprobs %v top %v", rf["type"], b1["logprobs"], b1["top_logprobs"])
	}
	b2 := srv.body(t, "run", "c2")
	s1, _ := json.Marshal(rf["json_schema"].(map[string]any)["schema"])
	s2, _ := json.Marshal(b2["response_format"].(map[string]any)["json_schema"].(map[string]any)["schema"])
	if string(s1) != string(s2) || len(s1) < 100 {
		t.Errorf("schema id 42 sent as %d and %d bytes that differ: a grammar cache would miss", len(s1), len(s2))
	}
	audio := userParts(t, b2)[1]["input_audio"].(map[string]any)
	wav, err := base64.StdEncoding.DecodeString(audio["data"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if ms, err := media.WAVDuration(wav); err != nil || ms != 1500 || audio["format"] != "wav" {
		t.Errorf("audio %d ms (%v), format %v; want 1500 ms wav", ms, err, audio["format"])
	}
	if len(b2["stop"].([]any)) != 2 || b2["top_k"] != 20.0 || b2["presence_penalty"] != 0.5 || b2["reasoning_effort"] != "high" {
		t.Errorf("stop %v top_k %v presence %v effort %v", b2["stop"], b2["top_k"], b2["presence_penalty"], b2["reasoning_effort"])
	}
	b3 := srv.body(t, "run", "c3")
	if b3["logprobs"] != 3.0 || b3["messages"] != nil {
		t.Errorf("completions logprobs %v (want the count 3), messages %v", b3["logprobs"], b3["messages"])
	}
	if r := byID["c3"]; !slices.Equal(r.FeaturesStripped, []string{FeatureImage}) {
		t.Errorf("completions with an image: stripped %v, want image (no place for it)", r.FeaturesStripped)
	}
	b4 := srv.body(t, "run", "c4")
	if re, ok := b4["structured_outputs"].(map[string]any)["regex"].(string); !ok || !strings.HasPrefix(re, "(") {
		t.Errorf("structured_outputs %v, want a regex", b4["structured_outputs"])
	}

	// The prompt's text leaves room for what the server counts besides.
	for _, q := range reqs[:3] {
		if r := byID[q.RequestID]; r.PromptTokensSent != q.InputTokens {
			t.Errorf("%s: prompt_tokens_sent %d, want the trace's %d", q.RequestID, r.PromptTokensSent, q.InputTokens)
		}
	}
	want := map[string]trace.FeatureCount{
		FeatureImage: {Carried: 3, Sent: 2, Stripped: 1}, FeatureAudio: {Carried: 1, Sent: 1}, FeatureTools: {Carried: 1, Sent: 1},
		FeatureSchema: {Carried: 2, Sent: 2}, FeatureGrammar: {Carried: 1, Sent: 1}, FeatureLogprobs: {Carried: 2, Sent: 2},
		FeatureN: {Carried: 1, Sent: 1}, FeatureSeed: {Carried: 1, Sent: 1}, FeatureTopK: {Carried: 1, Sent: 1},
		FeaturePenalties: {Carried: 1, Sent: 1}, FeatureStop: {Carried: 1, Sent: 1}, FeatureReasoningEffort: {Carried: 1, Sent: 1},
		FeatureAdapter: {Carried: 1, Sent: 1},
	}
	for f, w := range want {
		if got := info.Features[f]; got != w {
			t.Errorf("run.json features[%s] = %+v, want %+v", f, got, w)
		}
	}
	if len(info.Features) != len(want) {
		t.Errorf("run.json features %v, want exactly %v", info.Features, want)
	}
}

func TestReplayStripsAndCountsRefusals(t *testing.T) {
	wl, _ := contractWorkload(t)
	srv := &contractServer{bodies: map[string]map[string]any{}, refuse: true}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	rows, info := replayTo(t, ts.URL, wl, func(o *Options) { o.RunID = "run" })
	for _, r := range rows {
		sentImage := slices.Contains(r.FeaturesSent, FeatureImage)
		if sentImage != (r.Outcome == trace.OutcomeHTTPError) || sentImage != slices.Equal(r.FeaturesRefused, []string{FeatureImage}) {
			t.Errorf("%s: sent %v, outcome %s, refused %v; a request with an image must be refused for it, and only it", r.RequestID, r.FeaturesSent, r.Outcome, r.FeaturesRefused)
		}
	}
	if fc := info.Features[FeatureImage]; fc != (trace.FeatureCount{Carried: 3, Sent: 2, Stripped: 1, Refused: 2}) {
		t.Errorf("image counts %+v, want 3 carried, 2 sent and refused, 1 stripped", fc)
	}
	if fc := info.Features[FeatureTools]; fc.Refused != 0 {
		t.Errorf("tools counted refused %d times: the message named images only", fc.Refused)
	}

	// Stripped on purpose: never in a body, counted.
	srv = &contractServer{bodies: map[string]map[string]any{}}
	ts2 := httptest.NewServer(srv)
	defer ts2.Close()
	_, info = replayTo(t, ts2.URL, wl, func(o *Options) { o.RunID = "run"; o.Strip = []string{FeatureImage, FeatureTools, FeatureAdapter} })
	for id, b := range srv.bodies {
		raw, _ := json.Marshal(b)
		if strings.Contains(string(raw), "image_url") || b["tools"] != nil || b["model"] == "lora-a" {
			t.Errorf("%s: a stripped feature was sent: %.200s", id, raw)
		}
	}
	if fc := info.Features[FeatureImage]; fc != (trace.FeatureCount{Carried: 3, Stripped: 3}) {
		t.Errorf("image counts %+v, want 3 carried and stripped", fc)
	}
	if fc := info.Features[FeatureTools]; fc != (trace.FeatureCount{Carried: 1, Stripped: 1}) {
		t.Errorf("tools counts %+v, want 1 carried and stripped", fc)
	}
}

func TestReplayServesImagesByURL(t *testing.T) {
	wl, _ := contractWorkload(t)
	srv := &contractServer{bodies: map[string]map[string]any{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	// The recording server fetches each image while the run is on, as a
	// server handed a URL does.
	fetched := map[string][2]int{}
	var mu sync.Mutex
	fetch := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			raw, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(raw)))
			var body map[string]any
			json.Unmarshal(raw, &body)
			if msgs, ok := body["messages"].([]any); ok {
				if parts, ok := msgs[len(msgs)-1].(map[string]any)["content"].([]any); ok {
					for _, p := range parts {
						if iu, ok := p.(map[string]any)["image_url"].(map[string]any); ok {
							url := iu["url"].(string)
							resp, err := http.Get(url)
							if err != nil {
								t.Errorf("fetch %s: %v", url, err)
								continue
							}
							b, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							w, hh, _, err := media.ImageConfig(b)
							if err != nil {
								t.Errorf("%s: %v", url, err)
							}
							mu.Lock()
							fetched[url] = [2]int{w, hh}
							mu.Unlock()
						}
					}
				}
			}
			h.ServeHTTP(w, r)
		})
	}
	ts.Config.Handler = fetch(srv)
	replayTo(t, ts.URL, wl, func(o *Options) { o.RunID = "run"; o.ImageTransport = ImageTransportURL; o.ImageFormat = "jpeg" })
	if len(fetched) != 3 { // ids 5 (twice: one URL), 6 and 7
		t.Errorf("fetched %v, want 3 distinct image URLs", fetched)
	}
	for url, size := range fetched {
		if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, ".jpeg") {
			t.Errorf("image URL %s: want a loopback jpeg", url)
		}
		if strings.Contains(url, "640x480") && size != [2]int{640, 480} {
			t.Errorf("%s served %v", url, size)
		}
	}
}
