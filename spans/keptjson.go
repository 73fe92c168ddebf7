package spans

import (
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/servetrace/servetrace/internal/llmspan"
)

// The OTLP/JSON shape of a kept span's line: an export of one span, with
// no resource or scope, as the collector's file exporter writes an export
// (hex ids, 64-bit integers as strings).
type (
	keptExport struct {
		ResourceSpans [1]keptResourceSpans `json:"resourceSpans"`
	}
	keptResourceSpans struct {
		ScopeSpans [1]keptScopeSpans `json:"scopeSpans"`
	}
	keptScopeSpans struct {
		Spans [1]keptSpan `json:"spans"`
	}
	keptSpan struct {
		TraceID      string     `json:"traceId"`
		SpanID       string     `json:"spanId,omitempty"`
		ParentSpanID string     `json:"parentSpanId,omitempty"`
		Name         string     `json:"name"`
		Kind         int32      `json:"kind,omitempty"`
		Start        string     `json:"startTimeUnixNano,omitempty"`
		End          string     `json:"endTimeUnixNano,omitempty"`
		Attributes   []keptAttr `json:"attributes,omitempty"`
	}
	keptAttr struct {
		Key   string  `json:"key"`
		Value keptAny `json:"value"`
	}
	keptAny struct {
		String *string  `json:"stringValue,omitempty"`
		Int    string   `json:"intValue,omitempty"`
		Double *float64 `json:"doubleValue,omitempty"`
	}
)

// keptLine writes a kept span as one line of OTLP/JSON: its ids, kind,
// times and the llm_request attributes it holds (keptAttrs), named
// llm_request whatever name its exporter gave it. Nothing else of the
// span is written, so no prompt or answer text reaches the run dir.
func keptLine(rec *spanRecord) ([]byte, error) {
	sp := keptSpan{TraceID: hex.EncodeToString(rec.traceID.bytes()), SpanID: hex.EncodeToString(rec.spanID.bytes()),
		ParentSpanID: hex.EncodeToString(rec.parentSpanID.bytes()), Name: llmspan.Name, Kind: rec.kind}
	if rec.start != 0 {
		sp.Start = strconv.FormatUint(rec.start, 10)
	}
	if rec.end != 0 {
		sp.End = strconv.FormatUint(rec.end, 10)
	}
	for i, v := range rec.attrs {
		var a keptAny
		switch v.kind {
		case stringValue:
			a.String = &v.s
		case intValue:
			a.Int = strconv.FormatInt(v.i, 10)
		case doubleValue:
			f, ok := v.number()
			if !ok {
				continue // JSON has no NaN; the span was kept without this value
			}
			a.Double = &f
		default:
			continue
		}
		sp.Attributes = append(sp.Attributes, keptAttr{Key: keptAttrs[i], Value: a})
	}
	var doc keptExport
	doc.ResourceSpans[0].ScopeSpans[0].Spans[0] = sp
	b, err := json.Marshal(&doc)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
