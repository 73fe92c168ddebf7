package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/replay/scrub"
)

// TokenizerServer is the --tokenizer value that counts tokens with the
// endpoint's own /tokenize route (vLLM and SGLang have one), so prompt
// lengths are exact for whatever model is served.
const TokenizerServer = "server"

// serverCounter counts tokens by asking the endpoint's /tokenize route. A
// failed count returns -1 and is remembered.
type serverCounter struct {
	url     string
	model   string
	client  *http.Client
	headers func(*http.Request)
	opts    *Options // for redirect notes
	mu      sync.Mutex
	firstEr error
	failed  atomic.Int64
}

func (s *serverCounter) Name() string { return "server:" + scrub.URL(s.url) }

func (s *serverCounter) Count(text string) int {
	n, err := s.count(text)
	if err != nil {
		s.failed.Add(1)
		s.mu.Lock()
		if s.firstEr == nil {
			s.firstEr = err
		}
		s.mu.Unlock()
		return -1
	}
	return n
}

func (s *serverCounter) count(text string) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": s.model, "prompt": text, "add_special_tokens": false})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	s.headers(req)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST %s: %v", scrub.URL(s.url), shortTransport(err))
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		resp.Body.Close()
	}()
	var out struct {
		Count  *int  `json:"count"`
		Tokens []int `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: %s, not a /tokenize answer", scrub.URL(s.url), s.opts.httpStatusError(resp))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, tokenizeAnswerBytes(len(text)))).Decode(&out); err != nil {
		return 0, fmt.Errorf("POST %s: HTTP %d, not a /tokenize answer", scrub.URL(s.url), resp.StatusCode)
	}
	if out.Count != nil {
		if *out.Count < 0 || *out.Count > maxUsageTokens {
			return 0, fmt.Errorf("POST %s: impossible count %d", scrub.URL(s.url), *out.Count)
		}
		return *out.Count, nil
	}
	if len(out.Tokens) > maxTextTokens(len(text)) {
		return 0, fmt.Errorf("POST %s: impossible answer: %d tokens for %d bytes of text", scrub.URL(s.url), len(out.Tokens), len(text))
	}
	return len(out.Tokens), nil
}

// maxTextTokens is the most tokens a text of n bytes can hold: every
// token of a byte-level or byte-fallback vocabulary covers at least one
// byte, and a few are added (a prefix space, a start token).
func maxTextTokens(n int) int { return n + 16 }

// tokenizeAnswerBytes bounds the /tokenize answer for a text of n bytes:
// its token ids, at most 11 bytes each in JSON, and a MiB for the rest,
// within 64 MiB.
func tokenizeAnswerBytes(n int) int64 {
	return min(int64(64<<20), 1<<20+11*int64(maxTextTokens(n)))
}

// err returns the first failed count, if any.
func (s *serverCounter) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstEr
}
