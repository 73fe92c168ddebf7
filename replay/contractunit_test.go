package replay

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// contractRunner is a runner with a prompt builder, for building bodies
// without a server.
func contractRunner(t testing.TB, mod func(*Options)) *Runner {
	t.Helper()
	o := DefaultOptions()
	o.Target = "http://127.0.0.1:1"
	if mod != nil {
		mod(&o)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	r, err := newRunner(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.preparePrompts(16, true); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRefusedBy(t *testing.T) {
	sent := []string{FeatureImage, FeatureTools, FeatureAdapter}
	cases := []struct {
		status int
		msg    string
		want   []string
	}{
		{400, "m is not a multimodal model", []string{FeatureImage}},
		{400, `"auto" tool choice requires enable-auto-tool-choice`, []string{FeatureTools}},
		{404, "The model `sql-lora` does not exist.", []string{FeatureAdapter}},
		{404, "Not Found", nil}, // a wrong path, not an adapter
		{400, "This model's maximum context length is 4096 tokens ... multimodal tokens. For image inputs ...", nil},
		{429, "image requests are rate limited", nil},
		{413, "image too large", nil},
		{500, "image decoder crashed", nil},
		{422, "tools: field required", []string{FeatureTools}},
	}
	for _, c := range cases {
		if got := refusedBy(c.status, c.msg, sent); !slices.Equal(got, c.want) {
			t.Errorf("%d %q: refused %v, want %v", c.status, c.msg, got, c.want)
		}
	}
}

// TestFitSizeSurvivesAFailingCounter: a server whose /tokenize fails
// counts -1; the fit stops at its guess instead of growing without end.
func TestFitSizeSurvivesAFailingCounter(t *testing.T) {
	builds := 0
	b := fitSize(150, 10, 0, func(n int) json.RawMessage { builds++; return json.RawMessage(`[]`) }, func(json.RawMessage) int64 { return -1 })
	if string(b) != "[]" || builds > 2 {
		t.Errorf("%d builds with a failing counter, want at most 2", builds)
	}
	// A counter stuck below the target: the parameter stays bounded.
	maxSeen := 0
	fitSize(1000, 10, 0, func(n int) json.RawMessage { maxSeen = max(maxSeen, n); return nil }, func(json.RawMessage) int64 { return 5 })
	if maxSeen > 2*1000+64 {
		t.Errorf("the parameter reached %d for 1000 tokens", maxSeen)
	}
}

func TestContractLimitsAndChoices(t *testing.T) {
	r := contractRunner(t, nil)
	// 1,024 one-hour clips: over MaxMediaBytes before anything is built.
	huge := &trace.Request{Identity: trace.Identity{RequestID: "h"}, Shape: trace.Shape{InputTokens: 10, API: trace.APIChat}}
	huge.AudioCount = 1024
	for range 1024 {
		huge.AudioMs = append(huge.AudioMs, 3600_000)
	}
	if _, err := r.buildContract(huge, trace.APIChat); !errors.Is(err, errTooMuchMedia) {
		t.Errorf("1,024 hour-long clips: %v, want errTooMuchMedia", err)
	}
	if o := r.build(huge, nil); o.notSent == "" || o.sent != nil {
		t.Errorf("built anyway: not sent %q, sent %v", o.notSent, o.sent)
	}
	// Two constrained decodings by label: one is sent, the other stripped.
	two := &trace.Request{Identity: trace.Identity{RequestID: "c"}, Shape: trace.Shape{InputTokens: 10, API: trace.APIChat, Features: []string{trace.FeatureJSON, trace.FeatureSchema}}}
	c, err := r.buildContract(two, trace.APIChat)
	if err != nil || !slices.Equal(c.sent, []string{FeatureJSON}) || !slices.Equal(c.stripped, []string{FeatureSchema}) {
		t.Errorf("json + json_schema: sent %v stripped %v (%v), want one sent and one stripped", c.sent, c.stripped, err)
	}
	// An explicit Model sends no adapter, and says so.
	withModel := contractRunner(t, func(o *Options) { o.Model = "base" })
	lora := &trace.Request{Identity: trace.Identity{RequestID: "a", Adapter: "sql-lora"}, Shape: trace.Shape{InputTokens: 10, API: trace.APIChat}}
	if c, _ := withModel.buildContract(lora, trace.APIChat); c.model != "" || !slices.Equal(c.stripped, []string{FeatureAdapter}) {
		t.Errorf("Model set: adapter model %q, stripped %v; want the adapter stripped", c.model, c.stripped)
	}
}
