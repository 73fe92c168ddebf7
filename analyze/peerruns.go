package analyze

import (
	"cmp"
	"fmt"
	"math"
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

// peerRunColumns converts a peer run's requests into result columns, so
// they get the same metrics and intervals as a servetrace run. Per
// request: sent at its send time, first token at TTFT, one token event
// per gap, done at the tool's own latency when it recorded one, else at
// the last event.
func peerRunColumns(r peer.Run) (*resultColumns, RunSummary) {
	n := len(r.Requests)
	c := &resultColumns{n: n, tokenOffsets: []int64{0}, featureOffsets: []int64{0}, prefixOffsets: []int64{0}}
	for k := range c.contract {
		c.contract[k].offs = make([]int64, n+1) // no peer tool records features
	}
	c.firstAnswer, c.reasoning = make([]int64, n), make([]int64, n)
	for i := range n {
		c.firstAnswer[i] = null
	}
	for i, q := range r.Requests {
		sent := q.SentNs
		c.warmup, c.stream = append(c.warmup, q.Warmup), append(c.stream, q.Streamed)
		c.scheduled, c.admitted, c.sent = append(c.scheduled, sent), append(c.admitted, sent), append(c.sent, sent)
		c.usagePrompt = append(c.usagePrompt, null)
		in := max(q.InputTokens, 0)
		c.promptSent, c.inputTokens = append(c.promptSent, in), append(c.inputTokens, in)
		c.requestedOutput, c.maxTokens = append(c.requestedOutput, max(q.OutputTokens, 0)), append(c.maxTokens, 0)
		c.tenant, c.model, c.adapter, c.phase = append(c.tenant, ""), append(c.model, r.Model), append(c.adapter, ""), append(c.phase, "")
		c.finishReason, c.turn = append(c.finishReason, ""), append(c.turn, 0)
		c.requestID = append(c.requestID, strconv.Itoa(i))
		c.featureOffsets, c.prefixOffsets = append(c.featureOffsets, 0), append(c.prefixOffsets, 0)
		if !q.OK {
			c.status = append(c.status, int64(q.Status)) // 0 where the tool kept only the error text
			c.outcome = append(c.outcome, peerOutcome(q))
			c.firstChunk, c.firstToken, c.done = append(c.firstChunk, null), append(c.firstToken, null), append(c.done, null)
			c.observedOut = append(c.observedOut, 0)
			c.tokenOffsets = append(c.tokenOffsets, int64(len(c.tokenTimes)))
			continue
		}
		c.status = append(c.status, int64(cmp.Or(q.Status, 200)))
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
		if q.E2ENs >= 0 {
			last = sent + q.E2ENs
		}
		c.done = append(c.done, last)
	}
	sum := RunSummary{Dir: r.Source, RunID: r.ID, Tool: r.Tool, noTiming: r.NoTiming, Complete: true, Target: peerTarget(r), AllAtOnce: r.AllAtOnce, OfferedRate: r.OfferedRate}
	if r.DurationS > 0 {
		completed := r.Completed
		if completed < 0 {
			completed = int64(n - r.Failed())
		}
		sum.AchievedRate = float64(completed) / r.DurationS
		sum.fileDurationS = r.DurationS
	}
	return c, sum
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

// peerMeanNotes compares the means this analysis computes from a run's
// records with the tool's own, and says where they differ by more than
// 1%: a tool that counts TPOT from its own end-of-stream time (vLLM
// does) gives a different mean than its token events do.
func peerMeanNotes(r peer.Run) []string {
	var notes []string
	for _, m := range []struct {
		metric, why, name string
		of                func(q peer.Request) (float64, bool)
	}{
		{"TTFT", "its records are rounded or cut", "mean_ttft_ms", func(q peer.Request) (float64, bool) { return nsToMs(q.TTFTNs), q.TTFTNs >= 0 }},
		{"TPOT", "the tool counts it from its own end-of-request time, which its records do not hold", "mean_tpot_ms", func(q peer.Request) (float64, bool) {
			if q.TTFTNs < 0 || q.OutputTokens < 2 {
				return 0, false
			}
			return nsToMs(peerLastEvent(q)-q.TTFTNs) / float64(q.OutputTokens-1), true
		}},
	} {
		given, ok := r.Figure(m.name)
		if !ok || given <= 0 {
			continue
		}
		s, k := 0.0, 0
		for _, q := range r.Requests {
			if v, ok := m.of(q); ok && q.OK {
				s, k = s+v, k+1
			}
		}
		if k == 0 {
			continue
		}
		if ours := s / float64(k); math.Abs(ours-given) > 0.01*given {
			notes = append(notes, fmt.Sprintf("%s: mean %s %.2f ms from its records, where the file says %.2f ms (%+.1f%%): %s",
				r.Source, m.metric, ours, given, 100*(ours-given)/given, m.why))
		}
	}
	return notes
}

// peerLastEvent is a request's time of its last token event, or its
// latency when the tool recorded one, relative to its send.
func peerLastEvent(q peer.Request) int64 {
	if q.E2ENs >= 0 {
		return q.E2ENs
	}
	t := q.TTFTNs
	for _, g := range q.GapsNs {
		t += g
	}
	return t
}
