package peer

import (
	"fmt"
	"sort"
	"strings"
)

// vLLM's nightly and performance benchmarks publish benchmark_results.json:
// a JSON array of flat rows whose keys are the Markdown table's headers
// ("Test name", "Tput (req/s)", "Mean TTFT (ms)"; note that the TPOT
// median and p99 columns are headed just "Median" and "P99"). Shape:
// vllm .buildkite/performance-benchmarks/scripts/
// convert-results-json-to-markdown.py (df.to_dict(orient="records")).

func init() {
	register(format{tool: "vLLM benchmark table", match: isVLLMTableRow, read: readVLLMTableRow})
}

func isVLLMTableRow(o object) bool {
	return o.has("Test name") && o.hasAny("Tput (req/s)", "Mean latency (ms)")
}

// vllmTableNames renames the table's ambiguous headers.
var vllmTableNames = map[string]string{"Median": "Median TPOT (ms)", "P99": "P99 TPOT (ms)"}

// readVLLMTableRow reads one row: the figures as given.
func readVLLMTableRow(o object) ([]Run, error) {
	src := o.src
	name, model, gpu := o.str("Test name"), o.str("Model"), o.str("GPU")
	r := Run{Tool: "vLLM benchmark table", Source: src + " (" + name + ")", ID: "vllm-table:" + name, Model: model, Backend: gpu, Completed: -1}
	for _, k := range o.keys {
		x, ok := number(o.raw(k))
		if !ok {
			continue
		}
		label := k
		if n, ok := vllmTableNames[k]; ok {
			label = n
		}
		f := Figure{Name: label, Value: x}
		if strings.HasSuffix(label, "(ms)") {
			f.Unit = "ms"
		}
		r.Figures = append(r.Figures, f)
		if k == "Elapsed time (s)" {
			r.DurationS = x
		}
	}
	sort.Slice(r.Figures, func(i, j int) bool { return r.Figures[i].Name < r.Figures[j].Name })
	r.Remedy = "give the vllm bench serve result files the table was made from"
	r.Notes = append(r.Notes, fmt.Sprintf("%s is a row of vLLM's benchmark table: its figures are reported as given, and no interval can be computed", r.Source))
	return []Run{r}, nil
}
