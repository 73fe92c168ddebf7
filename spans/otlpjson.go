package spans

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/internal/llmspan"
)

// maxJSONDepth bounds how deep an OTLP/JSON export nests: the format's
// deepest values (an attribute's array of maps) sit about ten levels
// down, and a deeper document is refused before the decoder's state grows
// with it.
const maxJSONDepth = 64

// walkJSON reads one OTLP/JSON trace export (ExportTraceServiceRequest or
// TracesData, the field names in lowerCamelCase or as in the .proto) span
// by span, token by token, handing each to fn in a record reused for the
// next: nothing of the document is held but the token being read. Ids
// are hex, as OTLP/JSON writes them (opentelemetry-proto's "JSON Protobuf
// Encoding"); an id that is not hex is an error.
func walkJSON(b []byte, fn func(*spanRecord)) error {
	w := &jsonWalker{d: json.NewDecoder(bytes.NewReader(b))}
	w.d.UseNumber()
	var rec spanRecord
	err := w.object("the export", func(key string) error {
		if key != "resourceSpans" && key != "resource_spans" {
			return w.skip()
		}
		return w.array(key, func() error {
			return w.object(key, func(key string) error {
				if key != "scopeSpans" && key != "scope_spans" {
					return w.skip()
				}
				return w.array(key, func() error {
					return w.object(key, func(key string) error {
						if key != "spans" {
							return w.skip()
						}
						return w.array(key, func() error {
							rec = spanRecord{}
							if err := w.span(&rec); err != nil {
								return err
							}
							fn(&rec)
							return nil
						})
					})
				})
			})
		})
	})
	if err != nil {
		return err
	}
	if _, err := w.d.Token(); err != io.EOF {
		return errors.New("more after the export's closing brace")
	}
	return nil
}

// jsonWalker reads a JSON document token by token, knowing how deep it
// is.
type jsonWalker struct {
	d     *json.Decoder
	depth int
}

// token reads the next token.
func (w *jsonWalker) token() (json.Token, error) {
	t, err := w.d.Token()
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	return t, err
}

// enter opens a level of nesting, refusing one past maxJSONDepth.
func (w *jsonWalker) enter() error {
	w.depth++
	if w.depth > maxJSONDepth {
		return fmt.Errorf("nested more than %d levels deep", maxJSONDepth)
	}
	return nil
}

// object reads an object (or null), calling fn with each key; fn reads
// the key's value.
func (w *jsonWalker) object(what string, fn func(key string) error) error {
	t, err := w.token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('{') {
		return fmt.Errorf("%s: want an object, found %s", what, describe(t))
	}
	if err := w.enter(); err != nil {
		return err
	}
	for w.d.More() {
		k, err := w.token()
		if err != nil {
			return err
		}
		if err := fn(k.(string)); err != nil {
			return err
		}
	}
	if _, err := w.token(); err != nil { // the closing brace
		return err
	}
	w.depth--
	return nil
}

// array reads an array (or null), calling fn to read each element.
func (w *jsonWalker) array(what string, fn func() error) error {
	t, err := w.token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('[') {
		return fmt.Errorf("%s: want an array, found %s", what, describe(t))
	}
	if err := w.enter(); err != nil {
		return err
	}
	for w.d.More() {
		if err := fn(); err != nil {
			return err
		}
	}
	if _, err := w.token(); err != nil { // the closing bracket
		return err
	}
	w.depth--
	return nil
}

// skip reads a value of any kind and drops it.
func (w *jsonWalker) skip() error {
	base := w.depth
	for {
		t, err := w.token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			if err := w.enter(); err != nil {
				return err
			}
		case json.Delim('}'), json.Delim(']'):
			w.depth--
		}
		if w.depth == base {
			return nil
		}
	}
}

// scalar reads a string, number, bool or null; a structure is an error.
func (w *jsonWalker) scalar(what string) (json.Token, error) {
	t, err := w.token()
	if err != nil {
		return nil, err
	}
	if _, ok := t.(json.Delim); ok {
		return nil, fmt.Errorf("%s: want a value, found %s", what, describe(t))
	}
	return t, nil
}

// span reads one span's kept fields into rec.
func (w *jsonWalker) span(rec *spanRecord) error {
	return w.object("a span", func(key string) error {
		switch key {
		case "traceId", "trace_id":
			return w.id(key, &rec.traceID)
		case "spanId", "span_id":
			return w.id(key, &rec.spanID)
		case "parentSpanId", "parent_span_id":
			return w.id(key, &rec.parentSpanID)
		case "name":
			t, err := w.scalar(key)
			s, _ := t.(string)
			rec.named = s == llmspan.Name
			return err
		case "kind":
			t, err := w.scalar(key)
			if err != nil {
				return err
			}
			rec.kind, err = spanKind(t)
			return err
		case "startTimeUnixNano", "start_time_unix_nano":
			return w.nanos(key, &rec.start)
		case "endTimeUnixNano", "end_time_unix_nano":
			return w.nanos(key, &rec.end)
		case "attributes":
			return w.array(key, func() error { return w.attribute(rec) })
		case "events", "links":
			return w.array(key, func() error {
				rec.dropped++
				return w.skip()
			})
		}
		return w.skip()
	})
}

// id reads a hex id.
func (w *jsonWalker) id(key string, dst *idBytes) error {
	t, err := w.scalar(key)
	if err != nil || t == nil {
		return err
	}
	s, ok := t.(string)
	if !ok {
		return fmt.Errorf("%s: want hex, found %s", key, describe(t))
	}
	if len(s) > 2*len(dst.b) {
		dst.present, dst.n = true, -1
		return nil
	}
	var raw [16]byte
	n, err := hex.Decode(raw[:], []byte(s))
	if err != nil {
		return fmt.Errorf("%s %q is not hex, as OTLP/JSON writes ids", key, clipKey(s))
	}
	dst.set(raw[:n])
	return nil
}

// nanos reads a time in nanoseconds: a string, as protobuf's JSON writes
// 64-bit integers, or a number.
func (w *jsonWalker) nanos(key string, dst *uint64) error {
	t, err := w.scalar(key)
	if err != nil || t == nil {
		return err
	}
	s, ok := numberText(t)
	v, perr := strconv.ParseUint(s, 10, 64)
	if !ok || perr != nil {
		return fmt.Errorf("%s: want whole nanoseconds, found %s", key, describe(t))
	}
	*dst = v
	return nil
}

// spanKind reads a span kind: its number, or its enum name.
func spanKind(t json.Token) (int32, error) {
	if s, ok := t.(string); ok {
		for i, name := range []string{"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"} {
			if s == name {
				return int32(i), nil
			}
		}
	}
	if n, ok := t.(json.Number); ok {
		if v, err := strconv.ParseInt(string(n), 10, 32); err == nil {
			return int32(v), nil
		}
	}
	if t == nil {
		return 0, nil
	}
	return 0, fmt.Errorf("kind: want a span kind, found %s", describe(t))
}

// attribute reads one KeyValue; its value is read whatever the key, as a
// key may come after its value.
func (w *jsonWalker) attribute(rec *spanRecord) error {
	var key string
	var v attrValue
	if err := w.object("an attribute", func(k string) error {
		switch k {
		case "key":
			t, err := w.scalar(k)
			if s, ok := t.(string); ok {
				key = s
			}
			return err
		case "value":
			var err error
			v, err = w.anyValue()
			return err
		}
		return w.skip()
	}); err != nil {
		return err
	}
	rec.setAttr([]byte(key), v)
	return nil
}

// anyValue reads an AnyValue: a string, int or double is kept; any other
// kind is read past and marked other.
func (w *jsonWalker) anyValue() (attrValue, error) {
	var v attrValue
	err := w.object("an attribute value", func(k string) error {
		switch k {
		case "stringValue", "string_value":
			t, err := w.scalar(k)
			if s, ok := t.(string); ok {
				v = attrValue{kind: stringValue, s: s}
			} else if err == nil && t != nil {
				return fmt.Errorf("%s: want a string, found %s", k, describe(t))
			}
			return err
		case "intValue", "int_value":
			t, err := w.scalar(k)
			if err != nil || t == nil {
				return err
			}
			s, _ := numberText(t)
			i, perr := strconv.ParseInt(s, 10, 64)
			if perr != nil {
				return fmt.Errorf("%s: want a 64-bit integer, found %s", k, describe(t))
			}
			v = attrValue{kind: intValue, i: i}
			return nil
		case "doubleValue", "double_value":
			t, err := w.scalar(k)
			if err != nil || t == nil {
				return err
			}
			f, ok := jsonDouble(t)
			if !ok {
				return fmt.Errorf("%s: want a number, found %s", k, describe(t))
			}
			v = attrValue{kind: doubleValue, f: f}
			return nil
		}
		v = attrValue{kind: otherValue}
		return w.skip()
	})
	return v, err
}

// numberText is a number token's text, or a string's (protobuf's JSON
// writes 64-bit integers as strings).
func numberText(t json.Token) (string, bool) {
	switch x := t.(type) {
	case json.Number:
		return string(x), true
	case string:
		return x, true
	}
	return "", false
}

// jsonDouble reads a double as protobuf's JSON writes it: a number, or a
// string holding one, "NaN", "Infinity" or "-Infinity".
func jsonDouble(t json.Token) (float64, bool) {
	s, ok := numberText(t)
	if !ok {
		return 0, false
	}
	switch s {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// describe names a token in an error, clipped.
func describe(t json.Token) string {
	switch x := t.(type) {
	case nil:
		return "null"
	case json.Delim:
		if x == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return strconv.Quote(clipKey(x))
	}
	return clipKey(strings.TrimSpace(fmt.Sprint(t)))
}
