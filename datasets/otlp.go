package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// FormatOTLP is an OpenTelemetry trace export in the OTLP/JSON encoding
// (TracesData or ExportTraceServiceRequest: {"resourceSpans": [...]}), one
// document per line as the collector's file exporter writes it, or
// documents pretty-printed across lines. Spans carrying the GenAI semantic
// conventions' inference attributes (gen_ai.operation.name chat,
// text_completion or generate_content) become requests; every other span
// is skipped and counted in a manifest note, since a trace holds far more
// than model calls. Only the attributes named in otlpReader.convert are
// read: prompt and completion content (gen_ai.input.messages,
// gen_ai.prompt, content events, ...) is never read into a row.
const FormatOTLP = "otlp"

// otlpSpan is the part of an OTLP span the reader uses. Events, links and
// the scope are not decoded at all, so content recorded on events never
// reaches a Go value, and a span of a million events costs only their
// scan; of its attributes only those convert reads are (otlpAttributes).
type otlpSpan struct {
	TraceID string `json:"traceId"`
	SpanID  string `json:"spanId"`
	// ParentSpanID nests agent, tool and model-call spans (otlpGraph).
	ParentSpanID string         `json:"parentSpanId"`
	Name         string         `json:"name"`
	Start        otlpUint       `json:"startTimeUnixNano"`
	End          otlpUint       `json:"endTimeUnixNano"`
	Attributes   otlpAttributes `json:"attributes"`
}

// otlpResource holds the resource attributes (service, user) the spans of
// one resourceSpans share.
type otlpResource struct {
	Attributes otlpAttributes `json:"attributes"`
}

// otlpUint is a fixed64 time: in OTLP/JSON a decimal string, though the
// protobuf JSON mapping lets a decoder accept a number too.
type otlpUint struct {
	v   uint64
	set bool
}

func (u *otlpUint) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	s = strings.Trim(s, `"`)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// A type error, so the decoder names the field in it.
		return &json.UnmarshalTypeError{Value: "text", Type: reflect.TypeFor[uint64]()}
	}
	u.v, u.set = v, true
	return nil
}

// otlpKV is one attribute.
type otlpKV struct {
	Key   string   `json:"key"`
	Value otlpAnyV `json:"value"`
}

// otlpAnyV is an AnyValue. intValue is a decimal string in OTLP/JSON (a
// number is accepted too); doubleValue a number, or "NaN"/"Infinity" as
// text. kvlistValue and bytesValue, which only content uses, are not
// decoded; of an arrayValue only the first maxArrayValues strings are.
type otlpAnyV struct {
	StringValue *string         `json:"stringValue"`
	IntValue    json.RawMessage `json:"intValue"`
	DoubleValue json.RawMessage `json:"doubleValue"`
	BoolValue   *bool           `json:"boolValue"`
	ArrayValue  *struct {
		Values otlpStrings `json:"values"`
	} `json:"arrayValue"`
}

// maxArrayValues is how many values of an array attribute are decoded:
// convert reads only the first finish reason.
const maxArrayValues = 64

// otlpStrings is an array attribute's values, each a string or, for a
// value of another type, nil: only the first maxArrayValues are decoded,
// the rest scanned past, so an array of millions costs no memory.
type otlpStrings []*string

func (v *otlpStrings) UnmarshalJSON(b []byte) error {
	*v = nil
	return eachElement(b, reflect.TypeFor[otlpStrings](), func(dec *json.Decoder) error {
		if len(*v) == maxArrayValues {
			return dec.Decode(&jsonSkipped{})
		}
		var e struct {
			StringValue *string `json:"stringValue"`
		}
		err := dec.Decode(&e)
		*v = append(*v, e.StringValue)
		return err
	})
}

// otlpReadKeys are the attributes convert reads (otlpReader.convert,
// isVLLMRequestSpan, otlpGraph.note): only these are decoded, the first
// of each, so what a span decodes into does not grow with how many
// attributes it has. get panics on a key not listed, so a key read
// without being listed fails every test that reads a span.
var otlpReadKeys = func() map[string]bool {
	keys := map[string]bool{}
	for _, k := range []string{
		"gen_ai.operation.name", "gen_ai.conversation.id", "gen_ai.request.model", "gen_ai.response.model",
		"gen_ai.request.max_tokens", "gen_ai.request.stream", "gen_ai.request.temperature", "gen_ai.request.top_p",
		"gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.image.input_tokens",
		"gen_ai.tool.definitions", "gen_ai.output.type", "gen_ai.response.finish_reasons", "http.response.status_code",
		"gen_ai.latency.e2e", "gen_ai.latency.time_in_queue",
	} {
		keys[k] = true
	}
	for _, sk := range []spanKeys{genAIKeys, vllmSpanKeys} {
		keys[sk.input], keys[sk.output], keys[sk.n], keys[sk.ttft] = true, true, true, true
	}
	for _, k := range otlpTenantKeys {
		keys[k] = true
	}
	return keys
}()

type otlpAttributes []otlpKV

// UnmarshalJSON decodes the attributes convert reads (otlpReadKeys), the
// first of each key; every other one is scanned past, its value never
// decoded.
func (a *otlpAttributes) UnmarshalJSON(b []byte) error {
	*a = nil
	return eachElement(b, reflect.TypeFor[otlpAttributes](), func(dec *json.Decoder) error {
		var kv struct {
			Key   string      `json:"key"`
			Value jsonSkipped `json:"value"`
		}
		if err := dec.Decode(&kv); err != nil {
			return err
		}
		if !otlpReadKeys[kv.Key] || slices.ContainsFunc(*a, func(x otlpKV) bool { return x.Key == kv.Key }) {
			return nil
		}
		e := otlpKV{Key: kv.Key}
		if kv.Value == nil { // no value: an empty one
			*a = append(*a, e)
			return nil
		}
		if err := json.Unmarshal(kv.Value, &e.Value); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				te.Field = "value." + te.Field
			}
			return err
		}
		*a = append(*a, e)
		return nil
	})
}

// eachElement calls fn to decode each element of the JSON array b (null:
// none); anything else is a type error for t, which the decoder of the
// enclosing value names the field of.
func eachElement(b []byte, t reflect.Type, fn func(dec *json.Decoder) error) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &json.UnmarshalTypeError{Value: "not an array", Type: t}
	}
	for dec.More() {
		if err := fn(dec); err != nil {
			return err
		}
	}
	return nil
}

// jsonSkipped is a value scanned but not decoded: its bytes, valid only
// until the decoder reads on.
type jsonSkipped []byte

func (s *jsonSkipped) UnmarshalJSON(b []byte) error { *s = b; return nil }

// get returns the first attribute named key (OTLP forbids duplicates).
// It panics on a key not in otlpReadKeys, which would never be found.
func (a otlpAttributes) get(key string) (*otlpAnyV, bool) {
	if !otlpReadKeys[key] {
		panic("otlp: attribute " + key + " is read but not decoded: list it in otlpReadKeys")
	}
	for i := range a {
		if a[i].Key == key {
			return &a[i].Value, true
		}
	}
	return nil, false
}

// str reads a string attribute; an int is accepted as its decimal text
// (ids are sometimes numbers).
func (a otlpAttributes) str(key string) (string, bool, error) {
	v, ok := a.get(key)
	if !ok {
		return "", false, nil
	}
	switch {
	case v.StringValue != nil:
		return *v.StringValue, true, nil
	case v.IntValue != nil:
		n, err := rawInt(v.IntValue)
		if err != nil {
			return "", true, bad(key, "not a string")
		}
		return strconv.FormatInt(n, 10), true, nil
	}
	return "", true, bad(key, "not a string")
}

// count reads a non-negative whole number: intValue, or a whole
// doubleValue or numeric string, since some SDKs record every number as a
// double or text.
func (a otlpAttributes) count(key string) (int64, bool, error) {
	v, ok := a.get(key)
	if !ok {
		return 0, false, nil
	}
	var n int64
	var err error
	switch {
	case v.IntValue != nil:
		n, err = rawInt(v.IntValue)
	case v.DoubleValue != nil:
		var f float64
		f, err = rawFloat(v.DoubleValue)
		if err == nil && (f != math.Trunc(f) || math.Abs(f) > 1<<53) {
			err = errors.New("fractional")
		}
		n = int64(f)
	case v.StringValue != nil:
		n, err = strconv.ParseInt(strings.TrimSpace(*v.StringValue), 10, 64)
	default:
		err = errors.New("wrong type")
	}
	if err != nil {
		return 0, true, bad(key, "not a whole number")
	}
	if n < 0 {
		return 0, true, bad(key, "negative")
	}
	return n, true, nil
}

// float reads a finite number (doubleValue, or intValue).
func (a otlpAttributes) float(key string) (float64, bool, error) {
	v, ok := a.get(key)
	if !ok {
		return 0, false, nil
	}
	var f float64
	var err error
	switch {
	case v.DoubleValue != nil:
		f, err = rawFloat(v.DoubleValue)
	case v.IntValue != nil:
		var n int64
		n, err = rawInt(v.IntValue)
		f = float64(n)
	case v.StringValue != nil:
		f, err = strconv.ParseFloat(strings.TrimSpace(*v.StringValue), 64)
	default:
		err = errors.New("wrong type")
	}
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, true, bad(key, "not a finite number")
	}
	return f, true, nil
}

// flag reads a boolean (boolValue, or the text true/false).
func (a otlpAttributes) flag(key string) (bool, bool, error) {
	v, ok := a.get(key)
	if !ok {
		return false, false, nil
	}
	switch {
	case v.BoolValue != nil:
		return *v.BoolValue, true, nil
	case v.StringValue != nil:
		if b, err := strconv.ParseBool(*v.StringValue); err == nil {
			return b, true, nil
		}
	}
	return false, true, bad(key, "not a boolean")
}

// strs reads a string array; a lone string, or a JSON array written as a
// string by SDKs without array attributes, is accepted too.
func (a otlpAttributes) strs(key string) ([]string, bool, error) {
	v, ok := a.get(key)
	if !ok {
		return nil, false, nil
	}
	switch {
	case v.ArrayValue != nil:
		out := make([]string, 0, len(v.ArrayValue.Values))
		for _, e := range v.ArrayValue.Values {
			if e == nil {
				return nil, true, bad(key, "not an array of strings")
			}
			out = append(out, *e)
		}
		return out, true, nil
	case v.StringValue != nil:
		s := strings.TrimSpace(*v.StringValue)
		var arr []string
		if strings.HasPrefix(s, "[") && json.Unmarshal([]byte(s), &arr) == nil {
			return arr, true, nil
		}
		return []string{*v.StringValue}, true, nil
	}
	return nil, true, bad(key, "not an array of strings")
}

func rawInt(b json.RawMessage) (int64, error) {
	return strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
}

func rawFloat(b json.RawMessage) (float64, error) {
	return strconv.ParseFloat(strings.Trim(string(b), `"`), 64)
}

// otlpAPI maps gen_ai.operation.name to the request's API. Only inference
// operations are requests a server serves token by token; embeddings,
// tools and agents are not replayable as such and are skipped.
var otlpAPI = map[string]string{
	"chat":             trace.APIChat,
	"generate_content": trace.APIChat, // Gemini-style multimodal chat
	"text_completion":  trace.APICompletions,
}

// otlpKnownOps are the other operations of the GenAI conventions, named in
// the skip note; any other value is counted as "another operation", so a
// note never quotes the input.
var otlpKnownOps = []string{"embeddings", "execute_tool", "invoke_agent", "create_agent", "retrieval", "search_memory", "create_memory", "update_memory", "delete_memory", "upsert_memory"}

// otlpTenantKeys name the tenant or user, looked up on the span and then on
// its resource; the first present is HMAC'd into the tenant column.
var otlpTenantKeys = []string{"tenant.id", "user.id", "enduser.id"}

// otlpReader converts the spans of one source.
type otlpReader struct {
	lr      *logReader
	st      *Stats
	sink    Sink
	ctx     context.Context
	skipped map[string]int64
	spans   int64
	// vllm counts vLLM's own llm_request spans read as requests.
	vllm int64
	// graph holds the model calls of traces still being read.
	graph *otlpGraph
}

// readOTLP converts an OTLP/JSON export. A first line that is a whole JSON
// document means one document per line, where a corrupt line costs only
// itself; anything else is read as documents spanning lines.
func readOTLP(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	lr, _, err := newLogReader(opts, false)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Salt: lr.lo.Salt}
	o := &otlpReader{lr: lr, st: &st, sink: sink, ctx: ctx, skipped: map[string]int64{}, graph: newOTLPGraph()}
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		br.Discard(3)
	}
	first, err := peekLine(br)
	if err != nil {
		return st, fmt.Errorf("%s: %w", opts.Name, err)
	}
	if json.Valid(bytes.TrimSpace(first)) {
		err = o.readLines(br) // a document per line: a bad line costs only itself
	} else {
		err = o.readStream(br) // documents across lines
	}
	if err == nil {
		err = o.flushAll()
	}
	st.Notes = append(st.Notes, o.skipNote()...)
	st.Notes = append(st.Notes, o.graphNote()...)
	st.Notes = append(st.Notes, lr.sessionNotes()...)
	return st, err
}

// readLines reads one document per line, as the collector's file exporter
// writes them.
func (o *otlpReader) readLines(br *bufio.Reader) error {
	lines := lineReader{br: br}
	for n := int64(1); ; n++ {
		if o.ctx.Err() != nil {
			return o.ctx.Err()
		}
		line, err := lines.next()
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, errLineTooLong) {
			if err := o.reject(n, err.Error()+": split the export into smaller documents"); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s line %d: %w", o.lr.opts.Name, n, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := o.document(line, n); err != nil {
			return err
		}
	}
}

// readStream reads documents that span lines (pretty-printed JSON), one
// after another, each bounded by MaxLineBytes (jsonDocs).
func (o *otlpReader) readStream(br *bufio.Reader) error {
	docs := newJSONDocs(br)
	for {
		doc, line, err := docs.next()
		var re *rowError
		switch {
		case err == io.EOF:
			return nil
		case errors.As(err, &re):
			reason := re.Error()
			if errors.Is(err, errDocTooLong) {
				reason += ": split the export into smaller documents (one resourceSpans each), one per line"
			}
			if err := o.reject(line, reason); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("%s line %d: %w", o.lr.opts.Name, line, err)
		}
		if err := o.document(doc, line); err != nil {
			return err
		}
		if o.ctx.Err() != nil {
			return o.ctx.Err()
		}
	}
}

func (o *otlpReader) reject(line int64, reason string) error {
	return o.st.reject(o.sink, o.lr.opts.Name, line, reason)
}

// spanAt is a decoded span and the line it starts on.
type spanAt struct {
	span otlpSpan
	line int64
	err  error
}

// document converts the spans of one document, which starts on line
// first. Malformed JSON rejects the document; a span whose fields have
// the wrong types rejects that span, on its own line.
func (o *otlpReader) document(doc []byte, first int64) error {
	if !json.Valid(doc) {
		var raw json.RawMessage
		err := json.Unmarshal(doc, &raw)
		line := first
		var se *json.SyntaxError
		if errors.As(err, &se) && se.Offset >= 1 && se.Offset <= int64(len(doc)) {
			// Offset counts the bytes read through the bad one.
			line += int64(bytes.Count(doc[:se.Offset-1], []byte{'\n'}))
		}
		return o.reject(line, "malformed JSON: "+jsonReason(err))
	}
	// lineAt turns a byte offset into a line, counting on from the last
	// offset asked (offsets only grow).
	lastOff, lastLine := 0, first
	lineAt := func(off int) int64 {
		for off < len(doc) && (doc[off] == ' ' || doc[off] == '\t' || doc[off] == '\r' || doc[off] == '\n' || doc[off] == ',') {
			off++
		}
		lastLine += int64(bytes.Count(doc[lastOff:off], []byte{'\n'}))
		lastOff = off
		return lastLine
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	err := jsonObject(dec, func(key string) error {
		if key != "resourceSpans" {
			return jsonSkip(dec)
		}
		return jsonArray(dec, "resourceSpans", func() error {
			line := lineAt(int(dec.InputOffset()))
			start := lastOff // the element's first byte
			if err := jsonSkip(dec); err != nil {
				return err
			}
			return o.resourceSpans(doc[start:dec.InputOffset()], start, line, lineAt)
		})
	})
	var shape *otlpShapeError
	if errors.As(err, &shape) {
		at := int(dec.InputOffset())
		if shape.at > 0 {
			at = shape.at
		}
		return o.reject(lineAt(at), shape.Error())
	}
	return err
}

// resourceSpans converts the spans of one resourceSpans element, rs,
// which starts at offset off of its document, on line. It is read twice:
// once for its resource, which may come after its spans, then for its
// spans, each decoded and converted in turn, so only one span is ever
// decoded however many the element holds. A resource of the wrong shape
// rejects the element, a span of the wrong shape that span.
func (o *otlpReader) resourceSpans(rs []byte, off int, line int64, lineAt func(off int) int64) error {
	var res otlpResource
	var resErr error
	dec := json.NewDecoder(bytes.NewReader(rs))
	err := walkResourceSpans(dec, func() error {
		if err := dec.Decode(&res); err != nil {
			resErr = err
		}
		return nil
	}, func() error { return jsonSkip(dec) })
	var shape *otlpShapeError
	if errors.As(err, &shape) {
		shape.at = off + int(dec.InputOffset())
	}
	if err != nil {
		return err
	}
	if resErr != nil {
		return o.reject(line, "resource: "+jsonReason(resErr))
	}
	dec = json.NewDecoder(bytes.NewReader(rs))
	return walkResourceSpans(dec, func() error { return jsonSkip(dec) }, func() error {
		s := spanAt{line: lineAt(off + int(dec.InputOffset()))}
		s.err = dec.Decode(&s.span)
		return o.span(&s, res.Attributes)
	})
}

// walkResourceSpans reads a resourceSpans element, calling resource to
// consume its resource and span to consume each of its spans.
func walkResourceSpans(dec *json.Decoder, resource, span func() error) error {
	return jsonObject(dec, func(key string) error {
		switch key {
		case "resource":
			return resource()
		case "scopeSpans":
			return jsonArray(dec, "scopeSpans", func() error {
				return jsonObject(dec, func(key string) error {
					if key != "spans" {
						return jsonSkip(dec)
					}
					return jsonArray(dec, "spans", span)
				})
			})
		}
		return jsonSkip(dec)
	})
}

// otlpShapeError is a document whose structure is not OTLP's (an array
// where an object belongs, say); at is where in the document, where known
// (0: where its decoder stopped).
type otlpShapeError struct {
	what string
	at   int
}

func (e *otlpShapeError) Error() string { return e.what }

// jsonObject reads an object (or null), calling fn for each key; fn must
// consume the key's value.
func jsonObject(dec *json.Decoder, fn func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return &otlpShapeError{what: "malformed JSON"}
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &otlpShapeError{what: "want an object: not an OTLP/JSON document"}
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return &otlpShapeError{what: "malformed JSON"}
		}
		if err := fn(k.(string)); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	if err != nil {
		return &otlpShapeError{what: "malformed JSON"}
	}
	return nil
}

// jsonArray reads an array (or null) named name, calling fn to consume
// each element.
func jsonArray(dec *json.Decoder, name string, fn func() error) error {
	tok, err := dec.Token()
	if err != nil {
		return &otlpShapeError{what: "malformed JSON"}
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &otlpShapeError{what: name + ": not an array"}
	}
	for dec.More() {
		if err := fn(); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return &otlpShapeError{what: "malformed JSON"}
	}
	return nil
}

// jsonSkip consumes one value without decoding or copying it.
func jsonSkip(dec *json.Decoder) error {
	var raw jsonSkipped
	if err := dec.Decode(&raw); err != nil {
		return &otlpShapeError{what: "malformed JSON"}
	}
	return nil
}

// span converts one span, or skips it (not an inference span), or rejects
// it (a GenAI attribute of the wrong type, missing usage, bad times).
func (o *otlpReader) span(s *spanAt, resource otlpAttributes) error {
	o.spans++
	if o.spans&1023 == 0 && o.ctx.Err() != nil {
		return o.ctx.Err()
	}
	if s.err != nil {
		return o.reject(s.line, "span: "+jsonReason(s.err))
	}
	root, repeat := o.graph.note(&s.span)
	if repeat {
		return nil // a retried export's copy: the first was read
	}
	req, endUs, skip, err := o.convert(&s.span, resource, s.line)
	if err == nil && skip == "" {
		err = validRow(&req) // a row that fails is rejected now, never held or linked
	}
	switch {
	case skip != "":
		o.skipped[skip]++
	case err == nil && !root && s.span.TraceID != "" && s.span.SpanID != "":
		// More of its trace is to come: held for the agent graph.
		o.graph.hold(&s.span, heldRequest{req: req, endUs: endUs, line: s.line, logged: req.SessionID != ""})
	default:
		if err == nil {
			req, err = o.lr.finish(prepared{req: req, endUs: endUs, logged: req.SessionID != ""})
		}
		if err := o.lr.settle(o.st, o.sink, s.line, req, err); err != nil {
			return err
		}
	}
	if root {
		if err := o.flush(strings.ToLower(s.span.TraceID)); err != nil {
			return err
		}
	}
	for id, ok := o.graph.oldest(); ok; id, ok = o.graph.oldest() {
		if err := o.flush(id); err != nil {
			return err
		}
	}
	return nil
}

// flush links and writes the model calls held of trace id. The order
// check is not theirs to pass: they were held while later rows were
// written.
func (o *otlpReader) flush(id string) error {
	held := o.graph.take(id)
	linked := slices.ContainsFunc(held, func(h heldRequest) bool { return len(h.req.ParentIDs) > 0 })
	if linked && held[0].logged {
		// The trace continues a conversation other traces had turns of.
		calls := make([]*trace.Request, len(held))
		ends := make([]int64, len(held))
		for i := range held {
			calls[i], ends[i] = &held[i].req, held[i].endUs
		}
		o.lr.continueConversation(calls, ends)
	}
	for _, h := range held {
		req, err := o.lr.finish(prepared{req: h.req, endUs: h.endUs, logged: h.logged && !linked, held: true})
		rows := o.st.Rows
		if err := o.lr.settle(o.st, o.sink, h.line, req, err); err != nil {
			return err
		}
		if o.st.Rows > rows && len(req.ParentIDs) > 0 {
			o.graph.linked++
		}
	}
	return nil
}

// flushAll writes every trace still held, at the end of the input.
func (o *otlpReader) flushAll() error {
	for id, ok := o.graph.next(); ok; id, ok = o.graph.next() {
		if err := o.flush(id); err != nil {
			return err
		}
	}
	return nil
}

// graphNote says how many model calls were linked, and how.
func (o *otlpReader) graphNote() []string {
	var notes []string
	if g := o.graph; g.linked > 0 {
		notes = append(notes, fmt.Sprintf("%d model calls follow others of their trace (parent_ids from the agent spans: invoke_agent, execute_tool, chat)", g.linked))
	}
	if g := o.graph; g.early > 0 {
		notes = append(notes, fmt.Sprintf("%d traces were linked before their root span was read (more than %d spans held)", g.early, maxHeldSpans))
	}
	if g := o.graph; g.duplicates > 0 {
		notes = append(notes, fmt.Sprintf("%d spans repeated a trace and span id read before (a retried export) and were dropped, the first of each kept", g.duplicates))
	}
	return notes
}

// convert reads a span's GenAI attributes (semantic conventions'
// gen_ai.* registry) into a request. skip names why a span is not an
// inference request; err (a rowError) why an inference span is rejected.
func (o *otlpReader) convert(sp *otlpSpan, resource otlpAttributes, line int64) (req trace.Request, endUs int64, skip string, err error) {
	a := sp.Attributes
	op, ok, err := a.str("gen_ai.operation.name")
	keys, api := genAIKeys, ""
	switch {
	case err != nil:
		return req, 0, "gen_ai.operation.name not a string", nil
	case !ok && isVLLMRequestSpan(sp):
		keys, api = vllmSpanKeys, o.lr.opts.API
		if api == "" {
			api = trace.APIChat
		}
		o.vllm++
	case !ok:
		return req, 0, "no gen_ai.operation.name (not an inference span, nor vLLM's llm_request)", nil
	default:
		var inference bool
		if api, inference = otlpAPI[op]; !inference {
			if slices.Contains(otlpKnownOps, op) {
				return req, 0, "gen_ai.operation.name " + op, nil
			}
			return req, 0, "another gen_ai.operation.name", nil
		}
	}
	lo, salt := o.lr.lo, o.lr.lo.Salt
	if !sp.Start.set || sp.Start.v == 0 {
		return req, 0, "", bad("startTimeUnixNano", "missing")
	}
	if sp.Start.v > math.MaxInt64 {
		return req, 0, "", bad("startTimeUnixNano", "out of range")
	}
	req.TS = int64(sp.Start.v / 1000)
	endUs = -1
	if sp.End.set && sp.End.v != 0 {
		if sp.End.v < sp.Start.v {
			return req, 0, "", bad("endTimeUnixNano", "before startTimeUnixNano")
		}
		req.E2EMs = new(float64(sp.End.v-sp.Start.v) / 1e6)
		endUs = req.TS + int64((sp.End.v-sp.Start.v)/1000)
	}

	// Identity: the span's ids, the conversation and the user, all keyed.
	rawID := strings.ToLower(sp.TraceID) + "/" + strings.ToLower(sp.SpanID)
	if sp.TraceID == "" && sp.SpanID == "" {
		rawID = fmt.Sprintf("%s:%d:%d", o.lr.opts.Name, line, o.spans)
	}
	req.RequestID = salt.ID("request", rawID)
	if conv, ok, err := a.str("gen_ai.conversation.id"); err != nil {
		return req, 0, "", err
	} else if ok && conv != "" {
		req.SessionID = salt.ID("session", conv)
	}
	for _, attrs := range []otlpAttributes{a, resource} {
		tenant, found := "", false
		for _, k := range otlpTenantKeys {
			if v, ok, err := attrs.str(k); err != nil {
				return req, 0, "", err
			} else if ok && v != "" {
				tenant, found = v, true
				break
			}
		}
		if found {
			req.Tenant = salt.HMAC("tenant", tenant)
			break
		}
	}
	for _, k := range []string{"gen_ai.request.model", "gen_ai.response.model"} {
		if m, ok, err := a.str(k); err != nil {
			return req, 0, "", err
		} else if ok && m != "" {
			req.Model = m
			break
		}
	}
	if req.Model == "" {
		req.Model = o.lr.opts.Model
	}
	if lo.HashNames && req.Model != "" {
		req.Model = "model-" + salt.HMAC("model", req.Model)[:12]
	}

	// Shape: usage, the request's parameters, features.
	req.API, req.Stream, req.N = api, o.lr.opts.Stream, 1
	in, ok, err := a.count(keys.input)
	if err != nil {
		return req, 0, "", err
	}
	if !ok {
		return req, 0, "", bad(keys.input, "missing (the instrumentation recorded no usage)")
	}
	req.InputTokens = in
	if n, ok, err := a.count(keys.output); err != nil {
		return req, 0, "", err
	} else if ok {
		req.OutputTokens = n
	}
	req.MaxTokens = req.OutputTokens
	if n, ok, err := a.count("gen_ai.request.max_tokens"); err != nil {
		return req, 0, "", err
	} else if ok {
		req.MaxTokens = n
	}
	if b, ok, err := a.flag("gen_ai.request.stream"); err != nil {
		return req, 0, "", err
	} else if ok {
		req.Stream = b
	}
	if n, ok, err := a.count(keys.n); err != nil {
		return req, 0, "", err
	} else if ok {
		if n < 1 || n > math.MaxInt32 {
			return req, 0, "", bad(keys.n, "not a positive count")
		}
		req.N = int32(n)
	}
	for _, p := range []struct {
		key string
		dst **float64
	}{{"gen_ai.request.temperature", &req.Temperature}, {"gen_ai.request.top_p", &req.TopP}} {
		if f, ok, err := a.float(p.key); err != nil {
			return req, 0, "", err
		} else if ok {
			if f < 0 {
				return req, 0, "", bad(p.key, "negative")
			}
			*p.dst = new(f)
		}
	}
	if n, ok, err := a.count("gen_ai.usage.cache_read.input_tokens"); err != nil {
		return req, 0, "", err
	} else if ok {
		req.CachedTokens = new(n)
	}
	if n, _, err := a.count("gen_ai.usage.reasoning.output_tokens"); err != nil {
		return req, 0, "", err
	} else if n > 0 {
		req.Features = append(req.Features, "reasoning")
	}
	if n, _, err := a.count("gen_ai.usage.image.input_tokens"); err != nil {
		return req, 0, "", err
	} else if n > 0 {
		req.Features = append(req.Features, "image")
	}
	if _, ok := a.get("gen_ai.tool.definitions"); ok { // presence only: the definitions are content
		req.Features = append(req.Features, "tools")
	}
	if t, _, _ := a.str("gen_ai.output.type"); t == "json" {
		req.Features = append(req.Features, "json")
	}
	slices.Sort(req.Features)

	// Outcome as recorded.
	if rs, ok, err := a.strs("gen_ai.response.finish_reasons"); err != nil {
		return req, 0, "", err
	} else if ok && len(rs) > 0 {
		req.FinishReason = new(rs[0])
	}
	if code, ok, err := a.count("http.response.status_code"); err != nil {
		return req, 0, "", err
	} else if ok {
		if code < 100 || code > 999 {
			return req, 0, "", bad("http.response.status_code", "not an HTTP status")
		}
		req.Status = new(int32(code))
	}
	if s, ok, err := a.float(keys.ttft); err != nil {
		return req, 0, "", err
	} else if ok {
		if s < 0 {
			return req, 0, "", bad(keys.ttft, "negative")
		}
		req.TTFTMs = new(s * 1000)
	}
	return req, endUs, "", nil
}

// spanKeys are the attributes a kind of span keeps its usage, choice
// count and time to first token under.
type spanKeys struct{ input, output, n, ttft string }

// genAIKeys are the GenAI semantic conventions' (gen-ai-spans.md).
var genAIKeys = spanKeys{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.request.choice.count", "gen_ai.response.time_to_first_chunk"}

// vllmSpanKeys are vLLM's own, for the llm_request span its engine exports
// with --otlp-traces-endpoint (vllm/tracing.py, SpanAttributes: the
// conventions' older usage names, and latencies in seconds; the span's
// start is the request's arrival, written by
// vllm/v1/engine/output_processor.py).
var vllmSpanKeys = spanKeys{"gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "gen_ai.request.n", "gen_ai.latency.time_to_first_token"}

// isVLLMRequestSpan tells vLLM's llm_request span: its name, or its
// prompt-token usage beside one of its gen_ai.latency.* timings.
func isVLLMRequestSpan(sp *otlpSpan) bool {
	if sp.Name == "llm_request" {
		return true
	}
	if _, ok := sp.Attributes.get("gen_ai.usage.prompt_tokens"); !ok {
		return false
	}
	for _, k := range []string{"gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue"} {
		if _, ok := sp.Attributes.get(k); ok {
			return true
		}
	}
	return false
}

// skipNote says how many spans were not inference requests, and why, for
// the manifest's notes.
func (o *otlpReader) skipNote() []string {
	var notes []string
	if o.vllm > 0 {
		api := o.lr.opts.API
		if api == "" {
			api = trace.APIChat
		}
		notes = append(notes, fmt.Sprintf("%s: %d spans are vLLM's own llm_request spans, read as requests; they do not say which API was called: taken as %s", o.lr.opts.Name, o.vllm, api))
	}
	var total int64
	for _, n := range o.skipped {
		total += n
	}
	if total > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d spans were not GenAI inference spans (chat, text_completion, generate_content) nor vLLM's llm_request, and were skipped: %s", o.lr.opts.Name, total, ReasonsText(o.skipped)))
	}
	return notes
}

// otlpHead reports whether the input opens an OTLP/JSON document, for
// detection when the first line alone cannot tell (a pretty-printed
// document's first line is "{").
func otlpHead(br *bufio.Reader) bool {
	head, _ := br.Peek(64 << 10)
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	dec := json.NewDecoder(bytes.NewReader(head))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	tok, err := dec.Token()
	return err == nil && tok == "resourceSpans"
}
