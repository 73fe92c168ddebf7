package spans

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/servetrace/servetrace/trace"
)

// JoinFiles reads OTLP/JSON span exports collected apart from a run (a
// collector's file exporter) and writes the run's phases to its
// directory, as replay's own receiver would have: only the spans of the
// requests that run sent (by trace id, from its results), at most one
// each. An existing phases file is replaced only when force is set.
func JoinFiles(runDir string, files []string, force bool) (trace.SpanCounts, error) {
	info, err := trace.ReadRunInfo(runDir)
	if err != nil {
		return trace.SpanCounts{}, err
	}
	if info.RunID == "" {
		return trace.SpanCounts{}, fmt.Errorf("run %s: run.json names no run id, so no span can be told to be its", runDir)
	}
	out := filepath.Join(runDir, trace.ServerPhasesName)
	if _, err := os.Lstat(out); err == nil && !force {
		return trace.SpanCounts{}, fmt.Errorf("%s exists: %w", out, trace.ErrOutputExists)
	}
	c := NewCollector(info.RunID, int(min(max(info.Scheduled, 1), 1<<30)))
	if err := trace.EachSentRequest(runDir, c.Expect); err != nil {
		return trace.SpanCounts{}, fmt.Errorf("the requests run %s sent: %w", runDir, err)
	}
	for _, f := range files {
		if err := ReadFile(f, c); err != nil {
			return c.Counts(), err
		}
	}
	if err := trace.WriteServerPhases(runDir, c.Phases()); err != nil {
		return c.Counts(), err
	}
	return c.Counts(), nil
}
