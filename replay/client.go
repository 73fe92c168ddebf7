package replay

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/chunk"
	"github.com/servetrace/servetrace/replay/h1"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// newHTTPClient returns a client tuned for load generation: one protocol
// chosen explicitly (HTTP/1.1 by default: h2 multiplexing couples timings
// across streams), no compression, and enough idle connections per host
// that connections are reused, not churned. HTTP/1.1 to plain http://
// endpoints goes through h1, which spares each request net/http's
// goroutine hand-offs.
func newHTTPClient(o Options) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 100000,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      16 << 10,
		Protocols:           new(http.Protocols),
	}
	switch o.HTTP {
	case "", HTTP1:
		tr.Protocols.SetHTTP1(true)
	case HTTP2:
		// TLS endpoints negotiate h2 by ALPN; plain http:// ones are spoken
		// to in h2 by prior knowledge.
		tr.Protocols.SetHTTP2(true)
		tr.Protocols.SetUnencryptedHTTP2(true)
	default:
		return nil, opterr.New("HTTP", string(o.HTTP), "use 1.1 or 2")
	}
	if o.CACert != "" || o.Insecure {
		cfg := &tls.Config{InsecureSkipVerify: o.Insecure}
		if o.CACert != "" {
			pem, err := os.ReadFile(o.CACert)
			if err != nil {
				return nil, opterr.New("CACert", o.CACert, "%v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, opterr.New("CACert", o.CACert, "holds no PEM certificate")
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	var rt http.RoundTripper = tr
	if o.HTTP != HTTP2 {
		// Plain http:// exchanges run on the sending goroutine; https
		// and the rest go to net/http's transport.
		rt = &h1.Transport{DialContext: tr.DialContext, Fallback: tr, MaxIdleConnsPerHost: tr.MaxIdleConnsPerHost,
			IdleConnTimeout: tr.IdleConnTimeout, ReadBufferSize: tr.ReadBufferSize}
	}
	return &http.Client{Transport: rt, CheckRedirect: o.checkRedirect}, nil
}

// maxRedirects is how many redirects a request follows at most, with
// FollowRedirects.
const maxRedirects = 10

// checkRedirect decides whether the client follows a redirect, for every
// request replay makes. A redirect can take the Authorization header and
// the extra headers to another port or host, resend the body, or turn a
// POST into a GET: unless FollowRedirects is set none is followed, and
// with it only one within the first request's origin that keeps the
// method, with the Authorization header, the extra headers and the URL's
// user info removed. The 3xx response is then what the caller sees
// (redirectNote says why it was not followed).
func (o *Options) checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	if !o.FollowRedirects || len(via) > maxRedirects || origin(req.URL) != origin(first.URL) || req.Method != first.Method {
		return http.ErrUseLastResponse
	}
	req.Header.Del("Authorization")
	for k := range o.Headers {
		req.Header.Del(k)
	}
	req.URL.User = nil // else net/http sends it again as basic auth
	return nil
}

// redirectNote says where a 3xx response pointed (the Location's origin,
// redacted) and why it was not followed.
func (o *Options) redirectNote(resp *http.Response) string {
	loc, err := resp.Location()
	if err != nil {
		return "a redirect without a usable Location, not followed"
	}
	to := RedactURL(loc.Scheme + "://" + loc.Host)
	from := resp.Request.URL
	switch {
	case !o.FollowRedirects:
		return fmt.Sprintf("redirect to %s not followed (following redirects was not asked for)", to)
	case origin(loc) != origin(from):
		return fmt.Sprintf("redirect to another origin, %s, not followed", to)
	case resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusFound || resp.StatusCode == http.StatusSeeOther:
		return fmt.Sprintf("redirect to %s not followed: it would resend the %s as a GET", to, resp.Request.Method)
	}
	return fmt.Sprintf("more than %d redirects, the last to %s; not followed", maxRedirects, to)
}

// httpStatusError describes a non-2xx answer to a request replay makes.
func (o *Options) httpStatusError(resp *http.Response) string {
	s := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		s += ", " + o.redirectNote(resp)
	}
	return s
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// requestBody is what the client sends, chat or completions.
type requestBody struct {
	Model string `json:"model"`
	// Messages holds chatMessage values, and a partsMessage for a turn
	// with images or audio.
	Messages      []any   `json:"messages,omitempty"`
	Prompt        *string `json:"prompt,omitempty"`
	MaxTokens     int64   `json:"max_tokens"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	IgnoreEOS   bool     `json:"ignore_eos,omitempty"`
	MinTokens   int64    `json:"min_tokens,omitempty"`

	// encoding/json writes an embedded struct's fields in its place, so
	// these follow the ones above (appendPlainBody relies on it).
	bodyContract
}

// bodyContract is the workload contract's part of a body (contract.go):
// each field set only where the request carried the feature and it was
// not stripped.
type bodyContract struct {
	Tools             json.RawMessage `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ResponseFormat    any             `json:"response_format,omitempty"`
	StructuredOutputs any             `json:"structured_outputs,omitempty"`
	GuidedJSON        json.RawMessage `json:"guided_json,omitempty"`
	GuidedRegex       any             `json:"guided_regex,omitempty"`
	GuidedGrammar     any             `json:"guided_grammar,omitempty"`
	GuidedChoice      any             `json:"guided_choice,omitempty"`
	// Logprobs is true on chat, and the count of top logprobs on
	// completions (whose logprobs is an integer).
	Logprobs         any      `json:"logprobs,omitempty"`
	TopLogprobs      *int32   `json:"top_logprobs,omitempty"`
	N                int32    `json:"n,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	TopK             *int32   `json:"top_k,omitempty"`
	PresencePenalty  *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64 `json:"frequency_penalty,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	ReasoningEffort  string   `json:"reasoning_effort,omitempty"`
}

// setContract puts c's features into the body for api.
func (b *requestBody) setContract(c *contract, api string) {
	b.Tools, b.ToolChoice, b.ResponseFormat, b.GuidedJSON = c.tools, c.toolChoice, c.format, c.guidedJSON
	if len(c.structured) > 0 {
		b.StructuredOutputs = c.structured
	}
	b.GuidedRegex, b.GuidedGrammar, b.GuidedChoice = c.guided["guided_regex"], c.guided["guided_grammar"], c.guided["guided_choice"]
	if c.logprobs {
		if api == trace.APICompletions {
			n := int32(1)
			if c.topLogprobs != nil {
				n = max(*c.topLogprobs, 1)
			}
			b.Logprobs = n
		} else {
			b.Logprobs, b.TopLogprobs = true, c.topLogprobs
		}
	}
	if c.n > 1 {
		b.N = c.n
	}
	b.Seed, b.TopK, b.PresencePenalty, b.FrequencyPenalty = c.seed, c.topK, c.presence, c.frequency
	b.Stop, b.ReasoningEffort = c.stop, c.effort
}

// wholeResponse is a non-streamed completions or chat response.
type wholeResponse struct {
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
		Text         string  `json:"text"`
		Message      *struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens            *int64 `json:"prompt_tokens"`
		CompletionTokens        *int64 `json:"completion_tokens"`
		CompletionTokensDetails *struct {
			ReasoningTokens *int64 `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// errorMessage extracts a short message from an OpenAI-style error object
// ({"error":{"message":...}}), or from the flat shape older vLLM and Ray
// Serve answer with ({"object":"error","message":...}) and FastAPI's
// {"detail":...}.
func errorMessage(raw []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return ""
	}
	if len(e.Error) == 0 {
		switch {
		case e.Message != "":
			return shorten(e.Message)
		case len(e.Detail) > 0:
			var s string
			if json.Unmarshal(e.Detail, &s) == nil {
				return shorten(s)
			}
			return shorten(string(e.Detail))
		}
		return ""
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(e.Error, &obj) == nil && obj.Message != "" {
		return shorten(obj.Message)
	}
	var s string
	if json.Unmarshal(e.Error, &s) == nil {
		return shorten(s)
	}
	return "error object without a message"
}

// maxWholeBody bounds a non-streamed response body: a completion of the
// longest output is far shorter, and a hostile server's huge replies must
// not take the client's memory (docs/measurements.md, "Whole-response
// bound").
const maxWholeBody = 8 << 20

// maxErrorBody bounds the body of a non-2xx response read for its message:
// a validation error can quote a long prompt, and a cut JSON object would
// lose the message.
const maxErrorBody = 1 << 20

// maxDrain bounds what is read, and thrown away, before a body is closed.
const maxDrain = 256 << 10

// A recorded error message is at most maxErrorText bytes. Messages are
// first clipped to scrubWindow bytes (shorten), scrubbed, then cut to
// maxErrorText (shortenTo): a secret's copy that the final cut goes through
// was scrubbed whole, not missed as a fragment too short to tell.
const (
	maxErrorText = 200
	scrubWindow  = 2 * maxErrorText
)

// shorten collapses white space and clips s to scrubWindow bytes.
func shorten(s string) string { return shortenTo(s, scrubWindow) }

func shortenTo(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Reasons a request's context ends early; the outcome follows the cause.
var (
	errWorkloadCancel    = errors.New("cancelled by the workload's client behaviour")
	errFirstTokenTimeout = errors.New("first-token timeout")
	errTotalTimeout      = errors.New("total timeout")
	errInterrupted       = errors.New("run interrupted before the response finished")
)

// endpoint returns the target's URL for path: the path joined to the
// target's, its query (an api-version, say) kept.
func (o *Options) endpoint(path string) string {
	u, err := url.Parse(o.Target)
	if err != nil {
		return o.Target + path
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	return u.String()
}

// The values of the headers every request carries.
var (
	jsonContentType = []string{"application/json"}
	sseAccept       = []string{"text/event-stream"}
)

// setHeaders adds authorization and the user's extra headers.
func (r *Runner) setHeaders(req *http.Request) {
	if r.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.opts.APIKey)
	}
	for k, v := range r.opts.Headers {
		req.Header.Set(k, v)
	}
}

// roundTrip sends a generation request. Unless redirects are followed
// or the URL carries user info (which http.Client turns into basic
// auth), the client would hand the request to its transport and return
// the answer as it is, 3xx included: the transport is then asked
// directly, sparing the client's copies of the request's headers and
// URL, and its errors are worded as the client's.
func (r *Runner) roundTrip(req *http.Request) (*http.Response, error) {
	if r.opts.FollowRedirects || req.URL.User != nil {
		return r.client.Do(req)
	}
	resp, err := r.client.Transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// exchange sends one request and fills res with what was observed. It sets
// exactly one outcome. q carries the workload's client behaviour: cancel
// after cancel_after_ms or cancel_after_tokens, and read_delay_ms between
// reads (a slow consumer).
func (r *Runner) exchange(parent context.Context, q *trace.Request, body []byte, stream bool, res *trace.Result, collect *[]byte) {
	url := r.chatURL
	if res.API == trace.APICompletions {
		url = r.completionsURL
	}
	defer func() {
		if res.Error != "" {
			res.Error = strings.ToValidUTF8(shortenTo(scrubError(res.Error, body, r.scrub), maxErrorText), "")
		}
		res.ObservedFinishReason = r.recordedFinish(res.ObservedFinishReason, body)
	}()
	requestID := r.opts.RunID + "-" + res.RequestID
	if !validHeaderValue(requestID) || q != nil && !validHeaderValue(q.RequestID) {
		res.Outcome, res.Error = trace.OutcomeNotSent, "not sent: request_id holds a control character, which no X-Request-Id header may carry"
		return
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var timers []*time.Timer
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	after := func(d time.Duration, cause error) *time.Timer {
		t := time.AfterFunc(d, func() { cancel(cause) })
		timers = append(timers, t)
		return t
	}
	// The trace's callbacks run on the transport's goroutines: what they
	// record is read once Do has returned or failed.
	var wrote atomic.Int64
	var reused atomic.Bool
	trace0 := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused.Store(info.Reused) },
		WroteHeaders: func() { wrote.Store(r.clock()) }} // a retried request: its last try
	defer func() {
		res.ConnReused = reused.Load()
		if w := wrote.Load(); w > 0 && res.SentNs != nil {
			res.WroteNs = trace.Ptr(max(w, *res.SentNs))
		}
	}()
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace0), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		res.Outcome, res.Error = trace.OutcomeNotSent, "not sent: the request could not be built: "+err.Error()
		return
	}
	// The fixed headers share their values: nothing writes to a request's
	// header values, and each Set would allocate them afresh.
	req.Header["Content-Type"] = jsonContentType
	if stream {
		req.Header["Accept"] = sseAccept
	}
	r.setHeaders(req)
	req.Header.Set("X-Request-Id", requestID)

	res.SentNs = trace.Ptr(r.clock())
	r.stats.sent.Add(1)
	after(r.opts.Timeout, errTotalTimeout)
	var firstToken *time.Timer
	if r.opts.FirstTokenTimeout > 0 && stream {
		firstToken = after(r.opts.FirstTokenTimeout, errFirstTokenTimeout)
	}
	if q != nil {
		if d, ok := r.behaviourMs("cancel_after_ms", q.CancelAfterMs, q.RequestID); ok {
			after(d, errWorkloadCancel)
		}
	}
	resp, err := r.roundTrip(req)
	if err != nil {
		r.classifyTransportError(ctx, err, res)
		return
	}
	// Drain what is left (the chunked terminator after [DONE], an error
	// body) before closing: a body closed unread makes net/http discard the
	// connection, and every request would then pay for a new dial.
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		resp.Body.Close()
	}()
	res.HTTPStatus = int32(max(0, min(resp.StatusCode, 999)))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		res.DoneNs = trace.Ptr(r.clock())
		res.Outcome = trace.OutcomeHTTPError
		res.Error = r.opts.httpStatusError(resp)
		msg := errorMessage(b)
		if msg != "" {
			res.Error += ": " + msg
		}
		res.FeaturesRefused = refusedBy(resp.StatusCode, msg, res.FeaturesSent)
		return
	}
	ct := resp.Header.Get("Content-Type")
	if stream && strings.HasPrefix(ct, "text/event-stream") {
		b := behaviour{firstToken: firstToken, cancel: func() { cancel(errWorkloadCancel) }, collect: collect,
			choices: slices.Contains(res.FeaturesSent, FeatureN)}
		if q != nil {
			if q.CancelAfterTokens != nil {
				b.cancelAfterTokens = *q.CancelAfterTokens
			}
			b.readDelay, _ = r.behaviourMs("read_delay_ms", q.ReadDelayMs, q.RequestID)
		}
		r.readStream(ctx, resp.Body, res, b)
	} else {
		r.readWhole(ctx, resp.Body, res, collect)
	}
}

// behaviour is the workload's client behaviour while reading a stream.
type behaviour struct {
	firstToken        *time.Timer   // stopped at the first token
	cancelAfterTokens int64         // cancel once this many token events arrived (0 = never)
	readDelay         time.Duration // wait before each socket read after the first
	cancel            func()
	collect           *[]byte // when set, the streamed text is appended here
	choices           bool    // n > 1 was sent: record each event's choice index
}

// usageCount is one count of a usage object, named by its JSON path.
type usageCount struct {
	name string
	v    int64
}

// impossibleUsage names a usage count no server can mean: negative, or
// above maxUsageTokens; "" when all are possible.
func impossibleUsage(counts ...usageCount) string {
	for _, c := range counts {
		if c.v < 0 || c.v > maxUsageTokens {
			return fmt.Sprintf("impossible usage: %s %d (must be 0 to %d)", c.name, c.v, maxUsageTokens)
		}
	}
	return ""
}

// honestEmpty reports whether a stream that ended (with [DONE], or closed
// after a finish reason) without a token event is an empty completion: the
// server gave a finish reason, and no usage claiming tokens. Otherwise
// nothing was generated that the client saw, and the response is no
// response.
func honestEmpty(res *trace.Result) bool {
	return res.ObservedFinishReason != "" && (res.UsageCompletionTokens == nil || *res.UsageCompletionTokens == 0)
}

// maxPresizedTokens bounds the token times allotted a stream before its
// first token: past it, they grow as they come.
const maxPresizedTokens = 4096

// maxTokenEvents bounds the token events recorded for one stream: a server
// that streams on past any max_tokens must not grow the result without end.
const maxTokenEvents = maxUsageTokens

// readStream consumes an SSE response.
func (r *Runner) readStream(ctx context.Context, body io.Reader, res *trace.Result, b behaviour) {
	sse := newSSEReader(ctx, body, r.clock, b.readDelay)
	defer sse.release()
	// The token times, sized for the answer the workload expects rather
	// than grown by doubling; a stream that ends well short of it keeps
	// an exact copy, and one without a token none.
	if n := min(res.OutputTokens, maxPresizedTokens); n > 0 {
		res.TokenTimesNs = make([]int64, 0, n)
		defer func() {
			switch {
			case len(res.TokenTimesNs) == 0:
				res.TokenTimesNs = nil
			case cap(res.TokenTimesNs) > 2*len(res.TokenTimesNs)+16:
				res.TokenTimesNs = slices.Clone(res.TokenTimesNs)
			}
		}()
	}
	var ev chunk.Event
	sent := *res.SentNs
	var events int64
	var lastUsage, finalUsage *int64
	for {
		data, at, err := sse.next()
		if err != nil {
			res.DoneNs = trace.Ptr(r.clock())
			switch {
			case errors.Is(err, io.EOF) && res.ObservedFinishReason != "":
				// The server closed after finishing without [DONE]: lenient.
				res.Outcome = trace.OutcomeOK
				if events == 0 && !honestEmpty(res) {
					res.Outcome, res.Error = trace.OutcomeProtocolError, "stream closed before any token, its usage claiming tokens"
				}
			case errors.Is(err, io.EOF):
				res.Outcome, res.Error = trace.OutcomeConnError, "stream ended before [DONE]"
			case errors.Is(err, errEventTooLong):
				res.Outcome, res.Error = trace.OutcomeProtocolError, err.Error()
			default:
				r.classifyTransportError(ctx, err, res)
			}
			break
		}
		if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
			res.DoneNs = trace.Ptr(at)
			res.Outcome = trace.OutcomeOK
			if events == 0 && !honestEmpty(res) {
				res.Outcome, res.Error = trace.OutcomeProtocolError, "stream ended with [DONE] before any token"
			}
			break
		}
		if err := chunk.Decode(data, &ev, b.collect != nil); err != nil {
			res.DoneNs = trace.Ptr(at)
			res.Outcome, res.Error = trace.OutcomeProtocolError, "malformed JSON in SSE event: "+shorten(err.Error())
			break
		}
		if ev.IsError {
			res.DoneNs = trace.Ptr(at)
			res.Outcome, res.Error = trace.OutcomeStreamError, "error in stream: "+shorten(ev.ErrMsg)
			break
		}
		if b.collect != nil {
			*b.collect = append(*b.collect, ev.Text...)
		}
		if ev.Choices > 0 && res.FirstChunkNs == nil {
			res.FirstChunkNs = trace.Ptr(at)
		}
		if ev.Content {
			if res.FirstTokenNs == nil {
				res.FirstTokenNs = trace.Ptr(at)
				if b.firstToken != nil {
					b.firstToken.Stop()
				}
			}
			if events >= maxTokenEvents {
				res.DoneNs = trace.Ptr(at)
				res.Outcome, res.Error = trace.OutcomeProtocolError, fmt.Sprintf("stream went on past %d token events", maxTokenEvents)
				break
			}
			if ev.Answer && res.FirstAnswerNs == nil {
				res.FirstAnswerNs = trace.Ptr(at)
			}
			res.TokenTimesNs = append(res.TokenTimesNs, at-sent)
			if b.choices {
				res.ChoiceIndex = append(res.ChoiceIndex, ev.Index)
			}
			events++
			if b.cancelAfterTokens > 0 && events >= b.cancelAfterTokens {
				b.cancel()
				res.DoneNs = trace.Ptr(r.clock())
				res.Outcome, res.Error = trace.OutcomeCancelled, fmt.Sprintf("cancelled after %d token events, as the workload asks", events)
				break
			}
		}
		if ev.Finish != "" {
			res.ObservedFinishReason = ev.Finish
		}
		// Usage from the chunk with empty choices is final; some servers
		// (Ollama) put zeros in every other chunk.
		if ev.HasUsage || ev.HasPromptTokens || ev.HasReasoningTokens {
			counts := []usageCount{{"usage.completion_tokens", ev.CompletionTokens}, {"usage.prompt_tokens", ev.PromptTokens},
				{"usage.completion_tokens_details.reasoning_tokens", ev.ReasoningTokens}}
			if why := impossibleUsage(counts...); why != "" {
				res.DoneNs = trace.Ptr(at)
				res.Outcome, res.Error = trace.OutcomeProtocolError, why
				res.UsageCompletionTokens, res.UsagePromptTokens, res.ObservedReasoningTokens = nil, nil, 0
				lastUsage, finalUsage = nil, nil
				break
			}
		}
		if ev.HasUsage && (ev.Choices == 0 || ev.CompletionTokens > 0) {
			res.UsageCompletionTokens = trace.Ptr(ev.CompletionTokens)
			res.UsagePromptTokens = nil
			if ev.HasPromptTokens {
				res.UsagePromptTokens = trace.Ptr(ev.PromptTokens)
			}
			if ev.HasReasoningTokens {
				res.ObservedReasoningTokens = ev.ReasoningTokens
			}
			if ev.Choices == 0 {
				finalUsage = res.UsageCompletionTokens
			}
			lastUsage = res.UsageCompletionTokens
		}
	}
	switch {
	case finalUsage != nil:
		res.ObservedOutputTokens = *finalUsage
	case lastUsage != nil:
		res.ObservedOutputTokens = *lastUsage
	default:
		res.ObservedOutputTokens = events
	}
}

// readWhole consumes a non-streamed JSON response. Without a stream there is
// no first-token time: only done_ns is set.
func (r *Runner) readWhole(ctx context.Context, body io.Reader, res *trace.Result, collect *[]byte) {
	b, err := io.ReadAll(io.LimitReader(body, maxWholeBody+1))
	res.DoneNs = trace.Ptr(r.clock())
	if err != nil {
		r.classifyTransportError(ctx, err, res)
		return
	}
	if len(b) > maxWholeBody {
		res.Outcome, res.Error = trace.OutcomeProtocolError, fmt.Sprintf("response body over %d MiB", maxWholeBody>>20)
		return
	}
	var c wholeResponse
	if err := json.Unmarshal(b, &c); err != nil {
		res.Outcome, res.Error = trace.OutcomeProtocolError, "malformed JSON response: "+shortJSONError(err)
		return
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		res.Outcome, res.Error = trace.OutcomeStreamError, "error in response: "+errorMessage(b)
		return
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil {
			res.ObservedFinishReason = *ch.FinishReason
		}
		if collect != nil {
			*collect = append(*collect, ch.Text...)
			if ch.Message != nil {
				*collect = append(*collect, ch.Message.Content...)
			}
		}
	}
	if u := c.Usage; u != nil {
		var counts []usageCount
		for _, c := range []struct {
			name string
			v    *int64
		}{{"usage.completion_tokens", u.CompletionTokens}, {"usage.prompt_tokens", u.PromptTokens}} {
			if c.v != nil {
				counts = append(counts, usageCount{c.name, *c.v})
			}
		}
		if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
			counts = append(counts, usageCount{"usage.completion_tokens_details.reasoning_tokens", *d.ReasoningTokens})
		}
		if why := impossibleUsage(counts...); why != "" {
			res.Outcome, res.Error = trace.OutcomeProtocolError, why
			return
		}
	}
	if u := c.Usage; u != nil && u.CompletionTokens != nil {
		res.UsageCompletionTokens, res.UsagePromptTokens = u.CompletionTokens, u.PromptTokens
		res.ObservedOutputTokens = *u.CompletionTokens
		if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
			res.ObservedReasoningTokens = *d.ReasoningTokens
		}
	}
	res.Outcome = trace.OutcomeOK
}

// classifyTransportError maps a transport failure to an outcome, using the
// cause when the request's own context ended it.
func (r *Runner) classifyTransportError(ctx context.Context, err error, res *trace.Result) {
	if res.DoneNs == nil {
		res.DoneNs = trace.Ptr(r.clock())
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errWorkloadCancel):
		res.Outcome, res.Error = trace.OutcomeCancelled, "cancelled after cancel_after_ms, as the workload asks"
	case errors.Is(cause, errTotalTimeout):
		res.Outcome, res.Error = trace.OutcomeTimeout, fmt.Sprintf("no complete response within %v", r.opts.Timeout)
	case errors.Is(cause, errFirstTokenTimeout):
		res.Outcome, res.Error = trace.OutcomeTimeout, fmt.Sprintf("no first token within %v", r.opts.FirstTokenTimeout)
	case errors.Is(cause, errInterrupted):
		res.Outcome, res.Error = trace.OutcomeConnError, errInterrupted.Error()
	case ctx.Err() != nil:
		res.Outcome, res.Error = trace.OutcomeConnError, "request aborted: "+shorten(cause.Error())
	case errors.Is(err, syscall.ECONNREFUSED):
		res.Outcome, res.Error = trace.OutcomeConnError, "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF):
		res.Outcome, res.Error = trace.OutcomeConnError, "connection reset"
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			res.Outcome, res.Error = trace.OutcomeTimeout, "connect timeout: "+shorten(err.Error())
			return
		}
		res.Outcome, res.Error = trace.OutcomeConnError, shorten(err.Error())
	}
}

// sleepCtx sleeps for d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func shortJSONError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	return shorten(err.Error())
}

// session is the conversation so far of a multi-turn session: the prompts
// sent and the text the server actually returned. It passes from each turn
// to the next, never shared by two goroutines at once.
type session struct {
	messages []chatMessage
	tokens   int64 // tokens of all messages' content, chat template not counted
	// uncounted is the last reply, not yet in tokens: it is counted when a
	// next turn is built, so a session of one turn costs no count.
	uncounted string
}

// send materializes one request and exchanges it, filling res. Without a
// session (or on its first turn) the prompt has exactly input_tokens tokens,
// built from the request's prefix blocks. A later turn carries the session's
// history and a new user message of input_tokens minus the history's tokens
// (at least 1); prompt_tokens_sent records what was really sent.
func (r *Runner) send(ctx context.Context, q *trace.Request, res *trace.Result, sess *session) {
	r.sendBuilt(ctx, q, res, sess, r.build(q, sess))
}

// outgoing is a request built and ready to send: its body and what the
// result records of it, or why it cannot be sent.
type outgoing struct {
	api, model       string
	stream           bool
	body             []byte
	promptTokensSent int64
	notSent          string
	// The features sent and stripped (contract.go).
	sent, stripped []string
	// The turn's prompt and the history it followed, for the session.
	prompt                   string
	history                  []chatMessage
	historyTokens, newTokens int64
}

// build makes q's request body: the prompt (after sess's history), the
// model, sampling and stream options. It does the client's heavy work
// (a prompt of input_tokens tokens, its JSON), so the scheduler can run it
// ahead of the send time (prefetch), and a session's next turn after the
// reply, before its think time.
func (r *Runner) build(q *trace.Request, sess *session) *outgoing {
	o := &outgoing{api: q.API}
	if r.opts.API != "" {
		o.api = r.opts.API
	}
	if o.api == "" {
		o.api = trace.APIChat
	}
	o.stream = q.Stream
	switch r.opts.Stream {
	case StreamOn:
		o.stream = true
	case StreamOff:
		o.stream = false
	}
	o.model = q.Model
	if mapped, ok := r.opts.ModelMap[o.model]; ok {
		o.model = mapped
	}
	if r.opts.Model != "" {
		o.model = r.opts.Model
	}
	if o.model == "" {
		o.model = r.defaultModel
	}
	c, err := r.buildContract(q, o.api)
	if err != nil {
		o.notSent = "not sent: the request's " + err.Error()
		return o
	}
	o.sent, o.stripped = c.sent, c.stripped
	if c.model != "" {
		o.model = c.model
	}
	// The prompt's text is what the images, clips and tool definitions
	// leave of input_tokens, so a server that counts them into the prompt
	// (as the simulator does) reports the trace's input length.
	extra := c.mediaTokens + c.toolTokens
	text := q.InputTokens - extra
	if extra > 0 && text < 1 {
		r.notes.add("requests whose images, audio and tools take more tokens than the recorded input were sent a 1-token text", q.RequestID)
		text = 1
	}
	o.newTokens = text
	if sess != nil && len(sess.messages) > 0 {
		if sess.uncounted != "" {
			sess.tokens += int64(max(0, r.prompt.Counter().Count(sess.uncounted)))
			sess.uncounted = ""
		}
		o.history, o.historyTokens = sess.messages, sess.tokens
		o.newTokens = max(1, text-o.historyTokens)
		o.prompt, err = r.prompt.Prompt(o.newTokens, nil, tokenize.SeedFor(q.RequestID))
	} else {
		o.prompt, err = r.prompt.Prompt(text, q.PrefixBlocks, tokenize.SeedFor(q.RequestID))
	}
	if err == nil && o.historyTokens+o.newTokens > tokenize.MaxPromptTokens {
		err = fmt.Errorf("the session's history of %d tokens and this turn's %d are %w", o.historyTokens, o.newTokens, tokenize.ErrTooManyTokens)
	}
	if err != nil {
		o.notSent = "not sent: the prompt could not be built: " + err.Error()
		return o
	}
	o.promptTokensSent = o.historyTokens + max(0, o.newTokens) + extra
	for _, f := range []struct {
		name string
		v    *float64
	}{{"temperature", q.Temperature}, {"top_p", q.TopP}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			o.notSent = fmt.Sprintf("not sent: %s %v cannot be encoded in JSON", f.name, *f.v)
			return o
		}
	}
	maxTokens := q.MaxTokens
	if maxTokens <= 0 {
		maxTokens = max(q.OutputTokens, 1)
	}
	body := requestBody{Model: o.model, MaxTokens: maxTokens, Stream: o.stream, Temperature: q.Temperature, TopP: q.TopP,
		IgnoreEOS: r.opts.IgnoreEOS || r.opts.ForceOutputLen}
	if r.opts.ForceOutputLen {
		body.MinTokens = maxTokens
	}
	body.setContract(c, o.api)
	if o.stream {
		body.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	encode := func(prompt string) ([]byte, error) {
		if o.api == trace.APIChat {
			body.Messages = make([]any, 0, len(o.history)+1)
			for _, m := range o.history {
				body.Messages = append(body.Messages, m)
			}
			if len(c.parts) > 0 {
				parts := append([]contentPart{{Type: "text", Text: prompt}}, c.parts...)
				body.Messages = append(body.Messages, partsMessage{Role: "user", Content: parts})
			} else {
				body.Messages = append(body.Messages, chatMessage{Role: "user", Content: prompt})
			}
		} else {
			var sb strings.Builder
			for _, m := range o.history {
				sb.WriteString(m.Content)
			}
			sb.WriteString(prompt)
			p := sb.String()
			body.Prompt = &p
		}
		return json.Marshal(body)
	}
	// A body of the plain fields alone is written directly; in any other,
	// a long prompt the builder vouches for is spliced into the encoded
	// body in place of a marker (see splicePrompt).
	if fastBodies && len(o.history) == 0 && len(c.parts) == 0 {
		if b, ok := appendPlainBody(make([]byte, 0, len(o.model)+len(o.prompt)+plainBodyFields), &body, o.api == trace.APIChat, o.prompt, r.prompt.PlainJSON()); ok {
			o.body = b
			return o
		}
	}
	if fastBodies && r.prompt.PlainJSON() && len(o.prompt) >= spliceMin && (o.api == trace.APIChat || len(o.history) == 0) {
		if b, err := encode(promptMarker); err == nil {
			if o.body = splicePrompt(b, o.prompt); o.body != nil {
				return o
			}
		}
	}
	if o.body, err = encode(o.prompt); err != nil {
		o.notSent = "not sent: the request could not be encoded: " + err.Error()
	}
	return o
}

// Splicing a long prompt: encoding/json checks each byte of a string for
// escaping, about a millisecond for a 128k-token prompt, which a replay of
// long prompts pays per request on the cores the sends need. A prompt
// from a builder whose words need no escaping (PlainJSON) is encoded as
// promptMarker instead and copied in its place: the body is byte for byte
// what encoding/json writes (TestSplicedBodyIsMarshaled).
const (
	// promptMarker cannot stand in any other string of a body: trace
	// strings hold no control characters (trace.Request.Validate), and
	// the contract's are servetrace's own.
	promptMarker = "\x00servetrace-prompt\x00"
	// spliceMin is the shortest prompt spliced.
	spliceMin = 4 << 10
)

// promptMarkerJSON is promptMarker as encoding/json writes it.
var promptMarkerJSON = []byte(`\u0000servetrace-prompt\u0000`)

// fastBodies turns on appendPlainBody and splicing; tests turn them off
// for reference.
var fastBodies = true

// splicePrompt returns body with its one promptMarker replaced by prompt,
// or nil if the marker is not there exactly once (a string of the body
// held it too), for the caller to encode the body whole.
func splicePrompt(body []byte, prompt string) []byte {
	i := bytes.Index(body, promptMarkerJSON)
	if i < 0 || bytes.Contains(body[i+len(promptMarkerJSON):], promptMarkerJSON) {
		return nil
	}
	out := make([]byte, 0, len(body)-len(promptMarkerJSON)+len(prompt))
	out = append(out, body[:i]...)
	out = append(out, prompt...)
	return append(out, body[i+len(promptMarkerJSON):]...)
}

// sendBuilt sends a built request and records it in res; with sess, the
// turn and its reply join the session's history.
func (r *Runner) sendBuilt(ctx context.Context, q *trace.Request, res *trace.Result, sess *session, o *outgoing) {
	res.API, res.Stream, res.Model = o.api, o.stream, o.model
	res.FeaturesSent, res.FeaturesStripped = o.sent, o.stripped
	if o.notSent != "" {
		// Never sent: no feature was sent or stripped (run.json counts
		// the requests that went out).
		res.FeaturesSent, res.FeaturesStripped = nil, nil
		res.Outcome, res.Error = trace.OutcomeNotSent, o.notSent
		if o.promptTokensSent > 0 {
			res.PromptTokensSent = o.promptTokensSent
		}
		return
	}
	res.PromptTokensSent = o.promptTokensSent
	var reply []byte
	var collect *[]byte
	if sess != nil {
		collect = &reply
	}
	r.exchange(ctx, q, o.body, o.stream, res, collect)
	if sess != nil {
		text := string(reply)
		sess.messages = append(o.history, chatMessage{Role: "user", Content: o.prompt}, chatMessage{Role: "assistant", Content: text})
		sess.tokens, sess.uncounted = o.historyTokens+o.newTokens, text
	}
}
