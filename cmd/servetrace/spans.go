package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/spans"
	"github.com/servetrace/servetrace/trace"
)

func spansCmd() *cli.Command {
	return &cli.Command{
		Name:      "spans",
		Usage:     "join the server's request spans, exported apart from the run, to a run directory",
		ArgsUsage: "RUN FILE...",
		Description: `Reads OTLP/JSON trace exports (one {"resourceSpans": [...]} per line, as the
OpenTelemetry Collector's file exporter writes them; .gz too), keeps the run's
request spans (vLLM's llm_request, found by the traceparent replay sent) and
writes their phases to RUN/server_phases.parquet, for 'servetrace analyze' to
say where each request's time went. 'replay --collect-spans' does the same
during the run without a collector.

Example (vLLM exporting to a collector that writes spans.jsonl):
   vllm serve MODEL --otlp-traces-endpoint http://collector:4317
   servetrace replay workload --target http://vllm:8000 --out run
   servetrace spans run spans.jsonl
   servetrace analyze run`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "replace the run's server_phases.parquet"},
			&cli.BoolFlag{Name: "json", Usage: "print what became of the spans as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usageError("want RUN and at least one span FILE")
			}
			counts, err := spans.JoinFiles(c.Args().First(), c.Args().Tail(), c.Bool("force"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(counts)
			}
			fmt.Fprintln(c.App.Writer, spanCountsText(counts, c.Args().First()))
			return nil
		},
	}
}

// spanCountsText says what became of the spans, in one line.
func spanCountsText(s trace.SpanCounts, runDir string) string {
	line := fmt.Sprintf("%d spans read: %d requests' phases written to %s/%s; dropped: %d not request spans, %d of other runs, %d of requests the run did not send, %d duplicates, %d over the run's requests",
		s.Spans, s.Kept, runDir, trace.ServerPhasesName, s.NotRequests, s.OtherRuns, s.UnknownRequests, s.Duplicates, s.OverLimit)
	if len(s.Invalid) > 0 {
		line += ", invalid " + s.Invalid.String()
	}
	return line
}
