package analyze

import (
	"math"
	"strconv"

	"github.com/servetrace/servetrace/trace"
)

// appendColumns appends o's rows to c.
func (c *resultColumns) appendColumns(o *resultColumns) {
	if len(c.tokenOffsets) == 0 {
		c.tokenOffsets, c.featureOffsets, c.prefixOffsets = []int64{0}, []int64{0}, []int64{0}
	}
	shift := func(dst *[]int64, offs []int64, base int64) {
		for _, o := range offs[1:] {
			*dst = append(*dst, base+o)
		}
	}
	shift(&c.tokenOffsets, o.tokenOffsets, int64(len(c.tokenTimes)))
	shift(&c.featureOffsets, o.featureOffsets, int64(len(c.features)))
	shift(&c.prefixOffsets, o.prefixOffsets, int64(len(c.prefixBlocks)))
	c.tokenTimes = append(c.tokenTimes, o.tokenTimes...)
	c.features = append(c.features, o.features...)
	c.prefixBlocks = append(c.prefixBlocks, o.prefixBlocks...)
	c.warmup, c.stream, c.outcome = append(c.warmup, o.warmup...), append(c.stream, o.stream...), append(c.outcome, o.outcome...)
	c.scheduled, c.admitted, c.sent = append(c.scheduled, o.scheduled...), append(c.admitted, o.admitted...), append(c.sent, o.sent...)
	c.firstChunk, c.firstToken, c.done = append(c.firstChunk, o.firstChunk...), append(c.firstToken, o.firstToken...), append(c.done, o.done...)
	c.usagePrompt, c.observedOut, c.promptSent = append(c.usagePrompt, o.usagePrompt...), append(c.observedOut, o.observedOut...), append(c.promptSent, o.promptSent...)
	c.tenant, c.model, c.adapter, c.phase = append(c.tenant, o.tenant...), append(c.model, o.model...), append(c.adapter, o.adapter...), append(c.phase, o.phase...)
	c.finishReason, c.turn, c.status = append(c.finishReason, o.finishReason...), append(c.turn, o.turn...), append(c.status, o.status...)
	if c.wantIDs {
		c.requestID = append(c.requestID, o.requestID...)
	}
	c.inputTokens, c.requestedOutput, c.maxTokens = append(c.inputTokens, o.inputTokens...), append(c.requestedOutput, o.requestedOutput...), append(c.maxTokens, o.maxTokens...)
	c.firstAnswer, c.reasoning = append(c.firstAnswer, o.firstAnswer...), append(c.reasoning, o.reasoning...)
	for k := range c.contract {
		l, ol := &c.contract[k], &o.contract[k]
		if len(l.offs) == 0 {
			l.offs = []int64{0}
		}
		shift(&l.offs, ol.offs, int64(len(l.vals)))
		l.vals = append(l.vals, ol.vals...)
	}
	c.n += o.n
}

// VLLMFormat returns the report under the JSON field names of `vllm bench
// serve` results, so dashboards built on them keep working. Latencies are
// in ms; percentiles are named p50, p99, p99.9 as vLLM names them.
func VLLMFormat(rep *Report) map[string]any {
	out := map[string]any{
		"duration":               rep.Throughput.DurationS,
		"completed":              rep.Requests.Outcomes[trace.OutcomeOK],
		"failed":                 rep.Requests.Counted - rep.Requests.Outcomes[trace.OutcomeOK],
		"total_input_tokens":     int64(math.Round(rep.Throughput.InputTokens)),
		"total_output_tokens":    int64(math.Round(rep.Throughput.OutputTokens)),
		"request_throughput":     rep.Throughput.RequestsPerS,
		"output_throughput":      rep.Throughput.OutputTokensPerS,
		"total_token_throughput": rep.Throughput.TotalTokensPerS,
		"request_goodput":        nil,
	}
	if rep.Goodput != nil {
		out["request_goodput"] = rep.Goodput.RequestsPerS
	}
	for name, key := range map[string]string{"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"} {
		d, ok := rep.Metrics[name]
		if !ok || d.N == 0 {
			continue
		}
		out["mean_"+key+"_ms"] = d.Mean
		out["std_"+key+"_ms"] = d.Std
		out["median_"+key+"_ms"] = d.Median
		for _, q := range d.Quantiles {
			out["p"+strconv.FormatFloat(q.P, 'f', -1, 64)+"_"+key+"_ms"] = q.Value
		}
	}
	return out
}
