package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/replay/scrub"
	"github.com/servetrace/servetrace/trace"
)

// wholeResponse is a non-streamed completions or chat response.
type wholeResponse struct {
	Choices []struct {
		Index        int32   `json:"index"`
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
		PromptTokensDetails *struct {
			CachedTokens *int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
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

// shorten collapses white space and clips s to scrubWindow bytes.
func shorten(s string) string { return shortenTo(s, scrubWindow) }

func shortenTo(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
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
			res.Error = strings.ToValidUTF8(shortenTo(scrub.Message(res.Error, body, r.scrub), maxErrorText), "")
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
	// W3C trace context, so the server's span of this request carries an
	// id analyze can recompute from the result row (internal/traceid).
	req.Header["Traceparent"] = []string{traceid.Traceparent(r.opts.RunID, res.RequestID)}
	r.spans.expect(res.RequestID)

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
	hashes := newOutputHashes(r.answerKey, res.N)
	if greedy(res) {
		hashes.withEvents(r.eventKey)
	}
	if stream && strings.HasPrefix(ct, "text/event-stream") {
		b := behaviour{firstToken: firstToken, cancel: func() { cancel(errWorkloadCancel) }, collect: collect,
			choices: slices.Contains(res.FeaturesSent, FeatureN), hashes: hashes}
		if q != nil {
			if q.CancelAfterTokens != nil {
				b.cancelAfterTokens = *q.CancelAfterTokens
			}
			b.readDelay, _ = r.behaviourMs("read_delay_ms", q.ReadDelayMs, q.RequestID)
		}
		r.readStream(ctx, resp.Body, res, b)
	} else {
		r.readWhole(ctx, resp.Body, res, collect, hashes)
	}
	if res.Outcome == trace.OutcomeOK {
		res.OutputHashes, res.OutputEventHashes = hashes.sums(), hashes.eventSums
	} else {
		hashes.release()
	}
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

// sendBuilt sends a built request and records it in res; with sess, the
// turn and its reply join the session's history. A probe's answer is
// returned for the collector to grade, off the send path.
func (r *Runner) sendBuilt(ctx context.Context, q *trace.Request, res *trace.Result, sess *session, o *outgoing) (probeAnswer []byte) {
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
		return nil
	}
	res.PromptTokensSent = o.promptTokensSent
	var reply []byte
	var collect *[]byte
	if sess != nil || o.probe != nil {
		collect = &reply
	}
	r.exchange(ctx, q, o.body, o.stream, res, collect)
	if o.probe != nil {
		return reply
	}
	if len(reply) >= maxKeptReply {
		r.notes.add(fmt.Sprintf("answers over %d MiB were kept cut to their first %d MiB for the turn or requests that continue them", maxKeptReply>>20, maxKeptReply>>20), q.RequestID)
		reply = trimPartialRune(reply)
	}
	if sess != nil {
		text := string(reply)
		sess.record(o.histLink, o.prompt, text, o.historyTokens, o.newTokens)
	}
	return nil
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

// Reasons a request's context ends early; the outcome follows the cause.
var (
	errWorkloadCancel    = errors.New("cancelled by the workload's client behaviour")
	errFirstTokenTimeout = errors.New("first-token timeout")
	errTotalTimeout      = errors.New("total timeout")
	errInterrupted       = errors.New("run interrupted before the response finished")
)
