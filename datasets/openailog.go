package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// FormatOpenAILog is a JSONL log of OpenAI-style requests and responses
// (a gateway's or a server's), read through a Mapping.
const FormatOpenAILog = "openai-log"

// rowError is a reason to reject one log line: the field and what is wrong,
// never the value.
type rowError struct{ field, reason string }

func (e *rowError) Error() string {
	if e.field == "" {
		return e.reason
	}
	return e.field + ": " + e.reason
}

func bad(field, format string, args ...any) error {
	return &rowError{field, fmt.Sprintf(format, args...)}
}

// logReader converts one log source: rows are prepared independently
// (prepare.go), then finished in input order, which checks their order and
// links their sessions (logsessions.go).
type logReader struct {
	opts     Options
	lo       LogOptions
	sessions map[sessionKey]*sessionState
	expiry   []sessionExpiry
	latestUs int64
	// csv is set for CSV input, where every value is text.
	csv bool
}

// newLogReader fills in the log options' defaults and returns a reader for
// one source, with the Stats its rows are counted in.
func newLogReader(opts Options, csv bool) (*logReader, Stats, error) {
	lo := opts.Log
	if err := lo.defaults(); err != nil {
		return nil, Stats{}, err
	}
	lr := &logReader{opts: opts, lo: lo, sessions: map[sessionKey]*sessionState{}, csv: csv}
	st := Stats{BlockSize: lo.BlockSize, PrefixSalted: true, Tokenizer: lo.Tokenizer.Name(), Salt: lo.Salt}
	return lr, st, nil
}

func readOpenAILog(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	lr, st, err := newLogReader(opts, false)
	if err != nil {
		return Stats{}, err
	}
	err = prepareLines(ctx, br, lr, func(l logLine) error {
		var req trace.Request
		err := l.err
		if err == nil {
			req, err = lr.finish(l.p)
		}
		return lr.settle(&st, sink, l.lineNo, req, err)
	})
	return st, err
}

// settle writes a converted row to the sink, or rejects its line when the
// row is bad (a rowError, or a line too long to read); any other error
// stops the read.
func (lr *logReader) settle(st *Stats, sink Sink, line int64, req trace.Request, err error) error {
	var re *rowError
	switch {
	case err == nil:
		return st.accept(sink, lr.opts.Name, line, req)
	case errors.As(err, &re):
		return st.reject(sink, lr.opts.Name, line, re.Error())
	case errors.Is(err, errLineTooLong):
		return st.reject(sink, lr.opts.Name, line, err.Error())
	}
	return fmt.Errorf("%s line %d: %w", lr.opts.Name, line, err)
}

// prepareLine decodes a JSON line and prepares it (safe to run in parallel).
func (lr *logReader) prepareLine(line []byte, lineNo int64) (prepared, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var rec map[string]any
	if err := dec.Decode(&rec); err != nil {
		return prepared{}, bad("", "malformed JSON: %s", jsonReason(err))
	}
	return lr.prepare(rec, lineNo)
}

// convertRecord turns one decoded record into a request, or a rowError.
func (lr *logReader) convertRecord(rec map[string]any, lineNo int64) (trace.Request, error) {
	p, err := lr.prepare(rec, lineNo)
	if err != nil {
		return trace.Request{}, err
	}
	return lr.finish(p)
}

// prepared is a record converted as far as it can be without knowing the
// rows before it: everything but the order check and session linking.
// prepare is safe for concurrent use; finish is not and runs in order.
type prepared struct {
	req   trace.Request
	endUs int64
	// logged: a session id the log named; else, for chat requests, the
	// keyed hashes of the message prefixes (prefix[k] covers messages[:k])
	// and of the conversation with its logged reply.
	logged    bool
	prefix    []sessionKey
	withReply *sessionKey
}

// finish checks the row's order and links its session, in input order.
func (lr *logReader) finish(p prepared) (trace.Request, error) {
	req := p.req
	if req.TS < lr.latestUs-lr.lo.MaxDisorder.Microseconds() {
		return req, bad("ts", "%s earlier than a row before it (more than the disorder allowed)", time.Duration(lr.latestUs-req.TS)*time.Microsecond)
	}
	lr.latestUs = max(lr.latestUs, req.TS)
	switch {
	case p.logged:
		lr.linkLogged(&req, p.endUs)
	case len(p.prefix) > 1:
		lr.linkByPrefix(&req, p.prefix, p.withReply, p.endUs)
	}
	return req, nil
}

// prepare turns one decoded record (a JSON object, or a CSV row as column
// → text) into a prepared row, or a rowError.
func (lr *logReader) prepare(rec map[string]any, lineNo int64) (prepared, error) {
	m := lr.lo.Mapping
	get := func(f string) (any, bool) {
		v, ok := m.lookup(rec, f)
		if s, isStr := v.(string); ok && isStr && s == "" && lr.csv {
			return nil, false // an empty CSV cell is an absent value
		}
		return v, ok
	}
	var req trace.Request
	tsV, ok := get("ts")
	if !ok {
		return prepared{}, bad("ts", "missing (the arrival time)")
	}
	ts, err := parseLogTime(tsV)
	if err != nil {
		return prepared{}, bad("ts", "%v", err)
	}
	req.TS = ts

	// Identity, keyed.
	salt := lr.lo.Salt
	rawID := fmt.Sprintf("%s:%d", lr.opts.Name, lineNo)
	if v, ok := get("request_id"); ok {
		rawID = fmt.Sprint(v)
	}
	req.RequestID = salt.ID("request", rawID)
	tenant := ""
	if v, ok := get("tenant"); ok {
		tenant = fmt.Sprint(v)
	} else if v, ok := get("user"); ok {
		tenant = fmt.Sprint(v)
	}
	if tenant != "" {
		req.Tenant = salt.HMAC("tenant", tenant)
	}
	if v, ok := get("model"); ok {
		req.Model = fmt.Sprint(v)
	} else {
		req.Model = lr.opts.Model
	}
	if v, ok := get("adapter"); ok {
		req.Adapter = fmt.Sprint(v)
	}
	if lr.lo.HashNames {
		if req.Model != "" {
			req.Model = "model-" + salt.HMAC("model", req.Model)[:12]
		}
		if req.Adapter != "" {
			req.Adapter = "adapter-" + salt.HMAC("adapter", req.Adapter)[:12]
		}
	}

	// Shape: the prompt is tokenized (never kept) for counts and blocks.
	req.API, req.Stream, req.N = trace.APICompletions, false, 1
	var tokens []int
	var msgs []message
	if v, ok := get("messages"); ok {
		req.API = trace.APIChat
		msgs, err = parseMessages(v)
		if err != nil {
			return prepared{}, err
		}
		for _, msg := range msgs {
			tokens = append(tokens, lr.lo.Tokenizer.Encode(msg.render())...)
			if msg.image {
				req.Features = appendFeature(req.Features, "image")
			}
		}
	} else if v, ok := get("prompt"); ok {
		text, err := promptText(v)
		if err != nil {
			return prepared{}, err
		}
		tokens = lr.lo.Tokenizer.Encode(text)
	}
	if n, ok, err := count(get, "prompt_tokens"); err != nil {
		return prepared{}, err
	} else if ok {
		req.InputTokens = n
	} else if tokens != nil {
		req.InputTokens = int64(len(tokens))
	} else {
		return prepared{}, bad("prompt_tokens", "missing, and no messages or prompt to count")
	}
	if len(tokens) > 0 {
		req.PrefixBlocks = salt.PrefixBlocks(tokens, lr.lo.BlockSize)
		if int64(len(req.PrefixBlocks)) != (req.InputTokens+int64(lr.lo.BlockSize)-1)/int64(lr.lo.BlockSize) {
			// usage and our tokenizer disagree on the length: keep the
			// blocks consistent with input_tokens (DESIGN: ceil(input/B)).
			req.PrefixBlocks = resizeBlocks(req.PrefixBlocks, req.InputTokens, lr.lo.BlockSize, salt, rawID)
		}
	}
	if n, ok, err := count(get, "completion_tokens"); err != nil {
		return prepared{}, err
	} else if ok {
		req.OutputTokens = n
	} else if v, ok := get("response_text"); ok {
		req.OutputTokens = int64(lr.lo.Tokenizer.Count(fmt.Sprint(v)))
	}
	if n, ok, err := count(get, "max_tokens"); err != nil {
		return prepared{}, err
	} else if ok {
		req.MaxTokens = n
	} else {
		req.MaxTokens = req.OutputTokens
	}
	if v, ok := get("stream"); ok {
		b, err := parseBool(v)
		if err != nil {
			return prepared{}, bad("stream", "%v", err)
		}
		req.Stream = b
	} else {
		req.Stream = lr.opts.Stream
	}
	if v, ok := get("n"); ok {
		n, err := parseInt(v)
		if err != nil || n < 1 {
			return prepared{}, bad("n", "not a positive whole number")
		}
		req.N = int32(n)
	}
	for _, f := range []struct {
		field string
		dst   **float64
	}{{"temperature", &req.Temperature}, {"top_p", &req.TopP}} {
		if v, ok := get(f.field); ok {
			x, err := parseFloat(v)
			if err != nil || x < 0 {
				return prepared{}, bad(f.field, "not a non-negative number")
			}
			*f.dst = &x
		}
	}
	if v, ok := get("response_format"); ok {
		switch fmt.Sprint(v) {
		case "json_schema":
			req.Features = appendFeature(req.Features, "json_schema")
		case "json_object":
			req.Features = appendFeature(req.Features, "json")
		}
	}
	if v, ok := get("tools"); ok {
		if a, isArr := v.([]any); !isArr || len(a) > 0 {
			req.Features = appendFeature(req.Features, "tools")
		}
	}
	if v, ok := get("logprobs"); ok {
		if b, err := parseBool(v); err == nil && b {
			req.Features = appendFeature(req.Features, "logprobs")
		}
	}
	if n, ok, err := count(get, "reasoning_tokens"); err != nil {
		return prepared{}, err
	} else if ok && n > 0 {
		req.Features = appendFeature(req.Features, "reasoning")
	}
	if n, ok, err := count(get, "cached_tokens"); err != nil {
		return prepared{}, err
	} else if ok {
		req.CachedTokens = &n
	}

	slices.Sort(req.Features) // one order, whatever the log's key order

	// Outcome and timing as logged.
	if v, ok := get("status"); ok {
		code, err := parseStatus(v, get)
		if err != nil {
			return prepared{}, bad("status", "%v", err)
		}
		req.Status = &code
	}
	if v, ok := get("finish_reason"); ok {
		s := fmt.Sprint(v)
		req.FinishReason = &s
	}
	var endUs, firstUs int64 = -1, -1
	if v, ok := get("end_ts"); ok {
		if endUs, err = parseLogTime(v); err != nil {
			return prepared{}, bad("end_ts", "%v", err)
		}
		if endUs < ts {
			return prepared{}, bad("end_ts", "before ts")
		}
		req.E2EMs = new(float64(endUs-ts) / 1000)
	}
	if v, ok := get("first_token_ts"); ok {
		if firstUs, err = parseLogTime(v); err != nil {
			return prepared{}, bad("first_token_ts", "%v", err)
		}
		if firstUs >= ts {
			req.TTFTMs = new(float64(firstUs-ts) / 1000)
		}
	}
	for _, f := range []struct {
		field string
		dst   **float64
	}{{"ttft_ms", &req.TTFTMs}, {"e2e_ms", &req.E2EMs}} {
		if v, ok := get(f.field); ok {
			x, err := parseFloat(v)
			if err != nil || x < 0 {
				return prepared{}, bad(f.field, "not a non-negative number of milliseconds")
			}
			*f.dst = &x
		}
	}
	if endUs < 0 && req.E2EMs != nil {
		endUs = ts + int64(*req.E2EMs*1000)
	}
	// A client disconnect: status 499, a cancelled flag, or no finish
	// reason on a response that ended. It replays as a cancel after the
	// same time.
	cancelled := req.Status != nil && *req.Status == 499
	if v, ok := get("cancelled"); ok {
		if b, err := parseBool(v); err == nil && b {
			cancelled = true
		}
	} else if req.Stream && req.E2EMs != nil && (req.Status == nil || *req.Status/100 == 2) && m.present(rec, "finish_reason") && req.FinishReason == nil {
		// The log has a place for the finish reason and it is null: the
		// stream ended before the response finished.
		cancelled = true
	}
	if cancelled {
		req.Cancelled = new(true)
		if req.E2EMs != nil {
			req.CancelAfterMs = new(*req.E2EMs)
		}
	}

	// Session: a logged conversation id, else inferred from the messages.
	p := prepared{endUs: endUs}
	if v, ok := get("session_id"); ok {
		req.SessionID = salt.ID("session", fmt.Sprint(v))
		p.logged = true
	} else if len(msgs) > 0 {
		p.prefix = make([]sessionKey, len(msgs)+1)
		copy(p.prefix[0][:], salt.HMAC("session-prefix", tenant))
		for k, msg := range msgs {
			p.prefix[k+1] = lr.chain(p.prefix[k], msg.render())
		}
		if v, ok := m.lookup(rec, "response_text"); ok {
			k := lr.chain(p.prefix[len(msgs)], message{role: "assistant", text: fmt.Sprint(v)}.render())
			p.withReply = &k
		}
	}
	p.req = req
	return p, nil
}

// resizeBlocks fits block ids to ceil(input/B) when the logged token count
// and our tokenizer disagree: extra ids are dropped, missing ones are
// derived from the request (unique to it, so they never fake sharing).
func resizeBlocks(blocks []int64, input int64, b int, salt anon.Salt, rawID string) []int64 {
	want := int((input + int64(b) - 1) / int64(b))
	if len(blocks) >= want {
		return blocks[:want]
	}
	for i := len(blocks); i < want; i++ {
		blocks = append(blocks, salt.ID64("pad-block", rawID+":"+strconv.Itoa(i)))
	}
	return blocks
}

func appendFeature(fs []string, f string) []string {
	for _, x := range fs {
		if x == f {
			return fs
		}
	}
	return append(fs, f)
}
