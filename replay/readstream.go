package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/servetrace/servetrace/replay/chunk"
	"github.com/servetrace/servetrace/trace"
)

// behaviour is the workload's client behaviour while reading a stream.
type behaviour struct {
	firstToken        *time.Timer   // stopped at the first token
	cancelAfterTokens int64         // cancel once this many token events arrived (0 = never)
	readDelay         time.Duration // wait before each socket read after the first
	cancel            func()
	collect           *[]byte       // when set, the streamed text is appended here
	hashes            *outputHashes // each choice's text is fingerprinted here
	choices           bool          // n > 1 was sent: record each event's choice index
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

// maxKeptReply bounds the text of an answer kept for what follows it: a
// session's next turn or a graph's children continue the conversation
// with it, and a probe is graded on it. A longer answer is kept cut to
// its first maxKeptReply bytes (noted by sendBuilt).
const maxKeptReply = 1 << 20

// keepReply appends what of text fits under maxKeptReply to reply.
func keepReply(reply *[]byte, text []byte) {
	if room := maxKeptReply - len(*reply); room > 0 {
		*reply = append(*reply, text[:min(room, len(text))]...)
	}
}

// trimPartialRune drops the start of a rune the cut at maxKeptReply left
// at the end of reply.
func trimPartialRune(reply []byte) []byte {
	for i := len(reply) - 1; i >= 0 && i >= len(reply)-utf8.UTFMax; i-- {
		if utf8.RuneStart(reply[i]) {
			if !utf8.FullRune(reply[i:]) {
				return reply[:i]
			}
			break
		}
	}
	return reply
}

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
	var events, text int64
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
		if err := chunk.Decode(data, &ev); err != nil {
			res.DoneNs = trace.Ptr(at)
			res.Outcome, res.Error = trace.OutcomeProtocolError, "malformed JSON in SSE event: "+shorten(err.Error())
			break
		}
		if ev.IsError {
			res.DoneNs = trace.Ptr(at)
			res.Outcome, res.Error = trace.OutcomeStreamError, "error in stream: "+shorten(ev.ErrMsg)
			break
		}
		if text += int64(len(ev.Text)); text > maxAnswerText {
			res.DoneNs = trace.Ptr(at)
			res.Outcome, res.Error = trace.OutcomeProtocolError, fmt.Sprintf("answer text went on past %d MiB", maxAnswerText>>20)
			break
		}
		if b.collect != nil {
			keepReply(b.collect, ev.Text)
		}
		b.hashes.add(&ev)
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
		if ev.HasUsage || ev.HasPromptTokens || ev.HasReasoningTokens || ev.HasCachedTokens {
			counts := []usageCount{{"usage.completion_tokens", ev.CompletionTokens}, {"usage.prompt_tokens", ev.PromptTokens},
				{"usage.completion_tokens_details.reasoning_tokens", ev.ReasoningTokens}, {"usage.prompt_tokens_details.cached_tokens", ev.CachedTokens}}
			if why := impossibleUsage(counts...); why != "" {
				res.DoneNs = trace.Ptr(at)
				res.Outcome, res.Error = trace.OutcomeProtocolError, why
				res.UsageCompletionTokens, res.UsagePromptTokens, res.UsageCachedTokens, res.ObservedReasoningTokens = nil, nil, nil, 0
				lastUsage, finalUsage = nil, nil
				break
			}
		}
		if ev.HasUsage && (ev.Choices == 0 || ev.CompletionTokens > 0) {
			res.UsageCompletionTokens = trace.Ptr(ev.CompletionTokens)
			res.UsagePromptTokens, res.UsageCachedTokens = nil, nil
			if ev.HasPromptTokens {
				res.UsagePromptTokens = trace.Ptr(ev.PromptTokens)
			}
			if ev.HasCachedTokens {
				res.UsageCachedTokens = trace.Ptr(ev.CachedTokens)
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
func (r *Runner) readWhole(ctx context.Context, body io.Reader, res *trace.Result, collect *[]byte, hashes *outputHashes) {
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
		text := ch.Text
		if ch.Message != nil {
			text += ch.Message.Content
		}
		hashes.write(ch.Index, []byte(text))
		if collect != nil {
			keepReply(collect, []byte(text))
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
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			counts = append(counts, usageCount{"usage.prompt_tokens_details.cached_tokens", *d.CachedTokens})
		}
		if why := impossibleUsage(counts...); why != "" {
			res.Outcome, res.Error = trace.OutcomeProtocolError, why
			return
		}
	}
	if u := c.Usage; u != nil && u.CompletionTokens != nil {
		res.UsageCompletionTokens, res.UsagePromptTokens = u.CompletionTokens, u.PromptTokens
		if d := u.PromptTokensDetails; d != nil {
			res.UsageCachedTokens = d.CachedTokens
		}
		res.ObservedOutputTokens = *u.CompletionTokens
		if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
			res.ObservedReasoningTokens = *d.ReasoningTokens
		}
	}
	res.Outcome = trace.OutcomeOK
}

// maxPresizedTokens bounds the token times allotted a stream before its
// first token: past it, they grow as they come.
const maxPresizedTokens = 4096

// maxTokenEvents bounds the token events recorded for one stream, each an
// entry of its row's lists: a server that streams on past any max_tokens
// must not grow the result without end.
const maxTokenEvents = maxRowList

// maxAnswerText bounds the text of one streamed answer, its choices
// together: a session or graph keeps it for the next prompt, and a server
// that streams on must not make the client hash text for ever.
const maxAnswerText = 16 << 20
