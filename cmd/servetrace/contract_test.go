package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// TestLongAzureLMMFitRegeneratesImagesPerRequest converts a trace in the Azure
// LMM inference trace 2025's documented shape (TIMESTAMP, NumImages,
// ContextTokens, GeneratedTokens), fits it, generates from the fit and
// validates: images per request within KS 0.05.
func TestLongAzureLMMFitRegeneratesImagesPerRequest(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check (a fit): runs without -race in make test-timing")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 3))
	var b strings.Builder
	b.WriteString("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n")
	at := time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)
	for range 6000 {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(300*time.Millisecond)))
		images := 0
		switch u := rng.Float64(); {
		case u < 0.4:
		case u < 0.75:
			images = 1
		case u < 0.9:
			images = 2
		case u < 0.97:
			images = 3
		default:
			images = 6
		}
		fmt.Fprintf(&b, "%s,%d,%d,%d\n", at.Format("2006-01-02 15:04:05.000000"), images, 200+images*1200+rng.IntN(800), 20+rng.IntN(400))
	}
	csv := writeFile(t, dir, "lmm.csv", []byte(b.String()))
	trace, model, wl := filepath.Join(dir, "trace"), filepath.Join(dir, "m.json"), filepath.Join(dir, "wl")
	for _, step := range [][]string{
		{"convert", csv, "--out", trace},
		{"fit", trace, "--no-latent", "--out", model},
		{"generate", model, "--duration", "30m", "--seed", "2", "--out", wl},
	} {
		if code, _, errOut := runCLI(t, step...); code != 0 {
			t.Fatalf("%v: %s", step, errOut)
		}
	}
	checks := validateChecks(t, trace, wl)
	c, found := checks["ks_images_per_request"]
	if !found {
		t.Fatalf("validate has no ks_images_per_request check, only %v", slices.Collect(maps.Keys(checks)))
	}
	t.Logf("images per request KS %.4f", c[0])
	if c[0] > 0.05 {
		t.Errorf("images per request KS %.4f, want ≤ 0.05", c[0])
	}
}

// bodyRecorder is an OpenAI-compatible endpoint that keeps each request
// body by X-Request-Id and streams one token per choice.
type bodyRecorder struct {
	mu     sync.Mutex
	bodies map[string][]byte
}

func (s *bodyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		io.WriteString(w, `{"object":"list","data":[{"id":"llama-3.1-8b","object":"model"}]}`)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies[r.Header.Get("X-Request-Id")] = raw
	s.mu.Unlock()
	var b struct {
		N int `json:"n"`
	}
	json.Unmarshal(raw, &b)
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range max(b.N, 1) {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":%d,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\n", i)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// contractLogTrace converts the contract log fixture (images of known
// sizes, repeated images, audio, tools, JSON schemas, logprobs, n = 2,
// seeds and LoRA model names) through the CLI and returns the trace's
// directory and rows by request id.
func contractLogTrace(t *testing.T, dir string) (string, map[string]trace.Request) {
	t.Helper()
	out := filepath.Join(dir, "trace")
	logs := filepath.Join("..", "..", "datasets", "testdata", "logs")
	if code, _, errOut := runCLI(t, "convert", filepath.Join(logs, "contract.jsonl"), "--map", filepath.Join(logs, "contract.map"), "--max-reject-ratio", "0.2", "--out", out); code != 0 {
		t.Fatalf("convert: %s", errOut)
	}
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 9 {
		t.Fatalf("%d rows converted, want 9", len(rows))
	}
	by := map[string]trace.Request{}
	for _, r := range rows {
		by[r.RequestID] = r
	}
	return out, by
}

// TestContractRoundTrip is issue 13's round trip: the contract log converts;
// a replay against a recording server sends bodies whose every image
// decodes to its recorded size, whose repeated images are byte-identical
// and whose tool counts, schema sizes, n, seeds and adapter names are as
// recorded; and against the simulator, usage.prompt_tokens equals the
// trace's input tokens for every request.
func TestContractRoundTrip(t *testing.T) {
	dir := t.TempDir()
	tr, rows := contractLogTrace(t, dir)
	rec := &bodyRecorder{bodies: map[string][]byte{}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	if code, _, errOut := runCLI(t, "replay", tr, "--target", srv.URL, "--run-id", "rt", "--speed", "20", "--out", filepath.Join(dir, "rec")); code != 0 {
		t.Fatalf("replay to the recorder: %s", errOut)
	}
	tok, err := tokenize.Get(tokenize.CL100K)
	if err != nil {
		t.Fatal(err)
	}
	imageBytes := map[int64][]byte{} // by recorded image id
	for id, q := range rows {
		raw, ok := rec.bodies["rt-"+id]
		if !ok {
			t.Fatalf("request %s was never sent", id)
		}
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
			Tools          []json.RawMessage `json:"tools"`
			N              int32             `json:"n"`
			Seed           *int64            `json:"seed"`
			ResponseFormat *struct {
				JSONSchema *struct {
					Schema json.RawMessage `json:"schema"`
				} `json:"json_schema"`
			} `json:"response_format"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		var parts []struct {
			Type     string `json:"type"`
			ImageURL *struct {
				URL string `json:"url"`
			} `json:"image_url"`
			InputAudio *struct {
				Data string `json:"data"`
			} `json:"input_audio"`
		}
		if len(body.Messages) > 0 {
			json.Unmarshal(body.Messages[len(body.Messages)-1].Content, &parts)
		}
		img := 0
		for _, p := range parts {
			switch p.Type {
			case "image_url":
				_, data, err := media.ParseDataURI(p.ImageURL.URL)
				if err != nil {
					t.Fatalf("%s image %d: %v", id, img, err)
				}
				w, h, _, err := media.ImageConfig(data)
				wantW, wantH := int(q.ImageWidthsPx[img]), int(q.ImageHeightsPx[img])
				if wantW == 0 {
					wantW, wantH = media.DefaultImageWidth, media.DefaultImageHeight
				}
				if err != nil || w != wantW || h != wantH {
					t.Errorf("%s image %d decodes to %dx%d (%v), recorded %dx%d", id, img, w, h, err, wantW, wantH)
				}
				if prev, seen := imageBytes[q.ImageIDs[img]]; seen && string(prev) != string(data) {
					t.Errorf("%s image %d repeats image id %d with other bytes", id, img, q.ImageIDs[img])
				}
				imageBytes[q.ImageIDs[img]] = data
				img++
			case "input_audio":
				wav, _ := base64.StdEncoding.DecodeString(p.InputAudio.Data)
				if ms, err := media.WAVDuration(wav); err != nil || ms != q.AudioMs[0] {
					t.Errorf("%s audio %d ms (%v), recorded %d", id, ms, err, q.AudioMs[0])
				}
			}
		}
		if img != int(q.ImageCount) {
			t.Errorf("%s: %d images sent, %d recorded", id, img, q.ImageCount)
		}
		if len(body.Tools) != int(q.ToolCount) {
			t.Errorf("%s: %d tools sent, %d recorded", id, len(body.Tools), q.ToolCount)
		}
		if q.ToolCount > 0 {
			all, _ := json.Marshal(body.Tools)
			if got := int64(tok.Count(string(all))); math.Abs(float64(got-q.ToolTokens)) > math.Max(8, 0.1*float64(q.ToolTokens)) {
				t.Errorf("%s: tools of %d tokens sent, %d recorded", id, got, q.ToolTokens)
			}
		}
		if q.OutputFormat == trace.OutputJSONSchema {
			if body.ResponseFormat == nil || body.ResponseFormat.JSONSchema == nil {
				t.Fatalf("%s: no json_schema sent for a recorded schema", id)
			}
			if got := int64(tok.Count(string(body.ResponseFormat.JSONSchema.Schema))); math.Abs(float64(got-q.SchemaTokens)) > math.Max(8, 0.1*float64(q.SchemaTokens)) {
				t.Errorf("%s: schema of %d tokens sent, %d recorded", id, got, q.SchemaTokens)
			}
		}
		if wantN := max(q.N, 1); max(body.N, 1) != wantN {
			t.Errorf("%s: n %d sent, %d recorded", id, body.N, wantN)
		}
		if (body.Seed == nil) != (q.Seed == nil) || q.Seed != nil && *body.Seed != *q.Seed {
			t.Errorf("%s: seed %v sent, %v recorded", id, body.Seed, q.Seed)
		}
		wantModel := q.Model
		if q.Adapter != "" {
			wantModel = q.Adapter
		}
		if body.Model != wantModel {
			t.Errorf("%s: model %q sent, want %q", id, body.Model, wantModel)
		}
	}

	// Against the simulator, which counts images, audio and tools into the
	// prompt as a server does: the server's prompt tokens are the trace's.
	url := startFastSim(t, func(o *sim.Options) {
		o.Models = []string{"llama-3.1-8b"}
		o.LoRAModules = []string{"sql-lora", "chat-lora"}
	})
	run := filepath.Join(dir, "sim")
	if code, _, errOut := runCLI(t, "replay", tr, "--target", url, "--speed", "20", "--out", run); code != 0 {
		t.Fatalf("replay to the simulator: %s", errOut)
	}
	results, err := trace.ReadResults(run)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		q := rows[r.RequestID]
		if r.Outcome != trace.OutcomeOK || r.UsagePromptTokens == nil || *r.UsagePromptTokens != q.InputTokens {
			t.Errorf("%s: %s (%s), usage.prompt_tokens %v, the trace's input %d", r.RequestID, r.Outcome, r.Error, r.UsagePromptTokens, q.InputTokens)
		}
	}
	// analyze breaks the mixed run down by adapter and modality.
	rep := analyzeJSON(t, run, "--by", "adapter,modality")
	groups := func(dim string) map[string]int {
		m := map[string]int{}
		for _, g := range rep.Breakdowns[dim] {
			m[g.Value] = g.Counted
		}
		return m
	}
	if a := groups("adapter"); a["sql-lora"] != 2 || a["chat-lora"] != 1 || a["(none)"] != 6 {
		t.Errorf("--by adapter %v, want sql-lora 2, chat-lora 1, (none) 6", a)
	}
	if m := groups("modality"); m["image"] != 3 || m["audio"] != 1 || m["text"] != 5 {
		t.Errorf("--by modality %v, want image 3, audio 1, text 5", m)
	}
}

// fixedWorkload writes n streamed chat requests of input and output tokens
// each, every gap apart.
func fixedWorkload(t *testing.T, dir string, n int, input, output int64, gap time.Duration) string {
	t.Helper()
	wl := filepath.Join(dir, "wl")
	w, err := trace.NewBucketWriter(wl, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		r := trace.Request{Identity: trace.Identity{RequestID: fmt.Sprintf("q%03d", i)}, TS: t0.Add(time.Duration(i) * gap).UnixMicro(),
			Shape: trace.Shape{InputTokens: input, OutputTokens: output, MaxTokens: output, API: trace.APIChat, Stream: true, N: 1}}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	return wl
}

// TestTimeToFirstAnswerOnAReasoningRun: the simulator streams half of each
// output as reasoning first, so a request's first answer token comes
// reasoning tokens × ITL after its first token. analyze's ttfa_ms p50 is
// within 10% of TTFT p50 + 20 × the mean ITL, the reasoning share is 0.5.
// The mean, not the median: the 20 gaps add up, and a host that stalls
// the simulator's iterations skews the gaps to the right, which moves
// their sum with the mean while the median stays at one iteration.
func TestTimeToFirstAnswerOnAReasoningRun(t *testing.T) {
	dir := t.TempDir()
	url := startFastSim(t, func(o *sim.Options) {
		o.Engine.Cost = sim.CostModel{IterBase: 5 * time.Millisecond}
		o.ReasoningRatio = 0.5
	})
	wl := fixedWorkload(t, dir, 20, 30, 40, 100*time.Millisecond)
	run := filepath.Join(dir, "run")
	if code, _, errOut := runCLI(t, "replay", wl, "--target", url, "--ignore-eos", "--out", run); code != 0 {
		t.Fatalf("replay: %s", errOut)
	}
	rep := analyzeJSON(t, run)
	p50 := func(name string) float64 {
		for _, q := range rep.Metrics[name].Quantiles {
			if q.P == 50 {
				return q.Value
			}
		}
		t.Fatalf("no p50 of %s", name)
		return 0
	}
	r := rep.Reasoning
	if r == nil || r.Requests != 20 || r.TokensPerRequest.P50 != 20 || math.Abs(r.Share-0.5) > 1e-9 {
		t.Fatalf("reasoning %+v, want 20 requests of 20 reasoning tokens, share 0.5", r)
	}
	want := p50("ttft_ms") + 20*rep.Metrics["itl_ms"].Mean
	if got := p50("ttfa_ms"); math.Abs(got-want) > 0.1*want {
		t.Errorf("time to first answer p50 %.1f ms, want TTFT p50 + 20 × mean ITL = %.1f ms ± 10%% (ITL p50 %.2f ms)", got, want, p50("itl_ms"))
	}
}

// TestSpecDecodingAcceptanceInAnalyze: a simulator drafting 4 tokens a step
// at acceptance 0.7, scraped during the replay; analyze measures the
// acceptance from vLLM's counters within ±0.02 of 0.7, and several tokens
// per stream event.
func TestSpecDecodingAcceptanceInAnalyze(t *testing.T) {
	dir := t.TempDir()
	url := startFastSim(t, func(o *sim.Options) {
		o.SpecTokens, o.SpecAcceptance = 4, 0.7
	})
	wl := fixedWorkload(t, dir, 60, 20, 400, 20*time.Millisecond)
	run := filepath.Join(dir, "run")
	if code, _, errOut := runCLI(t, "replay", wl, "--target", url, "--ignore-eos", "--metrics-url", url+"/metrics", "--metrics-interval", "1s", "--out", run); code != 0 {
		t.Fatalf("replay: %s", errOut)
	}
	rep := analyzeJSON(t, run)
	s := rep.SpecDecode
	if s == nil {
		t.Fatal("no speculative decoding figures from the scrapes")
	}
	t.Logf("acceptance %.4f over %.0f steps, mean accepted length %.3f, %.2f tokens per event", s.AcceptanceRate, s.Drafts, s.MeanAcceptedLength, s.TokensPerEvent)
	if math.Abs(s.AcceptanceRate-0.7) > 0.02 {
		t.Errorf("acceptance %.4f, want 0.7 ± 0.02", s.AcceptanceRate)
	}
	if s.TokensPerEvent < 2.5 {
		t.Errorf("%.2f tokens per event: speculative steps should stream several tokens at once", s.TokensPerEvent)
	}
}

// analyzeJSON runs analyze --json on run with args and decodes the report.
func analyzeJSON(t *testing.T, run string, args ...string) *analyze.Report {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"analyze", run, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("analyze: %s", errOut)
	}
	var rep analyze.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}
