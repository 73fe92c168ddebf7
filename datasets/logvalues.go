package datasets

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// message is one chat message reduced to what shapes load: its role, its
// text (tokenized, never stored) and its images and audio clips (measured
// and hashed, never stored).
type message struct {
	role, text string
	media      []mediaRef
}

func (m message) render() string { return m.role + "\n" + m.text + "\n" }

// storedMessages reads a messages value as a gateway stores it: a list,
// the JSON text of one, or nothing stored: LiteLLM's SpendLogs keep
// messages as the text "{}" unless told to store prompts, which is no
// messages (ok false), the length then coming from usage.
func storedMessages(v any) (any, bool, error) {
	switch x := v.(type) {
	case string:
		t := strings.TrimSpace(x)
		if t == "" || t == "{}" || t == "[]" || t == "null" {
			return nil, false, nil
		}
		d, isJSON, err := decodeJSONText(t)
		if !isJSON {
			return nil, false, bad("messages", "a string that is not the JSON text of a messages array")
		}
		if err != nil {
			return nil, false, bad("messages", "a string holding JSON that does not parse (%s)", jsonReason(err))
		}
		return storedMessages(d)
	case map[string]any:
		if len(x) == 0 {
			return nil, false, nil
		}
	}
	return v, true, nil
}

// parseMessages reads an OpenAI messages array: content as a string or as
// parts (text parts kept for tokenizing, image parts flagged), tool calls as
// their function names and arguments.
func parseMessages(v any) ([]message, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, bad("messages", "not an array")
	}
	out := make([]message, 0, len(arr))
	for i, item := range arr {
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, bad("messages", "element %d is not an object", i)
		}
		msg := message{role: fmt.Sprint(obj["role"])}
		var sb strings.Builder
		switch c := obj["content"].(type) {
		case nil:
		case string:
			sb.WriteString(c)
		case []any:
			msg.media = writeContentParts(&sb, c)
		default:
			return nil, bad("messages", "element %d content is neither text nor parts", i)
		}
		writeToolCalls(&sb, obj["tool_calls"])
		msg.text = sb.String()
		out = append(out, msg)
	}
	return out, nil
}

// writeContentParts writes a message's text parts and returns its image
// and audio parts; parts of other types are skipped.
func writeContentParts(sb *strings.Builder, parts []any) (refs []mediaRef) {
	for _, p := range parts {
		part, ok := p.(map[string]any)
		if !ok {
			continue
		}
		switch part["type"] {
		case "text", "input_text":
			sb.WriteString(fmt.Sprint(part["text"]))
		default:
			if ref, ok := mediaPart(part); ok {
				refs = append(refs, ref)
			}
		}
	}
	return refs
}

// writeToolCalls writes each tool call's function name and arguments, the
// text the model generated for it.
func writeToolCalls(sb *strings.Builder, v any) {
	calls, ok := v.([]any)
	if !ok {
		return
	}
	for _, c := range calls {
		if call, ok := c.(map[string]any); ok {
			if fn, ok := call["function"].(map[string]any); ok {
				sb.WriteString(fmt.Sprint(fn["name"], fn["arguments"]))
			}
		}
	}
}

// promptText reads a completions prompt: a string or an array of strings.
func promptText(v any) (string, error) {
	switch p := v.(type) {
	case string:
		return p, nil
	case []any:
		var sb strings.Builder
		for _, s := range p {
			str, ok := s.(string)
			if !ok {
				return "", bad("prompt", "token-id prompts are not supported; log text prompts or usage")
			}
			sb.WriteString(str)
		}
		return sb.String(), nil
	}
	return "", bad("prompt", "neither text nor an array of text")
}

// count reads a non-negative token count field.
func count(get func(string) (any, bool), field string) (int64, bool, error) {
	v, ok := get(field)
	if !ok {
		return 0, false, nil
	}
	n, err := parseInt(v)
	if err != nil {
		return 0, false, bad(field, "not a whole number")
	}
	if n < 0 {
		return 0, false, bad(field, "negative")
	}
	return n, true, nil
}

func parseInt(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil || f != math.Trunc(f) {
			return 0, errors.New("not a whole number")
		}
		return int64(f), nil
	case string:
		return strconv.ParseInt(strings.TrimSpace(x), 10, 64)
	}
	return 0, errors.New("not a number")
}

func parseFloat(v any) (float64, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Float64()
	case string:
		return strconv.ParseFloat(strings.TrimSpace(x), 64)
	}
	return 0, errors.New("not a number")
}

func parseBool(v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		return strconv.ParseBool(x)
	case json.Number:
		n, err := x.Int64()
		return n != 0, err
	}
	return false, errors.New("not a boolean")
}

// parseStatus reads an HTTP status, or a gateway's success/failure word
// (failure takes error_code when it is an HTTP status, else 500).
func parseStatus(v any, get func(string) (any, bool)) (int32, error) {
	if s, ok := v.(string); ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "success", "ok", "succeeded":
			return 200, nil
		case "failure", "failed", "error":
			if c, ok := get("error_code"); ok {
				if n, err := parseInt(c); err == nil && n >= 100 && n < 600 {
					return int32(n), nil
				}
			}
			return 500, nil
		}
	}
	n, err := parseInt(v)
	if err != nil || n < 100 || n > 599 {
		return 0, errors.New("not an HTTP status (100-599) or success/failure")
	}
	return int32(n), nil
}

// logTimeLayouts are the date shapes parseLogTime accepts: RFC 3339, with a
// space for the T, with a zone of +hhmm, and without a zone (UTC); the
// Common Log Format's time (nginx's $time_local, Apache's %t, with or
// without its brackets); RFC 1123 (HTTP's Date); and nginx's error-log
// "2006/01/02 15:04:05".
var logTimeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999Z0700", "2006-01-02 15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "02/Jan/2006:15:04:05.999999999 -0700", "[02/Jan/2006:15:04:05.999999999 -0700]",
	time.RFC1123, time.RFC1123Z, "2006/01/02 15:04:05.999999999"}

// parseLogTime reads a timestamp as microseconds since the epoch: epoch
// seconds, milliseconds, microseconds or nanoseconds by magnitude, or one
// of logTimeLayouts.
func parseLogTime(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, errors.New("not a number or a date")
		}
		return epochMicros(f)
	case string:
		s := strings.TrimSpace(x)
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return epochMicros(f)
		}
		for _, layout := range logTimeLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UnixMicro(), nil
			}
		}
		return 0, errors.New("not an RFC 3339 date, a common log time or an epoch number")
	}
	return 0, errors.New("not a number or a date")
}

// epochMicros scales an epoch number by its magnitude: dates from 2001 to
// 2286 in seconds, milliseconds, microseconds or nanoseconds.
func epochMicros(f float64) (int64, error) {
	switch {
	case f >= 1e9 && f < 1e10:
		return int64(math.Round(f * 1e6)), nil
	case f >= 1e12 && f < 1e13:
		return int64(math.Round(f * 1e3)), nil
	case f >= 1e15 && f < 1e16:
		return int64(f), nil
	case f >= 1e18 && f < 1e19:
		return int64(f / 1e3), nil
	}
	if f >= 0 && f < 1e7 {
		return 0, errors.New("an epoch number outside 2001-2286 in s, ms, µs or ns: a duration (nginx's request_time is one), not a time")
	}
	return 0, errors.New("an epoch number outside 2001-2286 in s, ms, µs or ns")
}
