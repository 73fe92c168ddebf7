package datasets

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/internal/regfile"
)

// LogFields are the fields a request-log mapping can bind to JSON paths.
// Times (ts, first_token_ts, end_ts) are epoch seconds, milliseconds,
// microseconds or nanoseconds (told apart by magnitude), RFC 3339 text or
// another common log time (logTimeLayouts); ttft_ms, e2e_ms and e2e_s
// are durations where the log has them directly. A log without ts that
// times a request by its end (end_ts) and keeps its duration arrives at
// the end less the duration.
var LogFields = []string{
	"ts", "first_token_ts", "end_ts", "ttft_ms", "e2e_ms", "e2e_s",
	"request_id", "session_id", "tenant", "user", "model", "adapter",
	"messages", "instructions", "prompt", "response_text",
	"max_tokens", "temperature", "top_p", "n", "stream", "response_format", "tools", "logprobs",
	"prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
	"status", "error_code", "finish_reason", "cancelled",
}

// Mapping names, for each log field, the JSON paths that may hold it: the
// first present wins, and a null or an empty string is not present. A path
// is dot-separated keys; a number indexes an array
// ("response.choices.0.finish_reason"). A string met part-way along a path
// is decoded as JSON once (a gateway that logs a body as its JSON text).
type Mapping struct {
	Name  string
	Paths map[string][][]string
	// AdapterOf maps a model name that is a LoRA adapter to its base model
	// ("adapter_of: NAME = BASE" lines): vLLM and SGLang serve each adapter
	// under a model name of its own, so a log's model may be an adapter.
	AdapterOf map[string]string
}

// mappingPresets are the ready mappings, in the mapping file syntax.
var mappingPresets = map[string]string{
	// A plain request/response log: the OpenAI request body under
	// "request", the response body under "response", timing beside them.
	// A gateway that keeps each body as its JSON text has it under
	// request_body and response_body, or (Portkey's log shape) under
	// request.body and response.body.
	"openai": `
ts: timestamp | start_time | created_at | @timestamp
first_token_ts: first_token_time
end_ts: end_time | response_time | time_local | time_iso8601
ttft_ms: ttft_ms
e2e_ms: e2e_ms | latency_ms | duration_ms
e2e_s: request_time | duration_s
request_id: id | request_id
session_id: conversation_id | session_id
tenant: tenant | organization | org_id
user: user | user_id | request.user | request_body.user | request.body.user
model: request.model | request_body.model | request.body.model | response.model | response_body.model | response.body.model | model
adapter: adapter
messages: request.messages | request_body.messages | request.body.messages
prompt: request.prompt | request_body.prompt | request.body.prompt
response_text: response.choices.0.message.content | response.choices.0.text | response_body.choices.0.message.content | response_body.choices.0.text | response.body.choices.0.message.content | response.body.choices.0.text
max_tokens: request.max_completion_tokens | request.max_tokens | request_body.max_completion_tokens | request_body.max_tokens | request.body.max_completion_tokens | request.body.max_tokens
temperature: request.temperature | request_body.temperature | request.body.temperature
top_p: request.top_p | request_body.top_p | request.body.top_p
n: request.n | request_body.n | request.body.n
stream: request.stream | request_body.stream | request.body.stream
response_format: request.response_format.type | request_body.response_format.type | request.body.response_format.type
tools: request.tools | request_body.tools | request.body.tools
logprobs: request.logprobs | request_body.logprobs | request.body.logprobs
prompt_tokens: response.usage.prompt_tokens | response_body.usage.prompt_tokens | response.body.usage.prompt_tokens | usage.prompt_tokens
completion_tokens: response.usage.completion_tokens | response_body.usage.completion_tokens | response.body.usage.completion_tokens | usage.completion_tokens
cached_tokens: response.usage.prompt_tokens_details.cached_tokens | response_body.usage.prompt_tokens_details.cached_tokens | response.body.usage.prompt_tokens_details.cached_tokens | usage.prompt_tokens_details.cached_tokens
reasoning_tokens: response.usage.completion_tokens_details.reasoning_tokens | response_body.usage.completion_tokens_details.reasoning_tokens | response.body.usage.completion_tokens_details.reasoning_tokens | usage.completion_tokens_details.reasoning_tokens
status: status | status_code | http_status
error_code: error.code
finish_reason: response.choices.0.finish_reason | response_body.choices.0.finish_reason | response.body.choices.0.finish_reason
cancelled: cancelled | client_disconnected
`,
	// LiteLLM's StandardLoggingPayload (docs.litellm.ai/docs/proxy/logging_spec):
	// epoch-second floats, status "success"|"failure", team and user ids in
	// metadata, the request parameters in model_parameters.
	"litellm": `
ts: startTime
first_token_ts: completionStartTime
end_ts: endTime
request_id: id
session_id: metadata.spend_logs_metadata.session_id
tenant: metadata.user_api_key_team_id | metadata.user_api_key_org_id
user: end_user | metadata.user_api_key_user_id
model: model_group | model
messages: messages
response_text: response.choices.0.message.content
max_tokens: model_parameters.max_completion_tokens | model_parameters.max_tokens
temperature: model_parameters.temperature
top_p: model_parameters.top_p
n: model_parameters.n
stream: stream | model_parameters.stream
response_format: model_parameters.response_format.type
tools: model_parameters.tools
logprobs: model_parameters.logprobs
prompt_tokens: prompt_tokens
completion_tokens: completion_tokens
cached_tokens: response.usage.prompt_tokens_details.cached_tokens
reasoning_tokens: response.usage.completion_tokens_details.reasoning_tokens
status: status
error_code: error_information.error_code
finish_reason: response.choices.0.finish_reason
`,
	// Helicone's request records (its HeliconeRequest schema, as the
	// @helicone/export tool writes them with --include-body): ISO times,
	// delay_ms and time_to_first_token in milliseconds. Rows of its
	// ClickHouse table (request_response_rmt) name some columns otherwise
	// (latency, status, model, user_id) and keep prompt_tokens null where
	// the usage is only in response_body, a String column.
	"helicone": `
ts: request_created_at
end_ts: response_created_at
ttft_ms: time_to_first_token
e2e_ms: delay_ms | latency
request_id: request_id
session_id: request_properties.Helicone-Session-Id | properties.Helicone-Session-Id
user: request_user_id | helicone_user | user_id
model: request_model | response_model | model | request_body.model
messages: request_body.messages
prompt: request_body.prompt
response_text: response_body.choices.0.message.content | response_body.choices.0.text
max_tokens: request_body.max_completion_tokens | request_body.max_tokens
temperature: request_body.temperature
top_p: request_body.top_p
n: request_body.n
stream: request_body.stream
response_format: request_body.response_format.type
tools: request_body.tools
logprobs: request_body.logprobs
prompt_tokens: prompt_tokens | response_body.usage.prompt_tokens
completion_tokens: completion_tokens | response_body.usage.completion_tokens
cached_tokens: prompt_cache_read_tokens | response_body.usage.prompt_tokens_details.cached_tokens
reasoning_tokens: response_body.usage.completion_tokens_details.reasoning_tokens
status: response_status | status
finish_reason: response_body.choices.0.finish_reason
`,
	// OpenAI Batch API output lines (platform.openai.com/docs/api-reference/batch:
	// id, custom_id, response {status_code, request_id, body}, error): the
	// body is a chat completion, a completion or a Responses API response,
	// timed by its created or created_at (when the batch ran it, in epoch
	// seconds). The request side comes from the batch input joined by
	// custom_id under batch_input (LogOptions.BatchInput).
	"openai-batch": `
ts: response.body.created | response.body.created_at
request_id: custom_id | id
user: batch_input.body.user
model: response.body.model | batch_input.body.model
messages: batch_input.body.messages
instructions: batch_input.body.instructions
prompt: batch_input.body.prompt
response_text: response.body.choices.0.message.content | response.body.choices.0.text
max_tokens: batch_input.body.max_completion_tokens | batch_input.body.max_tokens | batch_input.body.max_output_tokens
temperature: batch_input.body.temperature | response.body.temperature
top_p: batch_input.body.top_p | response.body.top_p
n: batch_input.body.n
response_format: batch_input.body.response_format.type | batch_input.body.text.format.type
tools: batch_input.body.tools
logprobs: batch_input.body.logprobs
prompt_tokens: response.body.usage.prompt_tokens | response.body.usage.input_tokens
completion_tokens: response.body.usage.completion_tokens | response.body.usage.output_tokens
cached_tokens: response.body.usage.prompt_tokens_details.cached_tokens | response.body.usage.input_tokens_details.cached_tokens
reasoning_tokens: response.body.usage.completion_tokens_details.reasoning_tokens | response.body.usage.output_tokens_details.reasoning_tokens
status: response.status_code
error_code: error.code | response.body.error.code
finish_reason: response.body.choices.0.finish_reason
`,
}

func init() {
	// Every preset reads the workload contract's fields from its request
	// body and usage.
	for name, where := range map[string]struct{ bodies, usages []string }{
		"openai":       {[]string{"request", "request_body", "request.body"}, []string{"response.usage", "response_body.usage", "response.body.usage", "usage"}},
		"litellm":      {[]string{"model_parameters"}, []string{"response.usage"}},
		"helicone":     {[]string{"request_body"}, []string{"response_body.usage"}},
		"openai-batch": {[]string{"batch_input.body"}, []string{"response.body.usage"}},
	} {
		mappingPresets[name] += contractLines(where.bodies, where.usages)
	}
	LogFields = append(LogFields, contractFields...)
}

// MappingPresets lists the ready mappings.
func MappingPresets() []string {
	out := make([]string, 0, len(mappingPresets))
	for k := range mappingPresets {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// maxMappingFileBytes bounds a mapping file: a line a field, a few KiB.
const maxMappingFileBytes = 1 << 20

// LoadMapping returns a preset by name, or reads a mapping file: one
// "field: path | path ..." per line, # comments (a small YAML subset). The
// file must be a regular file of at most maxMappingFileBytes.
func LoadMapping(nameOrFile string) (*Mapping, error) {
	if nameOrFile == "" {
		nameOrFile = "openai"
	}
	if text, ok := mappingPresets[nameOrFile]; ok {
		return parseMapping(nameOrFile, text)
	}
	b, err := regfile.ReadFile(nameOrFile, maxMappingFileBytes)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: not a preset (%s) and not a readable mapping file: %w", nameOrFile, strings.Join(MappingPresets(), ", "), err)
	}
	m, err := parseMapping(nameOrFile, string(b))
	if err != nil {
		return nil, err
	}
	return m, nil
}

// parseMapping reads mapping text; errors name the line.
func parseMapping(name, text string) (*Mapping, error) {
	m := &Mapping{Name: name, Paths: map[string][][]string{}}
	fromPreset := map[string]bool{} // fields whose paths a preset line gave
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, maxMappingFileBytes)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if i := strings.Index(s, "#"); i >= 0 {
			s = strings.TrimSpace(s[:i])
		}
		if s == "" {
			continue
		}
		field, paths, ok := strings.Cut(s, ":")
		field = strings.TrimSpace(field)
		if field == "preset" {
			if err := m.extend(name, line, strings.TrimSpace(paths)); err != nil {
				return nil, err
			}
			for f := range m.Paths {
				fromPreset[f] = true
			}
			continue
		}
		if field == "adapter_of" {
			if err := m.addAdapter(name, line, paths); err != nil {
				return nil, err
			}
			continue
		}
		if !ok || strings.TrimSpace(paths) == "" {
			return nil, fmt.Errorf("mapping %s line %d: want 'field: json.path | other.path', got %q", name, line, s)
		}
		if !slices.Contains(LogFields, field) {
			return nil, fmt.Errorf("mapping %s line %d: unknown field %q (fields: %s)", name, line, field, strings.Join(LogFields, ", "))
		}
		if fromPreset[field] {
			// A file that starts from a preset and names a field says
			// where its log keeps it: its paths replace the preset's.
			delete(m.Paths, field)
			delete(fromPreset, field)
		}
		for _, p := range strings.Split(paths, "|") {
			p = strings.Trim(strings.TrimSpace(p), `"'`)
			if p == "" {
				return nil, fmt.Errorf("mapping %s line %d: empty path for %s", name, line, field)
			}
			m.Paths[field] = append(m.Paths[field], strings.Split(p, "."))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mapping %s: %w", name, err)
	}
	if len(m.Paths["ts"]) == 0 && (len(m.Paths["end_ts"]) == 0 || len(m.Paths["e2e_ms"])+len(m.Paths["e2e_s"]) == 0) {
		return nil, fmt.Errorf("mapping %s: no path for ts (the request's arrival time), which every row needs, nor for end_ts and e2e_ms or e2e_s to take it from", name)
	}
	return m, nil
}

// extend reads a "preset: NAME" line, which starts the mapping from a
// preset's paths (a field named after it replaces the preset's paths for
// that field; adapters add), so a file can say only what its log does
// differently.
func (m *Mapping) extend(name string, line int, preset string) error {
	text, ok := mappingPresets[preset]
	if !ok {
		return fmt.Errorf("mapping %s line %d: no preset %q (presets: %s)", name, line, preset, strings.Join(MappingPresets(), ", "))
	}
	if len(m.Paths) > 0 {
		return fmt.Errorf("mapping %s line %d: 'preset:' must come before any field", name, line)
	}
	base, err := parseMapping(preset, text)
	if err != nil {
		return err
	}
	m.Paths = base.Paths
	return nil
}

// addAdapter reads an "adapter_of: NAME = BASE" line.
func (m *Mapping) addAdapter(name string, line int, text string) error {
	adapter, base, ok := strings.Cut(text, "=")
	adapter, base = strings.TrimSpace(adapter), strings.TrimSpace(base)
	if !ok || adapter == "" || base == "" {
		return fmt.Errorf("mapping %s line %d: want 'adapter_of: ADAPTER-MODEL-NAME = BASE-MODEL', got %q", name, line, strings.TrimSpace(text))
	}
	if m.AdapterOf == nil {
		m.AdapterOf = map[string]string{}
	}
	if old, dup := m.AdapterOf[adapter]; dup && old != base {
		return fmt.Errorf("mapping %s line %d: adapter %q is already of base %q", name, line, adapter, old)
	}
	m.AdapterOf[adapter] = base
	return nil
}

// lookup returns the first present value of a field in a decoded record.
// A null or an empty string is absent, so the next path is tried: LiteLLM
// logs model_group "" for a call no group routed, and a CSV cannot tell an
// empty cell from a missing one.
func (m *Mapping) lookup(rec map[string]any, field string) (any, bool) {
	for _, path := range m.Paths[field] {
		if v, ok := walk(rec, path); ok && v != nil && v != "" {
			return v, true
		}
	}
	return nil, false
}

// pathsText lists a field's paths as the mapping file writes them, for a
// reject reason that says where a missing field was looked for.
func (m *Mapping) pathsText(field string) string {
	parts := make([]string, 0, len(m.Paths[field]))
	for _, p := range m.Paths[field] {
		parts = append(parts, strings.Join(p, "."))
	}
	return strings.Join(parts, " | ")
}

// expandJSONStrings decodes, in place and once, every string that a
// mapping path passes through on its way to a deeper key, so a gateway
// that logs "request_body" as the JSON text of the body reads like one
// that logs the object. Only strings that start like JSON ({ or [) are
// decoded; one that then does not parse is a rowError naming its path,
// since every field below it would otherwise be silently missing.
func (m *Mapping) expandJSONStrings(rec map[string]any) error {
	for _, field := range LogFields {
		for _, path := range m.Paths[field] {
			if err := expandPath(rec, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// expandPath decodes the JSON strings met along path (but not its last
// key, whose value is the field itself) and stores them back in their
// parent, so each is decoded once whatever the number of paths through it.
func expandPath(rec map[string]any, path []string) error {
	var cur any = rec
	for i, key := range path[:len(path)-1] {
		var next any
		var set func(any)
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[key]
			if !ok {
				return nil
			}
			next, set = v, func(d any) { x[key] = d }
		case []any:
			j, err := strconv.Atoi(key)
			if err != nil || j < 0 || j >= len(x) {
				return nil
			}
			next, set = x[j], func(d any) { x[j] = d }
		default:
			return nil
		}
		if s, ok := next.(string); ok {
			d, isJSON, err := decodeJSONText(s)
			if !isJSON {
				return nil
			}
			if err != nil {
				return bad(strings.Join(path[:i+1], "."), "a string holding JSON that does not parse (%s)", jsonReason(err))
			}
			set(d)
			next = d
		}
		cur = next
	}
	return nil
}

// maxJSONTextLayers bounds how many times a body may have been encoded as
// a JSON string before its JSON text (a logger that encodes a string it
// was given as JSON text encodes it once more).
const maxJSONTextLayers = 3

// decodeJSONText decodes a string that starts like JSON (an object or an
// array, after spaces), numbers as json.Number, or that is the JSON text of
// such a string (a body encoded twice), within maxJSONTextLayers; isJSON
// is false, and nothing decoded, for any other string. The text is part of
// a line or CSV record, so within MaxLineBytes.
func decodeJSONText(s string) (v any, isJSON bool, err error) {
	for range maxJSONTextLayers {
		t := strings.TrimSpace(s)
		if t == "" || (t[0] != '{' && t[0] != '[' && t[0] != '"') {
			return nil, false, nil
		}
		if t[0] == '"' { // the JSON text of a string: JSON only if that string is
			if err := json.Unmarshal([]byte(t), &s); err != nil {
				return nil, false, nil
			}
			continue
		}
		dec := json.NewDecoder(strings.NewReader(t))
		dec.UseNumber()
		err = dec.Decode(&v)
		return v, true, err
	}
	return nil, false, nil
}

// present reports whether the record holds a field's first present path,
// even with a null value: a logged null differs from an absent key.
func (m *Mapping) present(rec map[string]any, field string) bool {
	for _, path := range m.Paths[field] {
		if _, ok := walk(rec, path); ok {
			return true
		}
	}
	return false
}

// walk follows a path through maps and arrays.
func walk(v any, path []string) (any, bool) {
	for _, key := range path {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[key]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}
