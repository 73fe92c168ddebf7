package analyze

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// offeredText is a run's offered rate as a reader should see it.
func offeredText(r RunSummary) string {
	switch {
	case r.AllAtOnce:
		return "every request at once"
	case r.OfferedRate > 0:
		return fmt.Sprintf("%.2f req/s", r.OfferedRate)
	}
	return "no rate recorded"
}

// achievedText is a peer run's completed rate, where its file gives a
// duration.
func achievedText(r RunSummary) string {
	if r.fileDurationS <= 0 {
		return "no duration recorded"
	}
	return fmt.Sprintf("completed %.2f req/s (the file's completed / duration)", r.AchievedRate)
}

// writeGiven prints peer tools' summary-only results: their own
// figures, with no interval, since no per-request data came with them.
func writeGiven(b *strings.Builder, rep *Report) {
	for _, g := range rep.Given {
		fmt.Fprintf(b, "\n%s (%s summary, model %s): the tool's own figures, as given; no per-request data, so no interval\n", g.Source, g.Tool, orNotRecorded(g.Model))
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		for _, f := range g.Figures {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Name, givenNum(f.Value), f.Unit)
		}
		tw.Flush()
	}
}

// writeGivenMarkdown is writeGiven as Markdown.
func writeGivenMarkdown(b *strings.Builder, rep *Report) {
	for _, g := range rep.Given {
		fmt.Fprintf(b, "\n### `%s` (%s summary), as given\n\nThe tool's own figures (model `%s`); no per-request data, so no interval.\n\n| figure | value | unit |\n|---|--:|---|\n", g.Source, g.Tool, orNotRecorded(g.Model))
		for _, f := range g.Figures {
			fmt.Fprintf(b, "| %s | %s | %s |\n", f.Name, givenNum(f.Value), f.Unit)
		}
	}
}

// givenNum prints a tool's figure exactly as it gave it.
func givenNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// orNotRecorded says so for a field the tool left empty.
func orNotRecorded(s string) string {
	if s == "" {
		return "not recorded"
	}
	return s
}
