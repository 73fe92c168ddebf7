package analyze

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/analyze/peer"
	"github.com/servetrace/servetrace/trace"
)

// GivenRun is a peer tool's summary-only result: the tool's own figures,
// reported as given, since without per-request data no interval can be
// computed.
type GivenRun struct {
	Source  string        `json:"source"`
	Tool    string        `json:"tool"`
	Model   string        `json:"model,omitempty"`
	Figures []peer.Figure `json:"figures"`
	// Remedy says where per-request data would come from.
	Remedy string `json:"remedy,omitempty"`
}

// appendPeer appends a batch of a peer run's requests as result rows, so
// they get the same metrics and intervals as a servetrace run; first is
// the run's index of the batch's first request. Per request: sent at its
// send time, first token at TTFT, one token event per gap, done at the
// tool's own latency when it recorded one, else at the last event; a
// latency the checks left out leaves the end unknown.
func (c *resultColumns) appendPeer(r *peer.Run, qs []peer.Request, first int) {
	if len(c.tokenOffsets) == 0 {
		c.tokenOffsets, c.featureOffsets, c.prefixOffsets = append(c.tokenOffsets, 0), append(c.featureOffsets, 0), append(c.prefixOffsets, 0)
	}
	for k := range c.contract {
		if len(c.contract[k].offs) == 0 {
			c.contract[k].offs = append(c.contract[k].offs, 0)
		}
	}
	for i, q := range qs {
		sent := q.SentNs
		c.warmup, c.stream = append(c.warmup, q.Warmup), append(c.stream, q.Streamed)
		c.scheduled, c.admitted, c.sent = append(c.scheduled, sent), append(c.admitted, sent), append(c.sent, sent)
		c.usagePrompt = append(c.usagePrompt, null)
		in := max(q.InputTokens, 0)
		c.promptSent, c.inputTokens = append(c.promptSent, in), append(c.inputTokens, in)
		c.requestedOutput, c.maxTokens = append(c.requestedOutput, max(q.OutputTokens, 0)), append(c.maxTokens, 0)
		if !c.lean {
			c.tenant, c.model, c.adapter, c.phase = append(c.tenant, ""), append(c.model, r.Model), append(c.adapter, ""), append(c.phase, "")
			c.turn = append(c.turn, 0)
		}
		c.finishReason = append(c.finishReason, "")
		if c.wantIDs {
			c.requestID = append(c.requestID, strconv.Itoa(first+i))
		}
		c.featureOffsets, c.prefixOffsets = append(c.featureOffsets, int64(len(c.features))), append(c.prefixOffsets, int64(len(c.prefixBlocks)))
		for k := range c.contract { // no peer tool records features
			c.contract[k].offs = append(c.contract[k].offs, int64(len(c.contract[k].vals)))
		}
		c.firstAnswer, c.reasoning, c.usageCached = append(c.firstAnswer, null), append(c.reasoning, 0), append(c.usageCached, null)
		if !q.OK {
			if !c.lean {
				c.status = append(c.status, int64(q.Status)) // 0 where the tool kept only the error text
			}
			c.outcome = append(c.outcome, peerOutcome(q))
			c.firstChunk, c.firstToken, c.done = append(c.firstChunk, null), append(c.firstToken, null), append(c.done, null)
			c.observedOut = append(c.observedOut, 0)
			c.tokenOffsets = append(c.tokenOffsets, int64(len(c.tokenTimes)))
			continue
		}
		if !c.lean {
			c.status = append(c.status, int64(cmp.Or(q.Status, 200)))
		}
		c.outcome = append(c.outcome, trace.OutcomeOK)
		c.observedOut = append(c.observedOut, max(q.OutputTokens, 0))
		last := sent
		if q.TTFTNs >= 0 {
			t := sent + q.TTFTNs
			c.firstChunk, c.firstToken = append(c.firstChunk, t), append(c.firstToken, t)
			c.tokenTimes = append(c.tokenTimes, t-sent)
			for _, g := range q.GapsNs {
				t += g
				c.tokenTimes = append(c.tokenTimes, t-sent)
			}
			last = t
		} else {
			c.firstChunk, c.firstToken = append(c.firstChunk, null), append(c.firstToken, null)
		}
		c.tokenOffsets = append(c.tokenOffsets, int64(len(c.tokenTimes)))
		switch {
		case q.EndUnknown:
			last = null
		case q.E2ENs >= 0:
			last = sent + q.E2ENs
		}
		c.done = append(c.done, last)
	}
	c.n += len(qs)
}

// peerRunSummary is what a peer run's file says of it.
func peerRunSummary(r *peer.Run) RunSummary {
	sum := RunSummary{Dir: r.Source, RunID: r.ID, Tool: r.Tool, noTiming: r.NoTiming, Complete: true, Target: peerTarget(*r), AllAtOnce: r.AllAtOnce, OfferedRate: r.OfferedRate}
	if r.DurationS > 0 {
		completed := r.Completed
		if completed < 0 {
			completed = r.Records - r.FailedRecords
		}
		sum.AchievedRate = float64(completed) / r.DurationS
		sum.fileDurationS = r.DurationS
	}
	return sum
}

// peerOutcome classes a failed peer request: cancelled as the tool says,
// an HTTP error where it kept a status, else by its error text (peer tools
// keep the exception: aiohttp's ServerTimeoutError, ClientConnectorError).
func peerOutcome(q peer.Request) string {
	e := strings.ToLower(q.Error)
	switch {
	case q.Cancelled:
		return trace.OutcomeCancelled
	case q.Status >= 400:
		return trace.OutcomeHTTPError
	case strings.Contains(e, "timeout") || strings.Contains(e, "timed out"):
		return trace.OutcomeTimeout
	case strings.Contains(e, "connect") || strings.Contains(e, "connection") || strings.Contains(e, "reset by peer") || strings.Contains(e, "refused"):
		return trace.OutcomeConnError
	}
	return trace.OutcomeHTTPError
}

// peerTarget names what a peer run measured, as the tool said it.
func peerTarget(r peer.Run) string {
	switch {
	case r.Backend != "" && r.Model != "":
		return r.Backend + " " + r.Model
	case r.Model != "":
		return r.Model
	}
	return r.Backend
}
