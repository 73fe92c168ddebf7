package datasets

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// contractFields are the mapping fields of what a request asks of decoding
// besides its length: tools, structured output and sampling beyond
// temperature and top_p. contractLines binds them for a preset.
var contractFields = []string{
	"tool_choice", "response_schema", "guided_json", "guided_regex", "guided_grammar", "guided_choice",
	"top_logprobs", "seed", "top_k", "stop", "presence_penalty", "frequency_penalty", "reasoning_effort",
	"image_tokens", "audio_tokens",
}

// contractLines returns the mapping lines of contractFields for a preset
// whose request body is at one of bodies and whose usage object at one of
// usages.
// vLLM's guided_* parameters (removed in v0.12 for structured_outputs),
// SGLang's regex and ebnf, and llama.cpp's grammar are read beside
// OpenAI's response_format, since a log of any of those servers holds them.
func contractLines(bodies, usages []string) string {
	b := func(paths ...string) string {
		var out []string
		for _, body := range bodies {
			for _, p := range paths {
				out = append(out, body+"."+p)
			}
		}
		return strings.Join(out, " | ")
	}
	u := func(p string) string {
		out := make([]string, len(usages))
		for i, usage := range usages {
			out[i] = usage + "." + p
		}
		return strings.Join(out, " | ")
	}
	return strings.Join([]string{
		"tool_choice: " + b("tool_choice"),
		"response_schema: " + b("response_format.json_schema", "response_format.schema", "text.format"),
		"guided_json: " + b("guided_json", "structured_outputs.json", "json_schema"),
		"guided_regex: " + b("guided_regex", "structured_outputs.regex", "regex"),
		"guided_grammar: " + b("guided_grammar", "structured_outputs.grammar", "ebnf", "grammar"),
		"guided_choice: " + b("guided_choice", "structured_outputs.choice"),
		"top_logprobs: " + b("top_logprobs"),
		"seed: " + b("seed"),
		"top_k: " + b("top_k"),
		"stop: " + b("stop", "stop_sequences"),
		"presence_penalty: " + b("presence_penalty"),
		"frequency_penalty: " + b("frequency_penalty"),
		"reasoning_effort: " + b("reasoning_effort", "reasoning.effort"),
		"image_tokens: " + u("prompt_tokens_details.image_tokens"),
		"audio_tokens: " + u("prompt_tokens_details.audio_tokens"),
	}, "\n") + "\n"
}

// jsonValue reads a field that holds JSON, decoding it where it came as
// text (a CSV cell, a gateway that logged the object as a string).
func jsonValue(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if d, isJSON, err := decodeJSONText(s); isJSON && err == nil {
		return d
	}
	return v
}

// canonicalJSON is a value's JSON with sorted keys: the text whose tokens
// a schema or tool list is measured by and whose hash names it, the same
// whatever the log's key order.
func canonicalJSON(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// prepareCalls sets the tool and structured-output columns: the tool
// definitions' count and size in tokens and tool_choice's kind, the
// constrained decoding asked for with its schema's size and salted id, and
// stop sequences and reasoning effort. It returns the tools' tokens, which
// a server counts into the prompt.
func (lr *logReader) prepareCalls(req *trace.Request, r logRecord) (toolTokens int64, err error) {
	if v, ok := r.get("tools"); ok {
		tools := jsonValue(v)
		arr, isArr := tools.([]any)
		if !isArr {
			return 0, bad("tools", "not an array of tool definitions")
		}
		if len(arr) > trace.MaxTools {
			return 0, bad("tools", "%d definitions, more than %d", len(arr), trace.MaxTools)
		}
		if len(arr) > 0 {
			req.ToolCount = int32(len(arr))
			req.ToolTokens = int64(lr.lo.Tokenizer.Count(canonicalJSON(arr)))
			req.Features = appendFeature(req.Features, trace.FeatureTools)
		}
	}
	if v, ok := r.get("tool_choice"); ok {
		switch c := jsonValue(v).(type) {
		case string:
			switch c {
			case "auto", "none", "required":
				req.ToolChoice = c
			default:
				return 0, bad("tool_choice", "neither auto, none, required nor a function")
			}
		case map[string]any:
			req.ToolChoice = "function" // never the function's name
		default:
			return 0, bad("tool_choice", "neither a string nor an object")
		}
	}
	lr.prepareOutputFormat(req, r)
	if v, ok := r.get("stop"); ok {
		switch s := jsonValue(v).(type) {
		case string:
			req.StopCount = 1
		case []any:
			if len(s) > trace.MaxStops {
				return 0, bad("stop", "%d sequences, more than %d", len(s), trace.MaxStops)
			}
			req.StopCount = int32(len(s))
		}
	}
	if v, ok := r.get("reasoning_effort"); ok {
		req.ReasoningEffort = strings.ToLower(fmt.Sprint(v))
		if len(req.ReasoningEffort) > 32 {
			return 0, bad("reasoning_effort", "longer than 32 bytes")
		}
	}
	return req.ToolTokens, nil
}

// prepareOutputFormat sets the constrained decoding asked for: OpenAI's
// response_format (json_object, json_schema with its schema), else vLLM's,
// SGLang's or llama.cpp's own parameters (a JSON schema, a regex, a
// grammar, a choice list). The schema is measured in tokens of its
// canonical JSON (a regex or grammar of its text) and hashed, never kept.
func (lr *logReader) prepareOutputFormat(req *trace.Request, r logRecord) {
	var schema any
	if v, ok := r.get("response_format"); ok {
		switch fmt.Sprint(v) {
		case "json_schema":
			req.OutputFormat = trace.OutputJSONSchema
			if s, ok := r.get("response_schema"); ok {
				schema = jsonValue(s)
				if m, isMap := schema.(map[string]any); isMap && m["schema"] != nil {
					schema = m["schema"] // {name, schema, strict}: the schema itself
				}
			}
		case "json_object":
			req.OutputFormat = trace.OutputJSONObject
		}
	}
	if req.OutputFormat == "" {
		for _, g := range []struct{ field, format string }{
			{"guided_json", trace.OutputJSONSchema}, {"guided_regex", trace.OutputRegex},
			{"guided_grammar", trace.OutputGrammar}, {"guided_choice", trace.OutputChoice},
		} {
			if v, ok := r.get(g.field); ok {
				req.OutputFormat, schema = g.format, jsonValue(v)
				break
			}
		}
	}
	if schema != nil {
		text := canonicalJSON(schema)
		req.SchemaTokens = int64(lr.lo.Tokenizer.Count(text))
		req.SchemaID = lr.lo.Salt.ID64("schema:"+req.OutputFormat, text)
	}
	switch req.OutputFormat {
	case trace.OutputJSONSchema:
		req.Features = appendFeature(req.Features, trace.FeatureSchema)
	case trace.OutputJSONObject:
		req.Features = appendFeature(req.Features, trace.FeatureJSON)
	case trace.OutputRegex, trace.OutputGrammar, trace.OutputChoice:
		req.Features = appendFeature(req.Features, trace.FeatureGrammar)
	}
}

// prepareSamplingExtras sets top_logprobs, seed, top_k and the penalties
// as asked, and the image and audio tokens the server's usage separated.
func prepareSamplingExtras(req *trace.Request, r logRecord) error {
	ints := []struct {
		field string
		set   func(int64)
		lo    int64
		hi    int64
	}{
		{"top_logprobs", func(n int64) { req.TopLogprobs = new(int32(n)) }, 0, trace.MaxTopK},
		{"top_k", func(n int64) { req.TopK = new(int32(n)) }, -1, trace.MaxTopK},
		{"seed", func(n int64) { req.Seed = new(n) }, -1 << 63, 1<<63 - 1},
	}
	for _, f := range ints {
		if v, ok := r.get(f.field); ok {
			n, err := parseInt(v)
			if err != nil || n < f.lo || n > f.hi {
				return bad(f.field, "not a whole number from %d to %d", f.lo, f.hi)
			}
			f.set(n)
		}
	}
	for _, p := range []struct {
		field string
		dst   **float64
	}{{"presence_penalty", &req.PresencePenalty}, {"frequency_penalty", &req.FrequencyPenalty}} {
		if v, ok := r.get(p.field); ok {
			x, err := parseFloat(v)
			if err != nil || x < -2 || x > 2 {
				return bad(p.field, "not a number from -2 to 2")
			}
			*p.dst = &x
		}
	}
	for _, c := range []struct {
		field string
		dst   **int64
	}{{"image_tokens", &req.ImageTokens}, {"audio_tokens", &req.AudioTokens}} {
		if n, ok, err := count(r.get, c.field); err != nil {
			return err
		} else if ok {
			*c.dst = &n
		}
	}
	return nil
}
