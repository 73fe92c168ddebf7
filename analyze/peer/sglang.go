package peer

import (
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
func isSGLang(o object) bool {
	return o.hasAny("total_output_tokens_retokenized", "output_throughput_retokenized", "mean_e2e_latency_ms")
}

// readSGLang reads one SGLang bench_serving run (one line of its JSONL
// output file). With --output-details it holds vLLM's per-request lists
// (input_lens, output_lens, ttfts, itls, errors), read as vLLM's are.
func readSGLang(o object) ([]Run, error) {
	runs, err := readVLLM(o)
	if err != nil {
		return nil, err
	}
	for i := range runs {
		r := &runs[i]
		r.Tool, r.ID, r.Figures = "SGLang bench_serving", runID("sglang", o.src), figures(o, sglangFigure)
		model := o.str("model_id")
		if model == "" {
			model = o.str("model")
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
