package analyze

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// contractRows are hand-made results of a mixed run: text, image and audio
// requests on two adapters, one with reasoning before its answer, features
// sent, stripped and refused.
func contractRows() []trace.Result {
	ms := int64(1e6)
	row := func(id, adapter string, features []string, sent int64, ttft, answer, done int64, out, reasoning int64) trace.Result {
		r := trace.Result{Identity: trace.Identity{RequestID: id, Adapter: adapter}, Shape: trace.Shape{Stream: true, Features: features, API: trace.APIChat},
			ScheduledNs: sent, AdmittedNs: sent, SentNs: ptr(sent), FirstChunkNs: ptr(sent + ttft), FirstTokenNs: ptr(sent + ttft), DoneNs: ptr(sent + done),
			ObservedOutputTokens: out, ObservedReasoningTokens: reasoning, PromptTokensSent: 50, Outcome: trace.OutcomeOK, HTTPStatus: 200,
			FeaturesSent: features}
		if answer >= 0 {
			r.FirstAnswerNs = ptr(sent + answer)
		}
		for k := range out {
			r.TokenTimesNs = append(r.TokenTimesNs, ttft+k*ms)
		}
		return r
	}
	rows := []trace.Result{
		row("t1", "", nil, 0, 10*ms, 10*ms, 20*ms, 4, 0),
		row("t2", "lora-a", []string{"tools"}, 100*ms, 12*ms, 12*ms, 30*ms, 6, 0),
		row("i1", "lora-a", []string{"image"}, 200*ms, 40*ms, 40*ms, 60*ms, 4, 0),
		row("i2", "lora-b", []string{"image", "tools"}, 300*ms, 50*ms, 50*ms, 70*ms, 4, 0),
		row("a1", "lora-b", []string{"audio", "image"}, 400*ms, 60*ms, 60*ms, 90*ms, 4, 0),
		// reasoning first: 6 reasoning tokens, then the answer at 70 ms.
		row("r1", "", []string{"reasoning"}, 500*ms, 10*ms, 70*ms, 80*ms, 10, 6),
	}
	// An image stripped on purpose, and one refused.
	rows[0].FeaturesStripped = []string{"image"}
	rows[0].Features = []string{"image"}
	rows[3].FeaturesRefused = []string{"tools"}
	return rows
}

func TestAnalyzeContract(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	writeRun(t, run, "r", contractRows(), 1)
	rep, err := Analyze([]string{run}, Options{By: []string{"adapter", "modality", "feature"}, Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]FeatureUse{
		"image":     {Feature: "image", Carried: 4, Sent: 3, Stripped: 1},
		"tools":     {Feature: "tools", Carried: 2, Sent: 2, Refused: 1},
		"audio":     {Feature: "audio", Carried: 1, Sent: 1},
		"reasoning": {Feature: "reasoning", Carried: 1, Sent: 1},
	}
	if len(rep.Features) != len(want) || rep.Features[0].Feature != "image" {
		t.Fatalf("features %+v, want %d, image first (most carried)", rep.Features, len(want))
	}
	for _, u := range rep.Features {
		if u != want[u.Feature] {
			t.Errorf("feature %s: %+v, want %+v", u.Feature, u, want[u.Feature])
		}
	}
	groups := func(dim string) map[string]int {
		out := map[string]int{}
		for _, g := range rep.Breakdowns[dim] {
			out[g.Value] = g.Counted
		}
		return out
	}
	for dim, w := range map[string]map[string]int{
		"adapter":  {"(none)": 2, "lora-a": 2, "lora-b": 2},
		"modality": {"text": 2, "image": 3, "image+audio": 1}, // t1 is labelled image (stripped): its label counts
		"feature":  {"image": 4, "tools": 2, "audio": 1, "reasoning": 1},
	} {
		got := groups(dim)
		if len(got) != len(w) {
			t.Errorf("--by %s: groups %v, want %v", dim, got, w)
		}
		for k, n := range w {
			if got[k] != n {
				t.Errorf("--by %s group %s: %d requests, want %d", dim, k, got[k], n)
			}
		}
	}
	// Image requests' TTFT (40, 50, 60 and t1's 10 ms) against text's.
	for _, g := range rep.Breakdowns["modality"] {
		if g.Value == "image+audio" && g.Metrics["ttft_ms"].Quantiles[0].Value != 60 {
			t.Errorf("image+audio TTFT %v, want 60 ms", g.Metrics["ttft_ms"].Quantiles)
		}
	}
	// Time to first answer: reported because r1 reasoned first; r1's is
	// 70 ms, everyone else's equals their TTFT.
	ttfa, ok := rep.Metrics["ttfa_ms"]
	if !ok || ttfa.N != 6 || ttfa.Max != 70 {
		t.Fatalf("ttfa_ms %+v, want 6 values, max 70 ms", ttfa)
	}
	if r := rep.Reasoning; r == nil || r.Requests != 1 || r.TokensPerRequest.P50 != 6 || r.Share != 0.6 {
		t.Errorf("reasoning %+v, want 1 request, 6 tokens, share 0.6", rep.Reasoning)
	}
	var buf strings.Builder
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, s := range []string{"image 3/4 sent, 1 stripped", "tools 2/2 sent, 1 refused", "reasoning: 1 requests reasoned"} {
		if !strings.Contains(text, s) {
			t.Errorf("report lacks %q:\n%s", s, text)
		}
	}
}

func TestAnalyzeWithoutReasoningHasNoTTFA(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	writeRun(t, run, "r", contractRows()[:5], 1)
	rep, err := Analyze([]string{run}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Metrics["ttfa_ms"]; ok || rep.Reasoning != nil {
		t.Errorf("a run without reasoning reports ttfa %v, reasoning %v", rep.Metrics["ttfa_ms"], rep.Reasoning)
	}
}

// TestSpecDecodeFromCounters: vLLM's counters rise by 100 steps, 400 draft
// tokens and 280 accepted over the run: acceptance 0.7, mean accepted
// length 3.8; the hand rows stream 4 tokens in 4 events (1 per event).
func TestSpecDecodeFromCounters(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	rows := contractRows()[:1]
	rows[0].ObservedOutputTokens = 8 // 4 events of 2 tokens
	writeRun(t, run, "r", rows, 1)
	if err := os.MkdirAll(filepath.Join(run, "metrics"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range [][3]int{{50, 200, 100}, {90, 360, 212}, {150, 600, 380}} {
		text := "# servetrace scrape phase=during run_ns=" + itoa(int64(i)*1e9) + " unix_ns=1 role=engine\n" +
			"# TYPE vllm:spec_decode_num_drafts_total counter\n" +
			`vllm:spec_decode_num_drafts_total{model_name="m",engine="0"} ` + itoa(int64(c[0])) + "\n" +
			`vllm:spec_decode_num_draft_tokens_total{model_name="m",engine="0"} ` + itoa(int64(c[1])) + "\n" +
			`vllm:spec_decode_num_accepted_tokens_total{model_name="m",engine="0"} ` + itoa(int64(c[2])) + "\n"
		writeFile(t, filepath.Join(run, "metrics", "scrape-0000"+itoa(int64(i))+".prom"), text)
	}
	rep, err := Analyze([]string{run}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.SpecDecode
	if s == nil || s.Drafts != 100 || s.DraftTokens != 400 || s.Accepted != 280 || s.AcceptanceRate != 0.7 || s.MeanAcceptedLength != 3.8 || s.TokensPerEvent != 2 {
		t.Fatalf("spec decode %+v, want 100 steps, 400 drafted, 280 accepted, 0.7, 3.8, 2 tokens per event", s)
	}
}
