package datasets

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// patternReader reads pattern n times over.
type patternReader struct {
	pattern []byte
	n, off  int
}

func (r *patternReader) Read(p []byte) (int, error) {
	k := 0
	for k < len(p) && r.n > 0 {
		c := copy(p[k:], r.pattern[r.off:])
		k += c
		if r.off += c; r.off == len(r.pattern) {
			r.off, r.n = 0, r.n-1
		}
	}
	if k == 0 {
		return 0, io.EOF
	}
	return k, nil
}

// otlpChatAttrs are a chat span's attributes, for the line's one request.
const otlpChatAttrs = `{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"7"}},{"key":"gen_ai.usage.output_tokens","value":{"intValue":"3"}}`

// otlpChatSpan is a chat span that converts.
const otlpChatSpan = `{"startTimeUnixNano":"1735689600000000000","attributes":[` + otlpChatAttrs + `]}`

// TestLongOTLPDecodedSizeIsBounded (issue 46, round 4, item 4): an OTLP
// document of millions of tiny elements, where one span holds a few
// that convert, is read within 256 MiB: a span's attributes are decoded
// only for the keys convert reads (the first of each), an array
// attribute's first 64 values, events and links not at all, and a
// resourceSpans' spans one at a time. Before, a document decoded to 30
// to 50 times its bytes (88 bytes an attribute, 160 a span), and the
// cases marked so ran out of the cap.
func TestLongOTLPDecodedSizeIsBounded(t *testing.T) {
	span := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"1735689600000000000","attributes":[`
	for _, c := range []struct {
		name               string
		head, filler, tail string
		n                  int
		rows               int64
		reject             string
	}{
		{"3M empty attributes before the span's own (ran out before)", span, `{},`, otlpChatAttrs + `]}]}]}]}`, 3_000_000, 1, ""},
		{"1M attributes no one reads (ran out before)", span, `{"key":"x"},`, otlpChatAttrs + `]}]}]}]}`, 1_000_000, 1, ""},
		{"a span of 3M events", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"1735689600000000000","events":[`, `{},`,
			`{}],"attributes":[` + otlpChatAttrs + `]}]}]}]}`, 3_000_000, 1, ""},
		{"2M empty spans, then one (ran out before)", `{"resourceSpans":[{"scopeSpans":[{"spans":[`, `{},`, otlpChatSpan + `]}]}]}`, 2_000_000, 1, ""},
		{"a resource of 3M attributes, after its spans (ran out before)", `{"resourceSpans":[{"scopeSpans":[{"spans":[` + otlpChatSpan + `]}],"resource":{"attributes":[`, `{},`,
			`{"key":"user.id","value":{"stringValue":"u1"}}]}}]}`, 3_000_000, 1, ""},
		{"finish reasons of 3M values (ran out before)", span + otlpChatAttrs + `,{"key":"gen_ai.response.finish_reasons","value":{"arrayValue":{"values":[`, `{},`,
			`{}]}}}]}]}]}]}`, 3_000_000, 0, "gen_ai.response.finish_reasons: not an array of strings"},
	} {
		t.Run(c.name, func(t *testing.T) {
			memcap.Run(t, 256<<20, func(t *testing.T) {
				in := io.MultiReader(strings.NewReader(c.head), &patternReader{pattern: []byte(c.filler), n: c.n}, strings.NewReader(c.tail+"\n"))
				var sink memSink
				st, err := Read(context.Background(), in, Options{Name: "hostile.otlp.jsonl", Format: FormatOTLP, Log: LogOptions{Salt: testSalt(t)}}, &sink)
				if err != nil {
					t.Fatal(err)
				}
				if st.Rows != c.rows || c.rows > 0 && (sink.rows[0].InputTokens != 7 || sink.rows[0].OutputTokens != 3) {
					t.Errorf("%d rows %+v; want %d of 7/3 tokens", st.Rows, sink.rows, c.rows)
				}
				if strings.Contains(c.name, "resource") && sink.rows[0].Tenant == "" {
					t.Error("the resource's user.id, after its attributes, was not read")
				}
				if c.reject != "" && (len(sink.rejects) != 1 || !strings.Contains(sink.rejects[0].Reason, c.reject)) {
					t.Errorf("rejects %+v; want one saying %q", sink.rejects, c.reject)
				}
			})
		})
	}
}

// TestOTLPAttributesReadFirstOfEachKey: of attributes named twice (OTLP
// forbids it), the first is read, as before attributes were filtered;
// attributes convert does not read do not reach it, whatever their type;
// the wrong type of one it reads still rejects the span.
func TestOTLPAttributesReadFirstOfEachKey(t *testing.T) {
	for _, c := range []struct {
		name, attrs string
		in          int64
		reject      string
	}{
		{"first of two", `{"key":"gen_ai.usage.input_tokens","value":{"intValue":"5"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"9"}}`, 5, ""},
		{"second bad, unread", `{"key":"gen_ai.usage.input_tokens","value":{"intValue":"5"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":{"SECRET":1}}}`, 5, ""},
		{"unread key of any shape", `{"key":"llm.prompt","value":{"kvlistValue":{"values":[{"key":"a","value":{"stringValue":"SECRET"}}]}}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"4"}}`, 4, ""},
		{"a read key, badly typed", `{"key":"gen_ai.usage.input_tokens","value":{"stringValue":{"SECRET":1}}}`, 0, "span: field attributes.value.stringValue has the wrong type"},
		{"a key that is no string", `{"key":5,"value":{}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"4"}}`, 0, "span: field attributes.key has the wrong type"},
		{"attributes not a list", ``, 0, "span: field attributes has the wrong type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			attrs := `[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},` + c.attrs + `]`
			if c.attrs == "" {
				attrs = `"not a list"`
			}
			line := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"1735689600000000000","attributes":` + attrs + `}]}]}]}` + "\n"
			var sink memSink
			if _, err := Read(context.Background(), bytes.NewReader([]byte(line)), Options{Name: "in", Format: FormatOTLP, Log: LogOptions{Salt: testSalt(t)}}, &sink); err != nil {
				t.Fatal(err)
			}
			if c.reject != "" {
				if len(sink.rejects) != 1 || !strings.HasPrefix(sink.rejects[0].Reason, c.reject) {
					t.Fatalf("rejects %+v; want %q", sink.rejects, c.reject)
				}
				return
			}
			if len(sink.rows) != 1 || sink.rows[0].InputTokens != c.in {
				t.Fatalf("rows %+v, rejects %+v; want one of %d input tokens", sink.rows, sink.rejects, c.in)
			}
		})
	}
}
