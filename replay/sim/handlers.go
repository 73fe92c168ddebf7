package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
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
	N *int `json:"n"`
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
	promptTokens := 0
	for _, p := range parts {
		promptTokens += s.tok.Count(p)
	}
	if promptTokens+maxTokens > s.opts.MaxModelLen {
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion).",
				s.opts.MaxModelLen, promptTokens+maxTokens, promptTokens, maxTokens))
		return
	}
	u, seq := s.draw()
	if u < s.opts.FailRate {
		writeError(w, http.StatusInternalServerError, "InternalServerError", "injected fault: internal server error")
		return
	}
	breakAt := -1
	if req.Stream && u < s.opts.FailRate+s.opts.StreamErrorRate {
		breakAt = maxTokens / 2
	}
	g := generation{s: s, chat: chat, model: req.Model, promptTokens: promptTokens, maxTokens: maxTokens,
		id:    fmt.Sprintf("%s-%d", map[bool]string{true: "chatcmpl", false: "cmpl"}[chat], seq),
		first: arrived.Add(s.opts.PrefillBase + time.Duration(promptTokens)*s.opts.PrefillPerToken),
		words: s.words.Words(maxTokens, seq), breakAt: breakAt}
	if req.Stream {
		g.stream(r.Context(), w, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		g.whole(r.Context(), w)
	}
}

// generation is one request's output being produced.
type generation struct {
	s            *Server
	chat         bool
	model, id    string
	promptTokens int
	maxTokens    int
	first        time.Time // when the first token is due
	words        []string
	breakAt      int // token index at which a stream error is injected, or -1
}

// due returns when output token i is ready.
func (g *generation) due(i int) time.Time {
	return g.first.Add(time.Duration(i) * g.s.opts.DecodePerToken)
}

// sleepUntil waits until t or until ctx ends; it reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g *generation) usage() map[string]int {
	return map[string]int{"prompt_tokens": g.promptTokens, "completion_tokens": g.maxTokens, "total_tokens": g.promptTokens + g.maxTokens}
}

func (g *generation) whole(ctx context.Context, w http.ResponseWriter) {
	if !sleepUntil(ctx, g.due(g.maxTokens-1)) {
		return // client gone
	}
	text := strings.Join(g.words, "")
	var choice map[string]any
	if g.chat {
		choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "length"}
	} else {
		choice = map[string]any{"index": 0, "text": text, "finish_reason": "length"}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": g.id, "object": g.object(false), "created": time.Now().Unix(), "model": g.model,
		"choices": []any{choice}, "usage": g.usage()})
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

func (g *generation) stream(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	send := func(v any) bool {
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
	chunk := func(choice map[string]any) map[string]any {
		return map[string]any{"id": g.id, "object": g.object(true), "created": time.Now().Unix(), "model": g.model, "choices": []any{choice}}
	}
	for i, word := range g.words {
		if !sleepUntil(ctx, g.due(i)) {
			return // client gone: stop generating
		}
		if i == g.breakAt {
			send(map[string]any{"error": map[string]any{"message": "injected fault: engine error mid-stream", "type": "InternalServerError", "code": 500}})
			return
		}
		if g.chat {
			if i == 0 && !send(chunk(map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil})) {
				return
			}
			if !send(chunk(map[string]any{"index": 0, "delta": map[string]any{"content": word}, "finish_reason": nil})) {
				return
			}
		} else if !send(chunk(map[string]any{"index": 0, "text": word, "finish_reason": nil})) {
			return
		}
	}
	if g.chat {
		send(chunk(map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "length"}))
	} else {
		send(chunk(map[string]any{"index": 0, "text": "", "finish_reason": "length"}))
	}
	if includeUsage {
		send(map[string]any{"id": g.id, "object": g.object(true), "created": time.Now().Unix(), "model": g.model, "choices": []any{}, "usage": g.usage()})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}
