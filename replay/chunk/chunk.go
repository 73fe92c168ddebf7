// Package chunk decodes the data payload of one server-sent event of an
// OpenAI-compatible streamed response (a chat or completions chunk, a usage
// chunk or an error object) into what the replay client records. It is its
// own package, with only the standard library beneath it, so that its
// differential fuzz test builds and runs in seconds.
package chunk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Event is what one streamed chunk says.
type Event struct {
	// IsError: the chunk is an error object; ErrMsg says what went wrong.
	IsError bool
	ErrMsg  string
	// Choices counts the entries of "choices".
	Choices int
	// Content: some choice carries non-empty text, content, reasoning
	// content or a tool-call delta. Index is the "index" of the last such
	// choice (0 when absent): with n > 1 it tells the choices apart.
	Content bool
	Index   int32
	// Answer: some choice carries non-empty text, content or a tool-call
	// delta, not only reasoning: a reasoning model's answer has begun.
	Answer bool
	// Finish is the last non-empty finish_reason.
	Finish string
	// HasUsage: a usage object with completion_tokens was present.
	HasUsage                            bool
	PromptTokens, CompletionTokens      int64
	HasPromptTokens, HasReasoningTokens bool
	ReasoningTokens                     int64
	// CachedTokens is usage.prompt_tokens_details.cached_tokens: the
	// prompt tokens the server's prefix cache served.
	CachedTokens    int64
	HasCachedTokens bool
	// Text holds the content and text fields, unescaped, when collected;
	// Pieces says which choice each stretch of it belongs to, in order.
	Text   []byte
	Pieces []Piece
}

// Piece is the stretch of Event.Text from the previous piece's End (or
// 0) to End, one choice's text: with n > 1 an event can carry several.
type Piece struct {
	Index int32
	End   int
}

// Decode parses one SSE data payload into ev with a single validating
// pass that builds no tree: chunks arrive by the million, and a generic
// decoder would make the client, not the server, the bottleneck
// (docs/measurements.md, "SSE event decoding"). It accepts exactly the documents
// encoding/json accepts (checked by a differential fuzz test). Content
// and text are appended, unescaped, to ev.Text.
func Decode(data []byte, ev *Event) error {
	*ev = Event{Text: ev.Text[:0], Pieces: ev.Pieces[:0]}
	s := scanner{b: data}
	s.ws()
	if !s.consume('{') {
		return s.fail("event is not a JSON object")
	}
	err := s.members(func(key []byte) error {
		switch string(key) {
		case "error":
			start := s.i
			if s.literal("null") {
				return nil
			}
			s.i = start
			if err := s.value(); err != nil {
				return err
			}
			ev.IsError, ev.ErrMsg = true, errorValueText(data[start:s.i])
		case "choices":
			return s.choices(ev)
		case "usage":
			return s.usage(ev)
		default:
			return s.value()
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.ws()
	if s.i != len(s.b) {
		return s.fail("data after the JSON object")
	}
	return nil
}

// errorValueText returns the message of a raw error value: a string, or an
// object with "message". The caller shortens and scrubs it before it is
// recorded.
func errorValueText(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "malformed error object"
	}
	switch e := v.(type) {
	case string:
		return e
	case map[string]any:
		if m, ok := e["message"].(string); ok && m != "" {
			return m
		}
	}
	return "error object without a message"
}

// scanner walks JSON bytes, validating as it goes.
type scanner struct {
	b []byte
	i int
}

var errJSON = errors.New("invalid JSON")

func (s *scanner) fail(what string) error {
	return fmt.Errorf("%w at byte %d: %s", errJSON, s.i, what)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	s.ws()
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// members iterates the members of an object whose '{' was consumed; fn must
// consume the member's value.
func (s *scanner) members(fn func(key []byte) error) error {
	s.ws()
	if s.consume('}') {
		return nil
	}
	for {
		s.ws()
		key, _, err := s.str()
		if err != nil {
			return err
		}
		s.ws()
		if !s.consume(':') {
			return s.fail("missing ':' after an object key")
		}
		s.ws()
		if err := fn(key); err != nil {
			return err
		}
		s.ws()
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return nil
		}
		return s.fail("expected ',' or '}' in an object")
	}
}

// elements iterates the elements of an array whose '[' was consumed; fn
// must consume the element.
func (s *scanner) elements(fn func() error) error {
	s.ws()
	if s.consume(']') {
		return nil
	}
	for {
		s.ws()
		if err := fn(); err != nil {
			return err
		}
		s.ws()
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return nil
		}
		return s.fail("expected ',' or ']' in an array")
	}
}

// str reads a string at the cursor and returns its raw (still escaped)
// bytes and whether it had escapes.
func (s *scanner) str() (raw []byte, escaped bool, err error) {
	if !s.consume('"') {
		return nil, false, s.fail("expected a string")
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return nil, false, s.fail("unterminated escape")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 || !isHex4(s.b[s.i+1:s.i+5]) {
					return nil, false, s.fail("bad \\u escape")
				}
				s.i += 5
			default:
				return nil, false, s.fail("bad escape")
			}
		case c < 0x20:
			return nil, false, s.fail("control character in a string")
		default:
			s.i++
		}
	}
	return nil, false, s.fail("unterminated string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads a JSON number and returns its bytes.
func (s *scanner) number() ([]byte, error) {
	start := s.i
	s.consume('-')
	switch {
	case s.consume('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return nil, s.fail("bad number")
	}
	if s.consume('.') {
		if s.digits() == 0 {
			return nil, s.fail("bad number fraction")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if !s.consume('+') {
			s.consume('-')
		}
		if s.digits() == 0 {
			return nil, s.fail("bad number exponent")
		}
	}
	return s.b[start:s.i], nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// maxDepth bounds nesting, as encoding/json does (10000).
const maxDepth = 10000

// value skips any JSON value, validating it.
func (s *scanner) value() error { return s.valueDepth(0) }

func (s *scanner) valueDepth(depth int) error {
	if depth > maxDepth {
		return s.fail("nested too deeply")
	}
	s.ws()
	if s.i >= len(s.b) {
		return s.fail("unexpected end")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		return s.members(func([]byte) error { return s.valueDepth(depth + 1) })
	case c == '[':
		s.i++
		return s.elements(func() error { return s.valueDepth(depth + 1) })
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || '0' <= c && c <= '9':
		_, err := s.number()
		return err
	case s.literal("true"), s.literal("false"), s.literal("null"):
		return nil
	}
	return s.fail("unexpected character")
}

// choices reads the "choices" value: an array of choice objects.
func (s *scanner) choices(ev *Event) error {
	if !s.consume('[') {
		return s.value() // not an array: skip it, as a decoder into a struct would not
	}
	return s.elements(func() error {
		ev.Choices++
		if !s.consume('{') {
			return s.value()
		}
		before, index, textStart := ev.Content, int64(0), len(ev.Text)
		ev.Content = false
		err := s.members(func(key []byte) error {
			switch string(key) {
			case "index":
				start := s.i
				if err := s.value(); err != nil {
					return err
				}
				if n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64); err == nil && n >= 0 && n <= 1<<20 {
					index = n
				}
				return nil
			case "text":
				return s.content(ev)
			case "delta":
				if !s.consume('{') {
					return s.value()
				}
				return s.members(func(key []byte) error {
					switch string(key) {
					case "content":
						return s.content(ev)
					case "reasoning_content", "reasoning":
						if s.i < len(s.b) && s.b[s.i] == '"' {
							raw, _, err := s.str()
							if len(raw) > 0 {
								ev.Content = true
							}
							return err
						}
						return s.value()
					case "tool_calls":
						if s.consume('[') {
							n := 0
							err := s.elements(func() error { n++; return s.value() })
							if n > 0 {
								ev.Content, ev.Answer = true, true
							}
							return err
						}
						return s.value()
					}
					return s.value()
				})
			case "finish_reason":
				if s.i < len(s.b) && s.b[s.i] == '"' {
					raw, esc, err := s.str()
					if err == nil && len(raw) > 0 {
						ev.Finish = unescape(raw, esc)
					}
					return err
				}
				return s.value()
			}
			return s.value()
		})
		if ev.Content {
			ev.Index = int32(index)
		}
		if len(ev.Text) > textStart {
			ev.Pieces = append(ev.Pieces, Piece{Index: int32(index), End: len(ev.Text)})
		}
		ev.Content = ev.Content || before
		return err
	})
}

// content reads a text or content field: a non-empty string is a token
// event; anything else is skipped.
func (s *scanner) content(ev *Event) error {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.value()
	}
	raw, esc, err := s.str()
	if err != nil || len(raw) == 0 {
		return err
	}
	ev.Content, ev.Answer = true, true
	ev.Text = appendUnescaped(ev.Text, raw, esc)
	return nil
}

// usage reads the "usage" value.
func (s *scanner) usage(ev *Event) error {
	if !s.consume('{') {
		return s.value()
	}
	return s.members(func(key []byte) error {
		switch string(key) {
		case "completion_tokens":
			n, ok, err := s.int()
			if ok {
				ev.HasUsage, ev.CompletionTokens = true, n
			}
			return err
		case "prompt_tokens":
			n, ok, err := s.int()
			if ok {
				ev.HasPromptTokens, ev.PromptTokens = true, n
			}
			return err
		case "prompt_tokens_details":
			if !s.consume('{') {
				return s.value()
			}
			return s.members(func(key []byte) error {
				if string(key) == "cached_tokens" {
					n, ok, err := s.int()
					if ok {
						ev.HasCachedTokens, ev.CachedTokens = true, n
					}
					return err
				}
				return s.value()
			})
		case "completion_tokens_details":
			if !s.consume('{') {
				return s.value()
			}
			return s.members(func(key []byte) error {
				if string(key) == "reasoning_tokens" {
					n, ok, err := s.int()
					if ok {
						ev.HasReasoningTokens, ev.ReasoningTokens = true, n
					}
					return err
				}
				return s.value()
			})
		}
		return s.value()
	})
}

// int reads a number as an integer; ok is false for a non-number value
// (null, say), which is skipped.
func (s *scanner) int() (int64, bool, error) {
	if s.i < len(s.b) && (s.b[s.i] == '-' || '0' <= s.b[s.i] && s.b[s.i] <= '9') {
		raw, err := s.number()
		if err != nil {
			return 0, false, err
		}
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return n, true, nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return 0, false, s.fail("number out of range")
		}
		// Saturated: past int64, a conversion would wrap (1e20 read as a
		// negative count).
		switch {
		case f >= math.MaxInt64:
			return math.MaxInt64, true, nil
		case f <= math.MinInt64:
			return math.MinInt64, true, nil
		}
		return int64(f), true, nil
	}
	return 0, false, s.value()
}

// unescape decodes a raw JSON string body as encoding/json does, invalid
// UTF-8 becoming U+FFFD.
// appendUnescaped appends a string token's value to dst: as it is when it
// holds no escape (most tokens, and no allocation), else as unescape.
func appendUnescaped(dst, raw []byte, escaped bool) []byte {
	if !escaped && utf8.Valid(raw) {
		return append(dst, raw...)
	}
	return append(dst, unescape(raw, escaped)...)
}

func unescape(raw []byte, escaped bool) string {
	if !escaped && utf8.Valid(raw) {
		return string(raw)
	}
	var out string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	if json.Unmarshal(quoted, &out) != nil {
		return string(raw)
	}
	return out
}
