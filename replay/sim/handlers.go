package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// genRequest is the part of a completions or chat request the simulator reads.
type genRequest struct {
	Model               string      `json:"model"`
	Prompt              promptField `json:"prompt"`
	Messages            []message   `json:"messages"`
	MaxTokens           *int        `json:"max_tokens"`
	MaxCompletionTokens *int        `json:"max_completion_tokens"`
	Stream              bool        `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N         *int `json:"n"`
	IgnoreEOS bool `json:"ignore_eos"`
	MinTokens *int `json:"min_tokens"`

	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	GuidedJSON        json.RawMessage `json:"guided_json"`
	GuidedRegex       json.RawMessage `json:"guided_regex"`
	GuidedGrammar     json.RawMessage `json:"guided_grammar"`
	GuidedChoice      json.RawMessage `json:"guided_choice"`
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
	Logprobs          json.RawMessage `json:"logprobs"` // chat: a bool; completions: an integer
	TopLogprobs       *int            `json:"top_logprobs"`
	Seed              *int64          `json:"seed"`
	Temperature       *float64        `json:"temperature"`
	Stop              json.RawMessage `json:"stop"`
	ReasoningEffort   string          `json:"reasoning_effort"`
	// Read for the llm_request span only, and never refused (see
	// samplingParam).
	TopP json.RawMessage `json:"top_p"`
}

type message struct {
	Role    string       `json:"role"`
	Content contentField `json:"content"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
	w.Write(b)
}

// badRequest answers 400 in vLLM's current error shape.
func badRequest(w http.ResponseWriter, msg string) {
	writeError(w, http.StatusBadRequest, "BadRequestError", msg)
}

// serveModels lists the served models and, as vLLM does, each LoRA adapter
// with its base model as "parent".
func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	data := make([]map[string]any, 0, len(s.opts.Models)+len(s.adapters))
	for _, m := range s.opts.Models {
		data = append(data, map[string]any{"id": m, "object": "model", "created": s.created, "owned_by": "servetrace", "root": m, "parent": nil,
			"max_model_len": s.opts.MaxModelLen})
	}
	for _, a := range s.opts.LoRAModules {
		if s.adapters[a] {
			data = append(data, map[string]any{"id": a, "object": "model", "created": s.created, "owned_by": "servetrace", "root": a, "parent": s.opts.Models[0]})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// resolveModel returns the LoRA adapter a request's model names ("" for a
// served model), or false for a name not served.
func (s *Server) resolveModel(name string) (string, bool) {
	if s.models[name] {
		return "", true
	}
	if s.adapters[name] {
		return name, true
	}
	return "", false
}

// serveVersion answers GET /version as vLLM does ({"version"}), with the
// engine and preset beside it, so a replay's fingerprint tells the
// simulator from a real server.
func (s *Server) serveVersion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"version": trace.ToolVersion, "engine": "servetrace-sim", "preset": s.opts.Preset})
}

// serveTokenize answers vLLM's /tokenize: {"model", "prompt"} or
// {"model", "messages"[, "tools"]} in, {"count", "max_model_len", "tokens"}
// out, counting media and tools as a generation request's usage does.
func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	select {
	case s.tokenizeRequests <- struct{}{}:
		defer func() { <-s.tokenizeRequests }()
	default:
		busy(w, fmt.Sprintf("the server is serving %d /tokenize requests, as many as it takes at once; retry later", cap(s.tokenizeRequests)))
		return
	}
	h := s.bodies.hold()
	defer h.release()
	body, err := readBody(r, h)
	if err != nil {
		answerBodyError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // until the answer, after a wait for a tokenizer
	var req genRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON: "+err.Error())
		return
	}
	if _, ok := s.resolveModel(req.Model); req.Model != "" && !ok {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	p, err := req.parsePrompt(len(req.Messages) > 0)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if err := s.resolveMedia(r.Context(), p, h); err != nil {
		answerBusyOrBad(w, err)
		return
	}
	select {
	case s.tokenizing <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	c, err := s.countPrompt(p, tokenize.MaxPromptTokens, h)
	<-s.tokenizing
	if err != nil {
		answerBusyOrBad(w, err)
		return
	}
	if n := c.total(); n > tokenize.MaxPromptTokens {
		badRequest(w, fmt.Sprintf("the prompt is %d tokens, more than %d", n, tokenize.MaxPromptTokens))
		return
	}
	rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	w.Header().Set("Content-Type", "application/json")
	writeTokens(w, c, s.opts.MaxModelLen)
}

// writeTokens writes /tokenize's answer, {"count", "max_model_len",
// "tokens"}, a piece at a time: up to MaxPromptTokens ids are never laid
// out, nor their JSON, whole in memory.
func writeTokens(w io.Writer, c *promptCount, maxModelLen int) {
	buf := make([]byte, 0, 64<<10)
	buf = fmt.Appendf(buf, `{"count":%d,"max_model_len":%d,"tokens":[`, c.total(), maxModelLen)
	first := true
	for id := range c.all(false) {
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = strconv.AppendInt(buf, int64(id), 10)
		if len(buf) > cap(buf)-32 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
	}
	buf = append(buf, "]}\n"...)
	w.Write(buf)
}

// serveGenerate serves a completions or chat request: prepared (read,
// decoded, tokenized) within the body budget, which it then gives back,
// submitted to the engine, and relayed.
func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	h := s.bodies.hold()
	g, fault, ok := s.prepare(w, r, chat, h)
	h.release()
	if !ok || s.injectFault(w, g, fault) {
		return
	}
	switch err := s.engine.submit(g.seq); {
	case errors.Is(err, errQueueFull):
		s.metrics.rejected()
		writeError(w, http.StatusTooManyRequests, "RateLimitError", fmt.Sprintf("the server is overloaded: %d requests are waiting, as many as its queue holds; retry later", s.opts.Engine.MaxWaiting))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	g.run(r.Context(), w)
}

// prepare reads and checks a request, holding its body's bytes (and its
// fetched images') in h, and returns its generation, with the sequence to
// submit, and its fault draw; it answers a request it refuses and reports
// false. What the request was read into, its body, messages and prompt
// text, stays here: a request in the engine holds its token counts and
// block hashes, not its text.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, chat bool, h *hold) (*generation, float64, bool) {
	arrived := s.engine.clock.now() // the request's phases are read from the engine's clock
	body, err := readBody(r, h)
	if err != nil {
		answerBodyError(w, err)
		return nil, 0, false
	}
	// No write deadline until the first write (generation.run): HTTP/2
	// enforces one as a timer on the stream, and the request may wait long
	// for a tokenizer, and then for the engine.
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{})
	var req genRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON for this endpoint: "+err.Error())
		return nil, 0, false
	}
	adapter, ok := s.resolveModel(req.Model)
	if !ok {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return nil, 0, false
	}
	feat, err := s.parseFeatures(&req)
	if err != nil {
		badRequest(w, err.Error())
		return nil, 0, false
	}
	p, err := req.parsePrompt(chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return nil, 0, false
	}
	if msg := s.refusal(req.Model, p, feat); msg != "" {
		badRequest(w, msg)
		return nil, 0, false
	}
	maxTokens := s.opts.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	}
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("max_tokens must be at least 1, got %d", maxTokens))
		return nil, 0, false
	}
	if err := s.resolveMedia(r.Context(), p, h); err != nil {
		answerBusyOrBad(w, err)
		return nil, 0, false
	}
	select {
	case s.tokenizing <- struct{}{}:
	case <-r.Context().Done():
		return nil, 0, false
	}
	pc, err := s.countPrompt(p, int64(s.opts.MaxModelLen), h)
	<-s.tokenizing
	if err != nil {
		answerBusyOrBad(w, err)
		return nil, 0, false
	}
	total := pc.total()
	if int64(maxTokens) > int64(s.opts.MaxModelLen)-total { // not a sum: a max_tokens near MaxInt would overflow it
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion).",
				s.opts.MaxModelLen, total+int64(maxTokens), total, maxTokens))
		return nil, 0, false
	}
	promptTokens := int(total)
	// A seed, or greedy decoding, fixes the answer: greedy by the prompt.
	seed := feat.seed
	if seed == nil && req.Temperature != nil && *req.Temperature < greedyBelow {
		seed = new(s.promptSeed(req.Model, pc))
	}
	fault, stops, n := s.draws(feat.n, seed)
	minTokens := 0
	if req.MinTokens != nil {
		minTokens = *req.MinTokens
	}
	stopAts := make([]int, feat.n)
	for i, u := range stops {
		stopAts[i] = maxTokens
		if !req.IgnoreEOS && minTokens < maxTokens && u < s.opts.StopRate {
			// u/StopRate is uniform on [0, 1) given that it stops: the
			// length is uniform on [max(min_tokens, 1), max_tokens].
			lo := max(minTokens, 1)
			stopAts[i] = lo + min(int(u/s.opts.StopRate*float64(maxTokens-lo+1)), maxTokens-lo)
		}
	}
	wordSeed := n
	if seed != nil {
		wordSeed = uint64(*seed)
	}
	var answer []string
	if corrupt := s.corrupts(); corrupt {
		wordSeed ^= corruptedWords
	} else if answer = probeAnswer(p); answer != nil {
		stopAtAnswer(answer, maxTokens, stopAts, req.IgnoreEOS, minTokens)
	}
	g := &generation{s: s, chat: chat, model: req.Model, promptTokens: promptTokens, imageTokens: int(pc.imageTokens), audioTokens: int(pc.audioTokens),
		maxTokens: maxTokens, stream: req.Stream, id: fmt.Sprintf("%s-%d", map[bool]string{true: "chatcmpl", false: "cmpl"}[chat], n),
		wordSeed: wordSeed, answer: answer, choices: make([]choiceState, feat.n), logprobs: feat.logprobs, topLogprobs: feat.topLogprobs,
		chunkTokens: s.opts.TokensPerChunk, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, arrived: arrived, faultAt: -1,
		created: arrived.Unix(), rc: rc}
	if s.spans != nil {
		g.span = s.spans.request(r.Header, &req)
	}
	if s.opts.SpecTokens > 0 {
		g.chunkTokens = 1 // each step's tokens go out as they come, in one event
	}
	if chat && answer == nil {
		share := reasoningShare(s.opts.ReasoningRatio, req.ReasoningEffort)
		for i := range g.choices {
			g.choices[i].reasoning = int(share * float64(stopAts[i]))
		}
	}
	sq := &seq{id: n, promptLen: promptTokens, maxTokens: maxTokens, stopAt: stopAts[0], arrival: arrived, adapter: adapter,
		images: pc.images(), logprobs: feat.logprobs, n: feat.n}
	if feat.n > 1 {
		sq.stopAts = stopAts
	}
	if c := feat.constraint; c != nil {
		sq.constrained, sq.grammar = true, c.hash
	}
	if s.opts.Engine.PrefixCaching {
		sq.blockHashes = s.engine.hashBlocks(pc.ids(true))
	}
	g.seq = sq
	return g, fault, true
}

// injectFault applies a fault drawn for this request: a 500 or a slow first
// byte now, or one of the mid-stream faults later (in choice 0). It
// reports whether the response is already complete.
func (s *Server) injectFault(w http.ResponseWriter, g *generation, u float64) bool {
	o := s.opts
	edges := []struct {
		rate float64
		kind string
	}{{o.FailRate, "500"}, {o.StreamErrorRate, "error"}, {o.ResetRate, "reset"}, {o.StallRate, "stall"}, {o.MalformedRate, "malformed"}}
	acc := 0.0
	for _, e := range edges {
		acc += e.rate
		if u < acc {
			if e.kind == "500" {
				writeError(w, http.StatusInternalServerError, "InternalServerError", "injected fault: internal server error")
				return true
			}
			if g.stream {
				g.fault, g.faultAt = e.kind, g.maxTokens/2
			}
			break
		}
	}
	// The slow-first-byte draw is independent of the others.
	if o.SlowFirstByteRate > 0 && math.Mod(u*7919, 1) < o.SlowFirstByteRate {
		time.Sleep(o.SlowFirstByteFor)
	}
	return false
}

// generation is one request's response being written.
type generation struct {
	s            *Server
	seq          *seq
	chat, stream bool
	includeUsage bool
	model, id    string
	promptTokens int
	imageTokens  int
	audioTokens  int
	maxTokens    int
	words        []string // drawn at the first token (drawWords)
	wordSeed     uint64
	answer       []string // a probe's answer, leading the words
	choices      []choiceState
	logprobs     bool
	topLogprobs  int
	chunkTokens  int // tokens per streamed event
	arrived      time.Time
	fault        string // mid-stream fault kind, if any
	faultAt      int    // token index of choice 0 at which it strikes, or -1
	created      int64
	buf          []byte // the streamed events of a batch, reused
	content      []byte // reused
	reasonBuf    []byte // reused
	abortCounted bool   // the abort is in the engine and in /metrics
	started      bool   // an event has come from the engine
	finished     int    // choices finished

	times *requestTimes // the engine's readings, once the last choice finished
	span  spanRequest   // what the llm_request span reads from the request

	rc      *http.ResponseController // nil: no write deadlines (a test's recorder)
	renewAt time.Time                // when the write deadline is next renewed
}

// drawWords draws the response's words, the probe's answer leading them.
// It runs at the first token, so that a request waiting in the queue holds
// no text: max_tokens words, 16 bytes each, are the largest part of a
// request in the engine.
func (g *generation) drawWords() {
	g.words = g.s.words.Words(g.maxTokens, g.wordSeed)
	copy(g.words, g.answer)
}

// renewWriteDeadline gives the response's next write the server's
// writeTimeout to go out, renewed once half of it has passed rather than
// on every event: a client that stops reading is cut within that time, and
// its request aborted in the engine. While the handler waits for tokens
// (run) it renews the deadline every half of it, and before a stall it
// lifts it: HTTP/2 enforces a write deadline as a timer on the stream,
// writing or not, and a wait for tokens is no client's fault.
func (g *generation) renewWriteDeadline() {
	if g.rc == nil {
		return
	}
	now := time.Now()
	if now.Before(g.renewAt) {
		return
	}
	g.rc.SetWriteDeadline(now.Add(g.s.writeTimeout))
	g.renewAt = now.Add(g.s.writeTimeout / 2)
}

// liftWriteDeadline lifts the write deadline until the next write.
func (g *generation) liftWriteDeadline() {
	if g.rc != nil {
		g.rc.SetWriteDeadline(time.Time{})
		g.renewAt = time.Time{}
	}
}

// choiceState is one choice's progress.
type choiceState struct {
	sent, pending int
	reasoning     int // tokens sent as reasoning before content
	last          time.Time
	reason        string // finish reason, once done
	offset        int    // bytes of text streamed (completions logprobs' text_offset)
}

// word returns choice c's token i. The choices share one drawn text, each
// from its own offset, so n choices cost one text's memory.
func (g *generation) word(c, i int) string {
	return g.words[(i+c*7919)%len(g.words)]
}

// abort drops the sequence from the engine and counts it in /metrics, once.
func (g *generation) abort() {
	if g.abortCounted {
		return
	}
	g.abortCounted = true
	g.s.engine.abort(g.seq)
	g.s.metrics.aborted()
}

// generated is the tokens produced over every choice.
func (g *generation) generated() int {
	n := 0
	for _, c := range g.choices {
		n += c.sent + c.pending
	}
	return n
}

// usage is the response's usage: completion tokens summed over the
// choices, and in prompt_tokens_details the prompt's image and audio
// tokens where there are any and, with prefix caching on, the tokens the
// cache served (cached_tokens, as OpenAI and vLLM report them).
func (g *generation) usage() map[string]any {
	generated, reasoning := 0, 0
	for _, c := range g.choices {
		t := c.sent + c.pending
		generated += t
		reasoning += min(c.reasoning, t)
	}
	u := map[string]any{"prompt_tokens": g.promptTokens, "completion_tokens": generated, "total_tokens": g.promptTokens + generated}
	if reasoning > 0 {
		u["completion_tokens_details"] = map[string]any{"reasoning_tokens": reasoning}
	}
	details := map[string]any{}
	if g.imageTokens > 0 {
		details["image_tokens"] = g.imageTokens
	}
	if g.audioTokens > 0 {
		details["audio_tokens"] = g.audioTokens
	}
	if g.s.opts.Engine.PrefixCaching && g.times != nil {
		details["cached_tokens"] = g.times.cachedTokens
	}
	if len(details) > 0 {
		u["prompt_tokens_details"] = details
	}
	return u
}

func (g *generation) object(chunk bool) string {
	switch {
	case g.chat && chunk:
		return "chat.completion.chunk"
	case g.chat:
		return "chat.completion"
	}
	return "text_completion"
}

// run relays the engine's tokens to the client, streamed or whole.
func (g *generation) run(ctx context.Context, w http.ResponseWriter) {
	var flusher http.Flusher
	if g.stream {
		flusher, _ = w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		g.renewWriteDeadline()
		if flusher != nil {
			flusher.Flush()
		}
	}
	var renew <-chan time.Time // nil, never ready, without deadlines
	if g.rc != nil {
		tick := time.NewTicker(g.s.writeTimeout / 2)
		defer tick.Stop()
		renew = tick.C
	}
	var evs []tokenEvent
	for {
		select {
		case <-ctx.Done():
			g.abort()
			return
		case <-renew:
			g.renewAt = time.Time{} // no write is waiting: renew now
			g.renewWriteDeadline()
			continue
		case <-g.seq.out.ready:
		}
		evs = g.seq.out.take(evs)
		now := time.Now()
		if !g.relay(w, flusher, evs, now) {
			return
		}
		if g.stream && !g.flushOut(w, flusher) {
			g.abort()
			return
		}
	}
}

// relay renders one batch of the engine's events (streamed ones into g.buf,
// sent by the caller in one write) and reports whether the response goes on.
// Events that waited together leave in one write, as a server that fell
// behind its engine sends them: each token keeps its own SSE event, and a
// loaded simulator spends its core on the engine, not on a system call per
// event.
func (g *generation) relay(w http.ResponseWriter, flusher http.Flusher, evs []tokenEvent, now time.Time) bool {
	for _, ev := range evs {
		c := &g.choices[ev.choice]
		c.pending += ev.tokens
		if !g.started {
			g.s.metrics.firstToken(now.Sub(g.arrived))
			g.started = true
			if g.words == nil {
				g.drawWords()
			}
		} else if !c.last.IsZero() {
			g.s.metrics.interToken(now.Sub(c.last))
		}
		c.last = now
		if g.stream && (c.pending >= g.chunkTokens || ev.done) {
			if !g.renderTokens(w, flusher, ev.choice, c.sent, c.pending) {
				g.abort()
				return false
			}
			c.sent += c.pending
			c.pending = 0
		}
		if !ev.done {
			continue
		}
		c.reason = ev.reason
		if ev.times != nil {
			g.times = ev.times
		}
		if g.stream {
			g.buf = g.appendFinishChoice(g.buf, ev.choice)
		}
		g.finished++
		if g.finished < len(g.choices) {
			continue
		}
		// Count the request before the client can see it end, so
		// /metrics agrees with a client that scrapes it next.
		g.s.metrics.finished(g.choices[0].reason, g.promptTokens, g.generated(), now.Sub(g.arrived))
		g.logFinished()
		if g.stream {
			g.buf = g.appendFinishStream(g.buf)
			// Unflushed: net/http sends it with the chunked terminator
			// in one write when the handler returns. The request is
			// finished, in the engine and in /metrics, whether or not
			// the client reads this.
			g.renewWriteDeadline()
			w.Write(g.buf)
		} else {
			g.whole(w)
		}
		return false
	}
	return true
}

// flushOut sends the rendered events, if any, and reports whether the
// write succeeded.
func (g *generation) flushOut(w http.ResponseWriter, flusher http.Flusher) bool {
	if len(g.buf) == 0 {
		return true
	}
	g.renewWriteDeadline()
	_, err := w.Write(g.buf)
	g.buf = g.buf[:0]
	if err != nil {
		return false
	}
	if flusher != nil {
		flusher.Flush()
	}
	return true
}

func (g *generation) send(w http.ResponseWriter, flusher http.Flusher, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	g.renewWriteDeadline()
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return false
	}
	if flusher != nil {
		flusher.Flush()
	}
	return true
}

// renderTokens renders choice c's tokens [from, from+n) as one event into
// g.buf, applying a mid-stream fault when it falls in this range: the
// batch's events rendered before it are sent first. It reports whether
// the stream goes on. A fault that ends the stream is counted as an abort
// before the client can see it.
func (g *generation) renderTokens(w http.ResponseWriter, flusher http.Flusher, c, from, n int) bool {
	if c == 0 && g.faultAt >= 0 && g.faultAt < from+n {
		// What was rendered before the fault reaches the client first.
		if !g.flushOut(w, flusher) {
			return false
		}
		if g.fault != "stall" {
			g.abort()
		}
		switch g.fault {
		case "error":
			g.send(w, flusher, map[string]any{"error": map[string]any{"message": "injected fault: engine error mid-stream", "type": "InternalServerError", "code": 500}})
			return false
		case "reset":
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					tc.SetLinger(0) // RST, not FIN
				}
				conn.Close()
			}
			return false
		case "malformed":
			g.renewWriteDeadline()
			fmt.Fprint(w, "data: {\"choices\": [{\"delta\": \n\n")
			if flusher != nil {
				flusher.Flush()
			}
			return false
		case "stall":
			g.liftWriteDeadline()
			time.Sleep(g.s.opts.StallFor)
			g.faultAt = -1
		}
	}
	buf := g.buf
	if from == 0 && g.chat {
		buf = g.appendChoiceHead(buf, c)
		buf = append(buf, `"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"...)
	}
	// Token events are the hot path (tens of thousands a second): render
	// them into a reused buffer from a fixed template, not through maps and
	// encoding/json.
	ch := &g.choices[c]
	content, reasoning := g.content[:0], g.reasonBuf[:0]
	split := from // the first content token
	for i := from; i < from+n; i++ {
		if i < ch.reasoning {
			reasoning = append(reasoning, g.word(c, i)...)
			split = i + 1
		} else {
			content = append(content, g.word(c, i)...)
		}
	}
	g.content, g.reasonBuf = content, reasoning
	if !g.chat {
		buf = g.appendChoiceHead(buf, c)
		buf = append(buf, `"text":`...)
		buf = appendJSONString(buf, content) // reasoning deltas are chat-only
		if g.logprobs {
			buf = append(buf, `,"logprobs":`...)
			buf = g.appendTextLogprobs(buf, c, from, from+n, &ch.offset)
		}
		buf = append(buf, `,"finish_reason":null}]}`+"\n\n"...)
	} else {
		if len(reasoning) > 0 {
			buf = g.appendChoiceHead(buf, c)
			buf = append(buf, `"delta":{"reasoning_content":`...)
			buf = appendJSONString(buf, reasoning)
			buf = append(buf, '}')
			if g.logprobs {
				buf = append(buf, `,"logprobs":`...)
				buf = g.appendChatLogprobs(buf, c, from, split)
			}
			buf = append(buf, `,"finish_reason":null}]}`+"\n\n"...)
		}
		if len(content) > 0 {
			buf = g.appendChoiceHead(buf, c)
			buf = append(buf, `"delta":{"content":`...)
			buf = appendJSONString(buf, content)
			buf = append(buf, '}')
			if g.logprobs {
				buf = append(buf, `,"logprobs":`...)
				buf = g.appendChatLogprobs(buf, c, split, from+n)
			}
			buf = append(buf, `,"finish_reason":null}]}`+"\n\n"...)
		}
	}
	g.buf = buf
	return true
}

// appendChoiceHead appends `data: {"id":...,"choices":[{"index":c,` for a
// chunk.
func (g *generation) appendChoiceHead(buf []byte, c int) []byte {
	buf = g.appendEventHead(buf)
	buf = append(buf, `,"choices":[{"index":`...)
	buf = strconv.AppendInt(buf, int64(c), 10)
	return append(buf, ',')
}

// appendEventHead appends `data: {"id":...,"model":...`, the fields every
// streamed chunk opens with, in vLLM's order.
func (g *generation) appendEventHead(buf []byte) []byte {
	buf = append(buf, `data: {"id":"`...)
	buf = append(buf, g.id...)
	buf = append(buf, `","object":"`...)
	buf = append(buf, g.object(true)...)
	buf = append(buf, `","created":`...)
	buf = strconv.AppendInt(buf, g.created, 10)
	buf = append(buf, `,"model":`...)
	return appendJSONString(buf, []byte(g.model))
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, everything else (UTF-8) as is.
func appendJSONString(buf, s []byte) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			buf = append(buf, c)
		}
	}
	return append(buf, '"')
}

// appendFinishChoice appends the event that gives choice c's finish reason.
func (g *generation) appendFinishChoice(buf []byte, c int) []byte {
	buf = g.appendChoiceHead(buf, c)
	if g.chat {
		buf = append(buf, `"delta":{},"finish_reason":`...)
	} else {
		buf = append(buf, `"text":"","finish_reason":`...)
	}
	buf = appendJSONString(buf, []byte(g.choices[c].reason))
	return append(buf, "}]}\n\n"...)
}

// appendFinishStream appends the usage event, when the request asked for
// one, and the stream's end.
func (g *generation) appendFinishStream(buf []byte) []byte {
	if g.includeUsage {
		buf = g.appendEventHead(buf)
		buf = append(buf, `,"choices":[],"usage":`...)
		u, _ := json.Marshal(g.usage()) // once a request; maps of ints cannot fail
		buf = append(buf, u...)
		buf = append(buf, "}\n\n"...)
	}
	return append(buf, "data: [DONE]\n\n"...)
}

func (g *generation) whole(w http.ResponseWriter) {
	choices := make([]any, len(g.choices))
	for c, ch := range g.choices {
		total := ch.sent + ch.pending
		var reasoning, content strings.Builder
		for i := range total {
			if i < ch.reasoning {
				reasoning.WriteString(g.word(c, i))
			} else {
				content.WriteString(g.word(c, i))
			}
		}
		var choice map[string]any
		if g.chat {
			msg := map[string]any{"role": "assistant", "content": content.String()}
			if reasoning.Len() > 0 {
				msg["reasoning_content"] = reasoning.String()
			}
			choice = map[string]any{"index": c, "message": msg, "finish_reason": ch.reason}
			if g.logprobs {
				choice["logprobs"] = json.RawMessage(g.appendChatLogprobs(nil, c, 0, total))
			}
		} else {
			choice = map[string]any{"index": c, "text": reasoning.String() + content.String(), "finish_reason": ch.reason}
			if g.logprobs {
				offset := 0
				choice["logprobs"] = json.RawMessage(g.appendTextLogprobs(nil, c, 0, total, &offset))
			}
		}
		choices[c] = choice
	}
	g.renewWriteDeadline()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": g.id, "object": g.object(false), "created": time.Now().Unix(), "model": g.model,
		"choices": choices, "usage": g.usage()})
}
