package spans

import (
	"math"

	"github.com/servetrace/servetrace/internal/llmspan"
	"github.com/servetrace/servetrace/trace"
)

// spanRecord is what the collector reads of one span: its ids, times,
// kind, whether it is named llm_request, and llmspan's attributes. The
// decoders fill it field by field from the wire and skip everything else
// (other attributes, events, links, resources), so a span takes the same
// few hundred bytes however large its export, and no prompt or answer
// text a span carries is ever held.
type spanRecord struct {
	traceID, spanID, parentSpanID idBytes
	named                         bool // named llmspan.Name
	kind                          int32
	start, end                    uint64
	attrs                         [len(keptAttrs)]attrValue
	// dropped counts the attributes, events and links not kept.
	dropped int64
}

// idBytes is an id as read: at most 16 bytes; a longer one is marked
// too long and matches no run.
type idBytes struct {
	b       [16]byte
	n       int8 // bytes held; -1: longer than 16
	present bool
}

// set records raw as the id.
func (id *idBytes) set(raw []byte) {
	id.present = true
	if len(raw) > len(id.b) {
		id.n = -1
		return
	}
	id.n = int8(copy(id.b[:], raw))
}

// bytes returns the id, nil when absent or too long.
func (id *idBytes) bytes() []byte {
	if !id.present || id.n < 0 {
		return nil
	}
	return id.b[:id.n]
}

// keptAttrs are the attributes a span record keeps: vLLM's llm_request
// attributes (internal/llmspan), numbers but for the server's request id.
var keptAttrs = [...]string{llmspan.Queue, llmspan.TTFT, llmspan.E2E, llmspan.Prefill, llmspan.Decode, llmspan.Inference,
	llmspan.PromptTokens, llmspan.CompletionTokens, llmspan.RequestID, llmspan.MaxTokens, llmspan.Temperature, llmspan.TopP, llmspan.N}

// attrIndex is an attribute's slot in spanRecord.attrs, or -1.
func attrIndex(key []byte) int {
	for i, k := range keptAttrs {
		if string(key) == k {
			return i
		}
	}
	return -1
}

// maxRequestIDBytes bounds the server's request id kept: a longer one is
// not an id.
const maxRequestIDBytes = 256

// valueKind is the type of an attribute's value.
type valueKind uint8

const (
	absent valueKind = iota
	doubleValue
	intValue
	stringValue
	otherValue // a bool, bytes, array or map, or a string too long to keep
)

// attrValue is an attribute's value as read.
type attrValue struct {
	kind valueKind
	f    float64
	i    int64
	s    string
}

// number reads the value as a number: OTLP writes a float as a double
// and an int as an int (Python's SDK, vLLM). NaN and infinities are not.
func (v attrValue) number() (float64, bool) {
	switch v.kind {
	case doubleValue:
		return v.f, !math.IsNaN(v.f) && !math.IsInf(v.f, 0)
	case intValue:
		return float64(v.i), true
	}
	return 0, false
}

// isRequestSpan tells vLLM's llm_request span: by its name, or, for an
// exporter that renamed it, by its queue or first-token latency beside a
// prompt-token count.
func (r *spanRecord) isRequestSpan() bool {
	if r.named {
		return true
	}
	latency := r.attr(llmspan.Queue).kind != absent || r.attr(llmspan.TTFT).kind != absent
	return latency && r.attr(llmspan.PromptTokens).kind != absent
}

// attr returns the value of one of keptAttrs.
func (r *spanRecord) attr(key string) attrValue {
	return r.attrs[attrIndex([]byte(key))]
}

// setAttr records one attribute: kept when llmspan names it (a later one
// of the same key replaces it, as a protobuf decoder would), else counted
// as dropped.
func (r *spanRecord) setAttr(key []byte, v attrValue) {
	i := attrIndex(key)
	if i < 0 {
		r.dropped++
		return
	}
	if v.kind == stringValue && len(v.s) > maxRequestIDBytes {
		v = attrValue{kind: otherValue}
	}
	r.attrs[i] = v
}

// phases reads a request span's phases. bad names the first attribute
// that is present but not a number within bounds; the row is then not
// kept.
func (r *spanRecord) phases(traceID string) (p trace.ServerPhases, bad string) {
	p = trace.ServerPhases{TraceID: traceID, Source: "vllm"}
	if v := r.attr(llmspan.RequestID); v.kind == stringValue {
		p.ServerRequestID = v.s
	}
	durations := []struct {
		key string
		dst **float64
	}{{llmspan.Queue, &p.QueueS}, {llmspan.TTFT, &p.TTFTS}, {llmspan.E2E, &p.E2ES}, {llmspan.Prefill, &p.PrefillS},
		{llmspan.Decode, &p.DecodeS}, {llmspan.Inference, &p.InferenceS}}
	for _, d := range durations {
		v := r.attr(d.key)
		if v.kind == absent {
			continue
		}
		x, ok := v.number()
		if !ok || !(x >= 0 && x <= trace.MaxServerS) {
			return p, d.key
		}
		*d.dst = trace.Ptr(x)
	}
	counts := []struct {
		key string
		dst **int64
	}{{llmspan.PromptTokens, &p.PromptTokens}, {llmspan.CompletionTokens, &p.CompletionTokens}}
	for _, c := range counts {
		v := r.attr(c.key)
		if v.kind == absent {
			continue
		}
		x, ok := v.number()
		if !ok || !(x >= 0 && x <= trace.MaxTokens) || x != math.Trunc(x) {
			return p, c.key
		}
		*c.dst = trace.Ptr(int64(x))
	}
	if err := p.Validate(); err != nil {
		return p, err.Error()
	}
	return p, ""
}
