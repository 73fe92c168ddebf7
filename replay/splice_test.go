package replay

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestSplicedBodyIsMarshaled builds long-prompt bodies the fast way and
// with encoding/json over the whole body: plain chat and completions
// (written directly, appendPlainBody), and spliced ones: chat and
// completions with a seed, chat with a session's history (whose replies
// need escaping), chat with an image; streamed and not. The bodies must be
// byte for byte equal, and valid JSON holding the prompt.
func TestSplicedBodyIsMarshaled(t *testing.T) {
	r := contractRunner(t, nil)
	if !r.prompt.PlainJSON() {
		t.Fatal("the prompt builder's words need JSON escaping: splicing is off and this test says nothing")
	}
	hist := &session{hist: newLink(nil, chatMessage{Role: "user", Content: "a <b> & \"c\"\n"}, chatMessage{Role: "assistant", Content: "\\ reply \u2028 é"}), tokens: 12}
	for _, c := range []struct {
		name string
		q    trace.Request
		sess *session
	}{
		{"chat", trace.Request{Shape: trace.Shape{InputTokens: 3000, API: trace.APIChat, Stream: true}}, nil},
		{"chat with history", trace.Request{Shape: trace.Shape{InputTokens: 3000, API: trace.APIChat}}, hist},
		{"chat with an image", trace.Request{Shape: trace.Shape{InputTokens: 3000, API: trace.APIChat, Features: []string{trace.FeatureImage}}, Media: trace.Media{ImageCount: 1}}, nil},
		{"completions", trace.Request{Shape: trace.Shape{InputTokens: 3000, API: trace.APICompletions, Stream: true}}, nil},
		{"chat with a seed", trace.Request{Shape: trace.Shape{InputTokens: 3000, API: trace.APIChat, Stream: true}, Seed: new(int64(3))}, nil},
		{"completions with a seed", trace.Request{Shape: trace.Shape{InputTokens: 3000, API: trace.APICompletions}, Seed: new(int64(3))}, nil},
		{"a short prompt", trace.Request{Shape: trace.Shape{InputTokens: 20, API: trace.APIChat}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.q.RequestID = "r-" + c.name
			spliced := r.build(&c.q, c.sess)
			fastBodies = false
			whole := r.build(&c.q, c.sess)
			fastBodies = true
			if spliced.notSent != "" || whole.notSent != "" {
				t.Fatalf("not sent: %q / %q", spliced.notSent, whole.notSent)
			}
			if !bytes.Equal(spliced.body, whole.body) {
				t.Fatalf("spliced body (%d bytes) differs from encoding/json's (%d bytes)", len(spliced.body), len(whole.body))
			}
			if !json.Valid(spliced.body) || !bytes.Contains(spliced.body, []byte(spliced.prompt)) || bytes.Contains(spliced.body, promptMarkerJSON) {
				t.Fatal("the spliced body is not JSON holding the prompt, or still holds the marker")
			}
		})
	}
}

// TestSplicePromptRefusesAStrayMarker: a body holding the marker twice
// (a string of the request held it) is not spliced; build then encodes
// the whole body.
func TestSplicePromptRefusesAStrayMarker(t *testing.T) {
	body := append(append([]byte(`{"a":"`), promptMarkerJSON...), `","b":"`...)
	body = append(append(body, promptMarkerJSON...), `"}`...)
	if got := splicePrompt(body, "x"); got != nil {
		t.Errorf("spliced %q", got)
	}
	if got := splicePrompt([]byte(`{"a":"b"}`), "x"); got != nil {
		t.Errorf("spliced a body without the marker: %q", got)
	}
}
