package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// requestBody is what the client sends, chat or completions.
type requestBody struct {
	Model string `json:"model"`
	// Messages holds chatMessage values, and a partsMessage for a turn
	// with images or audio.
	Messages      []any   `json:"messages,omitempty"`
	Prompt        *string `json:"prompt,omitempty"`
	MaxTokens     int64   `json:"max_tokens"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	IgnoreEOS   bool     `json:"ignore_eos,omitempty"`
	MinTokens   int64    `json:"min_tokens,omitempty"`

	// encoding/json writes an embedded struct's fields in its place, so
	// these follow the ones above (appendPlainBody relies on it).
	bodyContract
}

// bodyContract is the workload contract's part of a body (contract.go):
// each field set only where the request carried the feature and it was
// not stripped.
type bodyContract struct {
	Tools             json.RawMessage `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ResponseFormat    any             `json:"response_format,omitempty"`
	StructuredOutputs any             `json:"structured_outputs,omitempty"`
	GuidedJSON        json.RawMessage `json:"guided_json,omitempty"`
	GuidedRegex       any             `json:"guided_regex,omitempty"`
	GuidedGrammar     any             `json:"guided_grammar,omitempty"`
	GuidedChoice      any             `json:"guided_choice,omitempty"`
	// Logprobs is true on chat, and the count of top logprobs on
	// completions (whose logprobs is an integer).
	Logprobs         any      `json:"logprobs,omitempty"`
	TopLogprobs      *int32   `json:"top_logprobs,omitempty"`
	N                int32    `json:"n,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	TopK             *int32   `json:"top_k,omitempty"`
	PresencePenalty  *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64 `json:"frequency_penalty,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	ReasoningEffort  string   `json:"reasoning_effort,omitempty"`
}

// setContract puts c's features into the body for api.
func (b *requestBody) setContract(c *contract, api string) {
	b.Tools, b.ToolChoice, b.ResponseFormat, b.GuidedJSON = c.tools, c.toolChoice, c.format, c.guidedJSON
	if len(c.structured) > 0 {
		b.StructuredOutputs = c.structured
	}
	b.GuidedRegex, b.GuidedGrammar, b.GuidedChoice = c.guided["guided_regex"], c.guided["guided_grammar"], c.guided["guided_choice"]
	if c.logprobs {
		if api == trace.APICompletions {
			n := int32(1)
			if c.topLogprobs != nil {
				n = max(*c.topLogprobs, 1)
			}
			b.Logprobs = n
		} else {
			b.Logprobs, b.TopLogprobs = true, c.topLogprobs
		}
	}
	if c.n > 1 {
		b.N = c.n
	}
	b.Seed, b.TopK, b.PresencePenalty, b.FrequencyPenalty = c.seed, c.topK, c.presence, c.frequency
	b.Stop, b.ReasoningEffort = c.stop, c.effort
}

// outgoing is a request built and ready to send: its body and what the
// result records of it, or why it cannot be sent.
type outgoing struct {
	api, model       string
	stream           bool
	body             []byte
	promptTokensSent int64
	notSent          string
	// The features sent and stripped (contract.go).
	sent, stripped []string
	// The turn's prompt and the history it followed (histLink, made into
	// history for the body), for the session.
	prompt                   string
	history                  []chatMessage
	histLink                 *convLink
	historyTokens, newTokens int64
	// probe is set on a probe request: its answer is graded, then dropped.
	probe *probe.Probe
}

// route starts q's outgoing request with the API, stream mode and model
// the options give it.
func (r *Runner) route(q *trace.Request) *outgoing {
	o := &outgoing{api: q.API, stream: q.Stream, model: q.Model}
	if r.opts.API != "" {
		o.api = r.opts.API
	}
	if o.api == "" {
		o.api = trace.APIChat
	}
	switch r.opts.Stream {
	case StreamOn:
		o.stream = true
	case StreamOff:
		o.stream = false
	}
	if mapped, ok := r.opts.ModelMap[o.model]; ok {
		o.model = mapped
	}
	if r.opts.Model != "" {
		o.model = r.opts.Model
	}
	if o.model == "" {
		o.model = r.defaultModel
	}
	return o
}

// build makes q's request body: the prompt (after sess's history), the
// model, sampling and stream options. It does the client's heavy work
// (a prompt of input_tokens tokens, its JSON), so the scheduler can run it
// ahead of the send time (prefetch), and a session's next turn after the
// reply, before its think time.
func (r *Runner) build(q *trace.Request, sess *session) *outgoing {
	o := r.route(q)
	c, err := r.buildContract(q, o.api)
	if err != nil {
		o.notSent = "not sent: the request's " + err.Error()
		return o
	}
	o.sent, o.stripped = c.sent, c.stripped
	if c.model != "" {
		o.model = c.model
	}
	// The prompt's text is what the images, clips and tool definitions
	// leave of input_tokens, so a server that counts them into the prompt
	// (as the simulator does) reports the trace's input length.
	extra := c.mediaTokens + c.toolTokens
	text := q.InputTokens - extra
	if extra > 0 && text < 1 {
		r.notes.add("requests whose images, audio and tools take more tokens than the recorded input were sent a 1-token text", q.RequestID)
		text = 1
	}
	o.newTokens = text
	if sess != nil && sess.hist != nil {
		if sess.uncounted != "" {
			sess.tokens += countText(r.prompt.Counter(), sess.uncounted)
			sess.uncounted = ""
		}
		o.histLink, o.history, o.historyTokens = sess.hist, sess.hist.messages(), sess.tokens
		o.newTokens = max(1, text-o.historyTokens)
		o.prompt, err = r.prompt.Prompt(o.newTokens, nil, tokenize.SeedFor(q.RequestID))
	} else {
		o.prompt, err = r.prompt.Prompt(text, q.PrefixBlocks, tokenize.SeedFor(q.RequestID))
	}
	if err == nil && o.historyTokens+o.newTokens > tokenize.MaxPromptTokens {
		err = fmt.Errorf("the session's history of %d tokens and this turn's %d are %w", o.historyTokens, o.newTokens, tokenize.ErrTooManyTokens)
	}
	if err != nil {
		o.notSent = "not sent: the prompt could not be built: " + err.Error()
		return o
	}
	o.promptTokensSent = o.historyTokens + max(0, o.newTokens) + extra
	for _, f := range []struct {
		name string
		v    *float64
	}{{"temperature", q.Temperature}, {"top_p", q.TopP}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			o.notSent = fmt.Sprintf("not sent: %s %v cannot be encoded in JSON", f.name, *f.v)
			return o
		}
	}
	maxTokens := q.MaxTokens
	if maxTokens <= 0 {
		maxTokens = max(q.OutputTokens, 1)
	}
	body := requestBody{Model: o.model, MaxTokens: maxTokens, Stream: o.stream, Temperature: q.Temperature, TopP: q.TopP,
		IgnoreEOS: r.opts.IgnoreEOS || r.opts.ForceOutputLen}
	if r.opts.ForceOutputLen {
		body.MinTokens = maxTokens
	}
	body.setContract(c, o.api)
	if o.stream {
		body.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	encode := func(prompt string) ([]byte, error) {
		if o.api == trace.APIChat {
			body.Messages = make([]any, 0, len(o.history)+1)
			for _, m := range o.history {
				body.Messages = append(body.Messages, m)
			}
			if len(c.parts) > 0 {
				parts := append([]contentPart{{Type: "text", Text: prompt}}, c.parts...)
				body.Messages = append(body.Messages, partsMessage{Role: "user", Content: parts})
			} else {
				body.Messages = append(body.Messages, chatMessage{Role: "user", Content: prompt})
			}
		} else {
			var sb strings.Builder
			for _, m := range o.history {
				sb.WriteString(m.Content)
			}
			sb.WriteString(prompt)
			p := sb.String()
			body.Prompt = &p
		}
		return json.Marshal(body)
	}
	// A body of the plain fields alone is written directly; in any other,
	// a long prompt the builder vouches for is spliced into the encoded
	// body in place of a marker (see splicePrompt).
	if fastBodies && len(o.history) == 0 && len(c.parts) == 0 {
		if b, ok := appendPlainBody(make([]byte, 0, len(o.model)+len(o.prompt)+plainBodyFields), &body, o.api == trace.APIChat, o.prompt, r.prompt.PlainJSON()); ok {
			o.body = b
			return o
		}
	}
	if fastBodies && r.prompt.PlainJSON() && len(o.prompt) >= spliceMin && (o.api == trace.APIChat || len(o.history) == 0) {
		if b, err := encode(promptMarker); err == nil {
			if o.body = splicePrompt(b, o.prompt); o.body != nil {
				return o
			}
		}
	}
	if o.body, err = encode(o.prompt); err != nil {
		o.notSent = "not sent: the request could not be encoded: " + err.Error()
	}
	return o
}

// splicePrompt returns body with its one promptMarker replaced by prompt,
// or nil if the marker is not there exactly once (a string of the body
// held it too), for the caller to encode the body whole.
func splicePrompt(body []byte, prompt string) []byte {
	i := bytes.Index(body, promptMarkerJSON)
	if i < 0 || bytes.Contains(body[i+len(promptMarkerJSON):], promptMarkerJSON) {
		return nil
	}
	out := make([]byte, 0, len(body)-len(promptMarkerJSON)+len(prompt))
	out = append(out, body[:i]...)
	out = append(out, prompt...)
	return append(out, body[i+len(promptMarkerJSON):]...)
}

// Splicing a long prompt: encoding/json checks each byte of a string for
// escaping, about a millisecond for a 128k-token prompt, which a replay of
// long prompts pays per request on the cores the sends need. A prompt
// from a builder whose words need no escaping (PlainJSON) is encoded as
// promptMarker instead and copied in its place: the body is byte for byte
// what encoding/json writes (TestSplicedBodyIsMarshaled).
const (
	// promptMarker cannot stand in any other string of a body: trace
	// strings hold no control characters (trace.Request.Validate), and
	// the contract's are servetrace's own.
	promptMarker = "\x00servetrace-prompt\x00"
	// spliceMin is the shortest prompt spliced.
	spliceMin = 4 << 10
)

// promptMarkerJSON is promptMarker as encoding/json writes it.
var promptMarkerJSON = []byte(`\u0000servetrace-prompt\u0000`)

// fastBodies turns on appendPlainBody and splicing; tests turn them off
// for reference.
var fastBodies = true
