package analyze

import (
	"math"
	"strconv"

	"github.com/servetrace/servetrace/trace"
)

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
