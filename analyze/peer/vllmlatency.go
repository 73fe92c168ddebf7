package peer

import (
	"fmt"
	"sort"
	"strconv"
)

// `vllm bench latency --output-json` (vllm/benchmarks/latency.py, and
// benchmarks/benchmark_latency.py before it) times whole batches of
// requests run offline, with no server: avg_latency, std_latency (since
// 2025), latencies (one per iteration) and percentiles (by percentage, as
// JSON keys), all in seconds. It holds no request, rate or duration, so
// it is a summary: its figures as given, and what it lacks said.

func init() {
	register(format{tool: "vLLM bench latency", match: isVLLMLatency, read: readVLLMLatency})
}

func isVLLMLatency(o object) bool {
	return o.has("avg_latency", "latencies", "percentiles") && !o.hasAny("ttfts", "request_throughput")
}

// readVLLMLatency reads a latency benchmark's figures: avg_latency,
// std_latency, pN_latency per percentile and the iterations timed.
func readVLLMLatency(o object) ([]Run, error) {
	src := o.src
	var pct map[string]*float64
	if err := o.decode("percentiles", &pct); err != nil {
		return nil, fmt.Errorf("fields of the wrong type: %w", err)
	}
	run := Run{Tool: "vLLM bench latency", Source: src, ID: runID("vllm-latency", src), Completed: -1,
		Remedy: "run vllm bench serve --save-result --save-detailed against a server"}
	for _, k := range []string{"avg_latency", "std_latency"} {
		if x, ok := number(o.raw(k)); ok {
			run.Figures = append(run.Figures, Figure{Name: k, Value: x, Unit: "s"})
		}
	}
	for k, v := range pct {
		if _, err := strconv.ParseFloat(k, 64); err != nil || v == nil {
			continue
		}
		run.Figures = append(run.Figures, Figure{Name: "p" + k + "_latency", Value: *v, Unit: "s"})
	}
	run.Figures = append(run.Figures, Figure{Name: "iterations", Value: float64(o.elems("latencies"))})
	sort.Slice(run.Figures, func(i, j int) bool { return run.Figures[i].Name < run.Figures[j].Name })
	run.Notes = append(run.Notes, fmt.Sprintf("%s is a vllm bench latency result: latencies of whole batches run offline, not of requests served; it has no request_throughput, completed or duration, so its figures are reported as given, and no rate, TTFT or interval follows from it", src))
	return []Run{run}, nil
}
