package peer

import (
	"encoding/json"
	"regexp"
	"strings"
)

// sglangFigure matches the aggregate fields SGLang's bench_serving writes.
var sglangFigure = regexp.MustCompile(`^((mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2e_latency)_ms|request_throughput|input_throughput|output_throughput|output_throughput_retokenized|total_throughput|duration|completed|total_input_tokens|total_output_tokens|total_output_tokens_retokenized|concurrency|accept_length)$`)

func init() {
	register(format{tool: "SGLang bench_serving", match: isSGLang, read: readSGLang})
}

// isSGLang tells SGLang's result by the fields only it writes: the
// retokenized output counts and e2e_latency (vLLM says e2el).
func isSGLang(obj map[string]json.RawMessage) bool {
	return hasAny(obj, "total_output_tokens_retokenized", "output_throughput_retokenized", "mean_e2e_latency_ms")
}

// readSGLang reads one SGLang bench_serving run (one line of its JSONL
// output file). With --output-details it holds vLLM's per-request lists
// (input_lens, output_lens, ttfts, itls, errors), read as vLLM's are.
func readSGLang(obj map[string]json.RawMessage, src string) ([]Run, error) {
	runs, err := readVLLM(obj, src)
	if err != nil {
		return nil, err
	}
	for i := range runs {
		r := &runs[i]
		r.Tool, r.ID, r.Figures = "SGLang bench_serving", runID("sglang", src), figures(obj, sglangFigure)
		var model string
		if json.Unmarshal(obj["model_id"], &model) != nil || model == "" {
			_ = json.Unmarshal(obj["model"], &model)
		}
		r.Model = model
		if r.Remedy != "" {
			r.Remedy = "rerun bench_serving with --output-details"
		}
		for j, n := range r.Notes {
			r.Notes[j] = strings.Replace(n, "vllm bench serve without --save-detailed", "bench_serving without --output-details", 1)
		}
	}
	return runs, nil
}
