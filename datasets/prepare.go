package datasets

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// prepared is a record converted as far as it can be without knowing the
// rows before it: everything but the order check and session linking.
// prepare is safe for concurrent use; finish is not and runs in order.
type prepared struct {
	req   trace.Request
	endUs int64
	// logged: a session id the log named; else, for chat requests, the
	// keyed hashes of the message prefixes (prefix[k] covers messages[:k])
	// and of the conversation with its logged reply.
	logged bool
	prefix []sessionKey
	roles  []string // each message's role, beside prefix
	// texts are keyed hashes of each message's text alone (zero for one
	// shorter than minQuotedAnswer, which no answer key matches), and answer
	// of the logged reply's: a message that quotes an earlier answer
	// names a parent (a join), whatever its role.
	texts     []sessionKey
	answer    *sessionKey
	withReply *sessionKey
	// media counts what could not be measured of the record's media.
	media mediaStats
	// held: a row written late, after later rows (an OTLP trace's model
	// calls, held for its agent graph), not judged by the order check.
	held bool
}

// logRecord is one decoded record (a JSON object, or a CSV row as column
// → text) read through the mapping.
type logRecord struct {
	fields map[string]any
	m      *Mapping
}

// get returns a field's first present value (Mapping.lookup: a null or
// an empty string is absent).
func (r logRecord) get(field string) (any, bool) {
	return r.m.lookup(r.fields, field)
}

// flag reads an optional boolean field: on is true only for a readable
// true value; present says the field was there at all.
func (r logRecord) flag(field string) (on, present bool) {
	v, ok := r.get(field)
	if !ok {
		return false, false
	}
	b, err := parseBool(v)
	return err == nil && b, true
}

// nonNegative reads an optional non-negative number into *dst, leaving it
// as it was when the field is absent; reason is the rejection otherwise.
func (r logRecord) nonNegative(field string, dst **float64, reason string) error {
	v, ok := r.get(field)
	if !ok {
		return nil
	}
	x, err := parseFloat(v)
	if err != nil || x < 0 {
		return bad(field, "%s", reason)
	}
	*dst = &x
	return nil
}

// prepare turns one decoded record (a JSON object, or a CSV row as column
// → text) into a prepared row, or a rowError. The sections run in a fixed
// order, so a record with several bad fields is always rejected for the
// same one.
func (lr *logReader) prepare(rec map[string]any, lineNo int64) (prepared, error) {
	r := logRecord{fields: rec, m: lr.lo.Mapping}
	if err := r.m.expandJSONStrings(rec); err != nil {
		return prepared{}, err
	}
	var req trace.Request
	ts, err := arrivalTime(r)
	if err != nil {
		return prepared{}, err
	}
	req.TS = ts
	rawID, tenant := lr.prepareIdentity(&req, r, lineNo)
	var st mediaStats
	msgs, err := lr.prepareShape(&req, r, rawID, &st)
	if err != nil {
		return prepared{}, err
	}
	endUs, err := prepareOutcome(&req, r)
	if err != nil {
		return prepared{}, err
	}
	p := lr.prepareSession(&req, r, msgs, tenant)
	p.req, p.endUs, p.media = req, endUs, st
	return p, nil
}

// prepareIdentity sets the request's keyed ids and its model and adapter
// names (hashed too with HashNames). It returns the raw request id, which
// seeds padding blocks, and the raw tenant, which keys inferred sessions.
func (lr *logReader) prepareIdentity(req *trace.Request, r logRecord, lineNo int64) (rawID, tenant string) {
	salt := lr.lo.Salt
	rawID = fmt.Sprintf("%s:%d", lr.opts.Name, lineNo)
	if v, ok := r.get("request_id"); ok {
		rawID = fmt.Sprint(v)
	}
	req.RequestID = salt.ID("request", rawID)
	if v, ok := r.get("tenant"); ok {
		tenant = fmt.Sprint(v)
	} else if v, ok := r.get("user"); ok {
		tenant = fmt.Sprint(v)
	}
	if tenant != "" {
		req.Tenant = salt.HMAC("tenant", tenant)
	}
	if v, ok := r.get("model"); ok {
		req.Model = fmt.Sprint(v)
	} else {
		req.Model = lr.opts.Model
	}
	if v, ok := r.get("adapter"); ok {
		req.Adapter = fmt.Sprint(v)
	} else if base, ok := r.m.AdapterOf[req.Model]; ok {
		// vLLM's and SGLang's convention: an adapter is served, and
		// logged, under a model name of its own.
		req.Model, req.Adapter = base, req.Model
	}
	if lr.lo.HashNames {
		if req.Model != "" {
			req.Model = "model-" + salt.HMAC("model", req.Model)[:12]
		}
		if req.Adapter != "" {
			req.Adapter = "adapter-" + salt.HMAC("adapter", req.Adapter)[:12]
		}
	}
	return rawID, tenant
}

// prepareShape sets what the request asks of the server: API, lengths,
// prefix blocks, sampling parameters and features. The prompt is tokenized
// for counts and blocks, never kept; the chat messages are returned for
// session inference.
func (lr *logReader) prepareShape(req *trace.Request, r logRecord, rawID string, st *mediaStats) ([]message, error) {
	req.API, req.Stream, req.N = trace.APICompletions, false, 1
	tokens, msgs, mediaTokens, err := lr.promptTokens(req, r, st)
	if err != nil {
		return nil, err
	}
	toolTokens, err := lr.prepareCalls(req, r)
	if err != nil {
		return nil, err
	}
	if err := lr.prepareLengths(req, r, tokens, mediaTokens+toolTokens, rawID); err != nil {
		return nil, err
	}
	if err := lr.prepareSampling(req, r); err != nil {
		return nil, err
	}
	if err := prepareSamplingExtras(req, r); err != nil {
		return nil, err
	}
	if err := prepareFeatures(req, r); err != nil {
		return nil, err
	}
	slices.Sort(req.Features) // one order, whatever the log's key order
	return msgs, nil
}

// promptTokens tokenizes the chat messages (marking the request chat, and
// recording their images and audio, whose tokens by media's rules it
// returns) or else the completions prompt; tokens is nil when the record
// has neither.
func (lr *logReader) promptTokens(req *trace.Request, r logRecord, st *mediaStats) (tokens []int, msgs []message, mediaTokens int64, err error) {
	v, ok := r.get("messages")
	if ok {
		if v, ok, err = storedMessages(v); err != nil {
			return nil, nil, 0, err
		}
	}
	if ok {
		req.API = trace.APIChat
		msgs, err = parseMessages(v)
		if err != nil {
			return nil, nil, 0, err
		}
		if v, ok := r.get("instructions"); ok {
			// A system prompt logged apart from the messages (the
			// Responses API's instructions) is sent before them.
			msgs = append([]message{{role: "system", text: fmt.Sprint(v)}}, msgs...)
		}
		var refs []mediaRef
		for _, msg := range msgs {
			tokens = append(tokens, lr.lo.Tokenizer.Encode(msg.render())...)
			refs = append(refs, msg.media...)
		}
		if len(refs) > trace.MaxMediaParts {
			return nil, nil, 0, bad("messages", "%d images and audio clips, more than %d", len(refs), trace.MaxMediaParts)
		}
		mediaTokens = addMedia(req, refs, lr.lo.Salt, st)
	} else if v, ok := r.get("prompt"); ok {
		text, err := promptText(v)
		if err != nil {
			return nil, nil, 0, err
		}
		tokens = lr.lo.Tokenizer.Encode(text)
	}
	return tokens, msgs, mediaTokens, nil
}

// prepareLengths sets the input length (logged usage first, else our
// count of the text plus extra: the tokens of images, audio and tool
// definitions, which a server counts into the prompt), the prefix blocks,
// the output length (usage, else the logged reply's count) and max_tokens
// (default: the output length).
func (lr *logReader) prepareLengths(req *trace.Request, r logRecord, tokens []int, extra int64, rawID string) error {
	salt, bs := lr.lo.Salt, lr.lo.BlockSize
	if n, ok, err := count(r.get, "prompt_tokens"); err != nil {
		return err
	} else if ok {
		req.InputTokens = n
	} else if tokens != nil {
		req.InputTokens = int64(len(tokens)) + extra
	} else {
		return bad("prompt_tokens", "no token count at %s, and no messages or prompt to count", r.m.pathsText("prompt_tokens"))
	}
	if len(tokens) > 0 {
		req.PrefixBlocks = salt.PrefixBlocks(tokens, bs)
		if int64(len(req.PrefixBlocks)) != ceilDiv(req.InputTokens, int64(bs)) {
			// usage and our tokenizer disagree on the length: keep the
			// blocks consistent with input_tokens (DESIGN: ceil(input/B)).
			req.PrefixBlocks = resizeBlocks(req.PrefixBlocks, req.InputTokens, bs, salt, rawID)
		}
	}
	if n, ok, err := count(r.get, "completion_tokens"); err != nil {
		return err
	} else if ok {
		req.OutputTokens = n
	} else if v, ok := r.get("response_text"); ok {
		req.OutputTokens = int64(lr.lo.Tokenizer.Count(fmt.Sprint(v)))
	}
	if n, ok, err := count(r.get, "max_tokens"); err != nil {
		return err
	} else if ok {
		req.MaxTokens = n
	} else {
		req.MaxTokens = req.OutputTokens
	}
	return nil
}

// resizeBlocks fits block ids to ceil(input/B) when the logged token count
// and our tokenizer disagree: extra ids are dropped, missing ones are
// derived from the request (unique to it, so they never fake sharing).
func resizeBlocks(blocks []int64, input int64, b int, salt anon.Salt, rawID string) []int64 {
	want := int(ceilDiv(input, int64(b)))
	if len(blocks) >= want {
		return blocks[:want]
	}
	for i := len(blocks); i < want; i++ {
		blocks = append(blocks, salt.ID64("pad-block", rawID+":"+strconv.Itoa(i)))
	}
	return blocks
}

// prepareSampling sets stream (default: the source's), n, temperature and
// top_p.
func (lr *logReader) prepareSampling(req *trace.Request, r logRecord) error {
	if v, ok := r.get("stream"); ok {
		b, err := parseBool(v)
		if err != nil {
			return bad("stream", "%v", err)
		}
		req.Stream = b
	} else {
		req.Stream = lr.opts.Stream
	}
	if v, ok := r.get("n"); ok {
		n, err := parseInt(v)
		if err != nil || n < 1 {
			return bad("n", "not a positive whole number")
		}
		req.N = int32(n)
	}
	if err := r.nonNegative("temperature", &req.Temperature, "not a non-negative number"); err != nil {
		return err
	}
	return r.nonNegative("top_p", &req.TopP, "not a non-negative number")
}

// prepareFeatures adds the logprobs and reasoning features (prepareCalls
// adds tools and structured output) and the cached prompt tokens.
func prepareFeatures(req *trace.Request, r logRecord) error {
	if on, _ := r.flag("logprobs"); on {
		req.Logprobs = true
		req.Features = appendFeature(req.Features, "logprobs")
	}
	if n, ok, err := count(r.get, "reasoning_tokens"); err != nil {
		return err
	} else if ok && n > 0 {
		req.Features = appendFeature(req.Features, "reasoning")
	}
	if n, ok, err := count(r.get, "cached_tokens"); err != nil {
		return err
	} else if ok {
		req.CachedTokens = &n
	}
	return nil
}

func appendFeature(fs []string, f string) []string {
	if slices.Contains(fs, f) {
		return fs
	}
	return append(fs, f)
}

// prepareOutcome sets the outcome and timing as logged: status, finish
// reason, TTFT, end-to-end time and a client cancel. It returns the
// response's end in µs, or -1 when the log does not tell it.
func prepareOutcome(req *trace.Request, r logRecord) (endUs int64, err error) {
	if v, ok := r.get("status"); ok {
		code, err := parseStatus(v, r.get)
		if err != nil {
			return -1, bad("status", "%v", err)
		}
		req.Status = &code
	}
	if v, ok := r.get("finish_reason"); ok {
		s := fmt.Sprint(v)
		req.FinishReason = &s
	}
	if endUs, err = prepareTiming(req, r); err != nil {
		return -1, err
	}
	markCancelled(req, r)
	return endUs, nil
}

// arrivalTime is the request's arrival: its ts, or, where the log times a
// request by its end (an access log's time, written as the response
// ends: nginx's $time_local) and keeps its duration, the end less the
// duration.
func arrivalTime(r logRecord) (int64, error) {
	if v, ok := r.get("ts"); ok {
		ts, err := parseLogTime(v)
		if err != nil {
			return 0, bad("ts", "%v", err)
		}
		return ts, nil
	}
	end, hasEnd := r.get("end_ts")
	dur, unit, hasDur := r.duration()
	if !hasEnd || !hasDur {
		return 0, bad("ts", "no timestamp at %s (the arrival time), nor an end time and a duration to take it from", r.m.pathsText("ts"))
	}
	endUs, err := parseLogTime(end)
	if err != nil {
		return 0, bad("end_ts", "%v", err)
	}
	x, err := parseFloat(dur)
	if err != nil || !(x >= 0 && x*unit <= trace.MaxClientMs*1e3) {
		return 0, bad("ts", "no timestamp, and the duration to take it from the end time is not a non-negative time")
	}
	return endUs - int64(math.Round(x*unit)), nil
}

// duration is the logged end-to-end duration and its unit in µs: e2e_ms,
// else e2e_s (nginx's $request_time).
func (r logRecord) duration() (v any, unitUs float64, ok bool) {
	if v, ok := r.get("e2e_ms"); ok {
		return v, 1e3, true
	}
	if v, ok := r.get("e2e_s"); ok {
		return v, 1e6, true
	}
	return nil, 0, false
}

// prepareTiming sets TTFT and end-to-end time from logged instants, then
// from logged durations, which win where both are present.
func prepareTiming(req *trace.Request, r logRecord) (endUs int64, err error) {
	ts := req.TS
	var firstUs int64
	endUs = -1
	if v, ok := r.get("end_ts"); ok {
		if endUs, err = parseLogTime(v); err != nil {
			return -1, bad("end_ts", "%v", err)
		}
		if endUs < ts {
			return -1, bad("end_ts", "before ts")
		}
		req.E2EMs = new(float64(endUs-ts) / 1000)
	}
	if _, ok := r.get("ts"); !ok && endUs >= 0 {
		req.E2EMs = nil // the arrival was the end less the logged duration, which stands
	}
	if v, ok := r.get("first_token_ts"); ok {
		if firstUs, err = parseLogTime(v); err != nil {
			return -1, bad("first_token_ts", "%v", err)
		}
		if firstUs >= ts {
			req.TTFTMs = new(float64(firstUs-ts) / 1000)
		}
	}
	const ms = "not a non-negative number of milliseconds"
	if err := r.nonNegative("ttft_ms", &req.TTFTMs, ms); err != nil {
		return -1, err
	}
	if err := r.nonNegative("e2e_ms", &req.E2EMs, ms); err != nil {
		return -1, err
	}
	if req.E2EMs == nil {
		var s *float64
		if err := r.nonNegative("e2e_s", &s, "not a non-negative number of seconds"); err != nil {
			return -1, err
		}
		if s != nil {
			req.E2EMs = new(*s * 1000)
		}
	}
	if endUs < 0 && req.E2EMs != nil {
		endUs = ts + int64(*req.E2EMs*1000)
	}
	return endUs, nil
}

// markCancelled marks a client disconnect: status 499, a cancelled flag, or
// a stream that ended where the log has a place for the finish reason and
// it is null (the stream ended before the response finished). It replays
// as a cancel after the same time.
func markCancelled(req *trace.Request, r logRecord) {
	cancelled := req.Status != nil && *req.Status == 499
	if on, present := r.flag("cancelled"); present {
		cancelled = cancelled || on
	} else if req.Stream && req.E2EMs != nil && (req.Status == nil || *req.Status/100 == 2) && r.m.present(r.fields, "finish_reason") && req.FinishReason == nil {
		cancelled = true
	}
	if cancelled {
		req.Cancelled = new(true)
		if req.E2EMs != nil {
			req.CancelAfterMs = new(*req.E2EMs)
		}
	}
}

// minQuotedAnswer is the shortest answer taken as quoted when a later
// message holds its text: a short one ("Yes.") recurs by chance.
const minQuotedAnswer = 32

// prepareSession takes a logged conversation id, or else, for chat
// requests, the keyed hashes finish links sessions by: one per message
// prefix, keyed by the tenant, and one for the conversation with its
// logged reply.
func (lr *logReader) prepareSession(req *trace.Request, r logRecord, msgs []message, tenant string) prepared {
	var p prepared
	salt := lr.lo.Salt
	if v, ok := r.get("session_id"); ok {
		req.SessionID = salt.ID("session", fmt.Sprint(v))
		p.logged = true
	} else if len(msgs) > 0 {
		p.prefix = make([]sessionKey, len(msgs)+1)
		p.roles = make([]string, len(msgs))
		copy(p.prefix[0][:], salt.HMAC("session-prefix", tenant))
		p.texts = make([]sessionKey, len(msgs))
		for k, msg := range msgs {
			p.prefix[k+1] = lr.chain(p.prefix[k], msg.render())
			p.roles[k] = msg.role
			if len(msg.text) >= minQuotedAnswer { // a shorter one is never registered: left zero
				p.texts[k] = lr.answerKey(tenant, msg.text)
			}
		}
		if v, ok := r.get("response_text"); ok {
			text := fmt.Sprint(v)
			k := lr.chain(p.prefix[len(msgs)], message{role: "assistant", text: text}.render())
			p.withReply = &k
			if len(text) >= minQuotedAnswer {
				a := lr.answerKey(tenant, text)
				p.answer = &a
			}
		}
	}
	return p
}
