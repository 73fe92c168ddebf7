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

	"github.com/servetrace/servetrace/trace"
)

// genRequest is the part of a completions or chat request the simulator reads.
type genRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []message       `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N         *int `json:"n"`
	IgnoreEOS bool `json:"ignore_eos"`
	MinTokens *int `json:"min_tokens"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns a message's text, whether content is a string or a list of
// {"type":"text","text":...} parts.
func (m message) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("message content must be a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// promptParts returns the texts whose tokens make up the prompt: each chat
// message's content (template tokens are not counted, and a template keeps
// messages apart, so each is counted on its own), or the completion prompt.
func (r *genRequest) promptParts(chat bool) ([]string, error) {
	if chat {
		if len(r.Messages) == 0 {
			return nil, fmt.Errorf("messages is required and must not be empty")
		}
		parts := make([]string, 0, len(r.Messages))
		for _, m := range r.Messages {
			t, err := m.text()
			if err != nil {
				return nil, err
			}
			parts = append(parts, t)
		}
		return parts, nil
	}
	if len(r.Prompt) == 0 {
		return nil, fmt.Errorf("prompt is required")
	}
	var s string
	if err := json.Unmarshal(r.Prompt, &s); err == nil {
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(r.Prompt, &list); err == nil && len(list) == 1 {
		return list, nil
	}
	return nil, fmt.Errorf("prompt must be a string (or a list of one string)")
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
	w.Write(b)
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	data := make([]map[string]any, 0, len(s.opts.Models))
	for _, m := range s.opts.Models {
		data = append(data, map[string]any{"id": m, "object": "model", "created": s.created, "owned_by": "servetrace", "max_model_len": s.opts.MaxModelLen})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// serveVersion answers GET /version as vLLM does ({"version"}), with the
// engine and preset beside it, so a replay's fingerprint tells the
// simulator from a real server.
func (s *Server) serveVersion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"version": trace.ToolVersion, "engine": "servetrace-sim", "preset": s.opts.Preset})
}

// serveTokenize answers vLLM's /tokenize: {"model", "prompt"} or
// {"model", "messages"} in, {"count", "max_model_len", "tokens"} out.
func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON: "+err.Error())
		return
	}
	if req.Model != "" && !s.models[req.Model] {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	parts, err := req.promptParts(len(req.Messages) > 0)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	tokens := []int{}
	for _, p := range parts {
		tokens = append(tokens, s.tok.Encode(p)...)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"count": len(tokens), "max_model_len": s.opts.MaxModelLen, "tokens": tokens})
}

func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	arrived := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "read request body: "+err.Error())
		return
	}
	var req genRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON for this endpoint: "+err.Error())
		return
	}
	if !s.models[req.Model] {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if req.N != nil && *req.N != 1 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "only n=1 is supported")
		return
	}
	parts, err := req.promptParts(chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
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
		return
	}
	select {
	case s.tokenizing <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	var ids []int
	for _, p := range parts {
		ids = append(ids, s.tok.Encode(p)...)
	}
	<-s.tokenizing
	promptTokens := len(ids)
	if maxTokens > s.opts.MaxModelLen-promptTokens { // not a sum: a max_tokens near MaxInt would overflow it
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion).",
				s.opts.MaxModelLen, promptTokens+maxTokens, promptTokens, maxTokens))
		return
	}
	fault, stopDraw, n := s.draw()
	stopAt := maxTokens
	minTokens := 0
	if req.MinTokens != nil {
		minTokens = *req.MinTokens
	}
	if !req.IgnoreEOS && minTokens < maxTokens && stopDraw < s.opts.StopRate {
		// stopDraw/StopRate is uniform on [0, 1) given that it stops: the
		// length is uniform on [max(min_tokens, 1), max_tokens].
		lo := max(minTokens, 1)
		stopAt = lo + min(int(stopDraw/s.opts.StopRate*float64(maxTokens-lo+1)), maxTokens-lo)
	}
	g := &generation{s: s, chat: chat, model: req.Model, promptTokens: promptTokens, maxTokens: maxTokens, stream: req.Stream,
		id: fmt.Sprintf("%s-%d", map[bool]string{true: "chatcmpl", false: "cmpl"}[chat], n), words: s.words.Words(maxTokens, n),
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, arrived: arrived, faultAt: -1, created: arrived.Unix()}
	if chat {
		g.reasoning = int(s.opts.ReasoningRatio * float64(stopAt))
	}
	if s.injectFault(w, g, fault) {
		return
	}
	sq := &seq{id: n, promptLen: promptTokens, maxTokens: maxTokens, stopAt: stopAt, arrival: arrived}
	if s.opts.Engine.PrefixCaching {
		sq.blockHashes = s.engine.hashBlocks(ids)
	}
	switch err := s.engine.submit(sq); {
	case errors.Is(err, errQueueFull):
		s.metrics.rejected()
		writeError(w, http.StatusTooManyRequests, "RateLimitError", fmt.Sprintf("the server is overloaded: %d requests are waiting, as many as its queue holds; retry later", s.opts.Engine.MaxWaiting))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	g.seq = sq
	g.run(r.Context(), w)
}

// injectFault applies a fault drawn for this request: a 500 or a slow first
// byte now, or one of the mid-stream faults later. It reports whether the
// response is already complete.
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
	maxTokens    int
	reasoning    int // tokens sent as reasoning before content
	words        []string
	arrived      time.Time
	fault        string // mid-stream fault kind, if any
	faultAt      int    // token index at which it strikes, or -1
	created      int64
	buf          []byte // reused for token events
	content      []byte // reused
	reasonBuf    []byte // reused
	abortCounted bool   // the abort is in the engine and in /metrics
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

func (g *generation) usage(generated int) map[string]any {
	u := map[string]any{"prompt_tokens": g.promptTokens, "completion_tokens": generated, "total_tokens": g.promptTokens + generated}
	if g.reasoning > 0 {
		u["completion_tokens_details"] = map[string]any{"reasoning_tokens": min(g.reasoning, generated)}
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
	sent := 0 // tokens written
	pending := 0
	var last time.Time
	var flusher http.Flusher
	if g.stream {
		flusher, _ = w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if flusher != nil {
			flusher.Flush()
		}
	}
	for {
		select {
		case <-ctx.Done():
			g.abort()
			return
		case ev := <-g.seq.out:
			now := time.Now()
			pending += ev.tokens
			if sent == 0 && pending > 0 {
				g.s.metrics.firstToken(now.Sub(g.arrived))
			} else if !last.IsZero() {
				g.s.metrics.interToken(now.Sub(last))
			}
			last = now
			if g.stream && (pending >= g.s.opts.TokensPerChunk || ev.done) {
				if !g.writeTokens(w, flusher, sent, pending) {
					g.abort()
					return
				}
				sent += pending
				pending = 0
			}
			if ev.done {
				// Count the request before the client can see it end, so
				// /metrics agrees with a client that scrapes it next.
				total := sent + pending
				g.s.metrics.finished(ev.reason, g.promptTokens, total, now.Sub(g.arrived))
				if g.stream {
					g.finishStream(w, flusher, total, ev.reason)
				} else {
					g.whole(w, total, ev.reason)
				}
				return
			}
		}
	}
}

func (g *generation) send(w http.ResponseWriter, flusher http.Flusher, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return false
	}
	if flusher != nil {
		flusher.Flush()
	}
	return true
}

func (g *generation) chunk(choice map[string]any) map[string]any {
	return map[string]any{"id": g.id, "object": g.object(true), "created": time.Now().Unix(), "model": g.model, "choices": []any{choice}}
}

// writeTokens streams tokens [from, from+n) as one event, applying a
// mid-stream fault when it falls in this range. It reports whether the
// stream goes on. A fault that ends the stream is counted as an abort
// before the client can see it.
func (g *generation) writeTokens(w http.ResponseWriter, flusher http.Flusher, from, n int) bool {
	if g.faultAt >= 0 && g.faultAt < from+n {
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
			fmt.Fprint(w, "data: {\"choices\": [{\"delta\": \n\n")
			if flusher != nil {
				flusher.Flush()
			}
			return false
		case "stall":
			time.Sleep(g.s.opts.StallFor)
			g.faultAt = -1
		}
	}
	if from == 0 && g.chat && !g.send(w, flusher, g.chunk(map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil})) {
		return false
	}
	// Token events are the hot path (tens of thousands a second): render
	// them into a reused buffer from a fixed template, not through maps and
	// encoding/json.
	content, reasoning := g.content[:0], g.reasonBuf[:0]
	for i := from; i < from+n; i++ {
		if i < g.reasoning {
			reasoning = append(reasoning, g.words[i]...)
		} else {
			content = append(content, g.words[i]...)
		}
	}
	g.content, g.reasonBuf = content, reasoning
	buf := g.buf[:0]
	if !g.chat {
		buf = g.appendChunkHead(buf)
		buf = append(buf, `{"index":0,"text":`...)
		buf = appendJSONString(buf, content) // reasoning deltas are chat-only
		buf = append(buf, `,"finish_reason":null}]}`+"\n\n"...)
	} else {
		if len(reasoning) > 0 {
			buf = g.appendChunkHead(buf)
			buf = append(buf, `{"index":0,"delta":{"reasoning_content":`...)
			buf = appendJSONString(buf, reasoning)
			buf = append(buf, `},"finish_reason":null}]}`+"\n\n"...)
		}
		if len(content) > 0 {
			buf = g.appendChunkHead(buf)
			buf = append(buf, `{"index":0,"delta":{"content":`...)
			buf = appendJSONString(buf, content)
			buf = append(buf, `},"finish_reason":null}]}`+"\n\n"...)
		}
	}
	g.buf = buf
	if _, err := w.Write(buf); err != nil {
		return false
	}
	if flusher != nil {
		flusher.Flush()
	}
	return true
}

// appendChunkHead appends `data: {"id":...,"choices":[` for a chunk.
func (g *generation) appendChunkHead(buf []byte) []byte {
	buf = append(buf, `data: {"id":"`...)
	buf = append(buf, g.id...)
	buf = append(buf, `","object":"`...)
	buf = append(buf, g.object(true)...)
	buf = append(buf, `","created":`...)
	buf = strconv.AppendInt(buf, g.created, 10)
	buf = append(buf, `,"model":`...)
	buf = appendJSONString(buf, []byte(g.model))
	return append(buf, `,"choices":[`...)
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

func (g *generation) finishStream(w http.ResponseWriter, flusher http.Flusher, total int, reason string) {
	if g.chat {
		g.send(w, flusher, g.chunk(map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": reason}))
	} else {
		g.send(w, flusher, g.chunk(map[string]any{"index": 0, "text": "", "finish_reason": reason}))
	}
	if g.includeUsage {
		g.send(w, flusher, map[string]any{"id": g.id, "object": g.object(true), "created": time.Now().Unix(), "model": g.model, "choices": []any{}, "usage": g.usage(total)})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func (g *generation) whole(w http.ResponseWriter, total int, reason string) {
	var reasoning, content strings.Builder
	for i := 0; i < total; i++ {
		if i < g.reasoning {
			reasoning.WriteString(g.words[i])
		} else {
			content.WriteString(g.words[i])
		}
	}
	var choice map[string]any
	if g.chat {
		msg := map[string]any{"role": "assistant", "content": content.String()}
		if reasoning.Len() > 0 {
			msg["reasoning_content"] = reasoning.String()
		}
		choice = map[string]any{"index": 0, "message": msg, "finish_reason": reason}
	} else {
		choice = map[string]any{"index": 0, "text": reasoning.String() + content.String(), "finish_reason": reason}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": g.id, "object": g.object(false), "created": time.Now().Unix(), "model": g.model,
		"choices": []any{choice}, "usage": g.usage(total)})
}
