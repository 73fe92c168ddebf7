// Package spans collects what servers say about each request: the spans
// an engine exports over OTLP (vLLM's llm_request), received on loopback
// during a replay or read from a collector's file export afterwards, kept
// for one run only and turned into trace.ServerPhases.
package spans

import (
	"math"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/servetrace/servetrace/internal/llmspan"
	"github.com/servetrace/servetrace/trace"
)

// isRequestSpan tells vLLM's llm_request span: by its name, or, for an
// exporter that renamed it, by its queue or first-token latency beside a
// prompt-token count.
func isRequestSpan(sp *tracepb.Span) bool {
	if sp.GetName() == llmspan.Name {
		return true
	}
	var latency, prompt bool
	for _, kv := range sp.GetAttributes() {
		switch kv.GetKey() {
		case llmspan.Queue, llmspan.TTFT:
			latency = true
		case llmspan.PromptTokens:
			prompt = true
		}
	}
	return latency && prompt
}

// phasesOf reads a request span's phases. bad names the first attribute
// that is present but not a number within bounds; the row is then not
// kept.
func phasesOf(sp *tracepb.Span, traceID string) (p trace.ServerPhases, bad string) {
	p = trace.ServerPhases{TraceID: traceID, Source: "vllm"}
	for _, kv := range sp.GetAttributes() {
		var dst **float64
		var count **int64
		switch kv.GetKey() {
		case llmspan.Queue:
			dst = &p.QueueS
		case llmspan.TTFT:
			dst = &p.TTFTS
		case llmspan.E2E:
			dst = &p.E2ES
		case llmspan.Prefill:
			dst = &p.PrefillS
		case llmspan.Decode:
			dst = &p.DecodeS
		case llmspan.Inference:
			dst = &p.InferenceS
		case llmspan.PromptTokens:
			count = &p.PromptTokens
		case llmspan.CompletionTokens:
			count = &p.CompletionTokens
		case llmspan.RequestID:
			if s, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_StringValue); ok && len(s.StringValue) <= 256 {
				p.ServerRequestID = s.StringValue
			}
			continue
		default:
			continue
		}
		v, ok := number(kv.GetValue())
		switch {
		case !ok:
			return p, kv.GetKey()
		case dst != nil:
			if !(v >= 0 && v <= trace.MaxServerS) {
				return p, kv.GetKey()
			}
			*dst = trace.Ptr(v)
		default:
			if !(v >= 0 && v <= trace.MaxTokens) || v != math.Trunc(v) {
				return p, kv.GetKey()
			}
			*count = trace.Ptr(int64(v))
		}
	}
	if err := p.Validate(); err != nil {
		return p, err.Error()
	}
	return p, ""
}

// number reads an OTLP value that holds a number: Python's SDK writes a
// float as a double and an int as an int.
func number(v *commonpb.AnyValue) (float64, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue, !math.IsNaN(x.DoubleValue) && !math.IsInf(x.DoubleValue, 0)
	case *commonpb.AnyValue_IntValue:
		return float64(x.IntValue), true
	}
	return 0, false
}
