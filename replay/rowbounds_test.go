package replay

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/tracetest"
)

// TestResultRowListsAreBounded (issue 46 item 1): a workload row of
// 300,000 prefix blocks is recorded with its first maxRowList, noted, so
// no result row holds a list past the bound.
func TestResultRowListsAreBounded(t *testing.T) {
	srv := newListener(t, nil)
	blocks := make([]int64, 300_000)
	for i := range blocks {
		blocks[i] = int64(i)
	}
	dir := tracetest.WriteWorkload(t, []trace.Request{{Identity: trace.Identity{RequestID: "long"}, TS: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(),
		Shape: trace.Shape{InputTokens: int64(len(blocks)), OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1, PrefixBlocks: blocks}}})
	opts := DefaultOptions()
	opts.Target, opts.RunID = srv.srv.URL, "run"
	rows, info := runAndRead(t, dir, filepath.Join(t.TempDir(), "run"), opts)
	if len(rows) != 1 || rows[0].Outcome != trace.OutcomeOK {
		t.Fatalf("rows %+v; want the one request ok", rows)
	}
	if n := len(rows[0].PrefixBlocks); n != maxRowList || rows[0].PrefixBlocks[n-1] != maxRowList-1 {
		t.Errorf("prefix_blocks recorded with %d entries; want the first %d", n, maxRowList)
	}
	if !strings.Contains(strings.Join(info.Notes, "\n"), "prefix_blocks of over 262144 entries was recorded cut to its first 262144") {
		t.Errorf("notes %q; want the cut noted", info.Notes)
	}
}

// TestCollectorWritesBigRowsEarly (issue 46 item 1): rows whose lists are
// at the row bound are written as a part once the open part's lists pass
// maxBufferedListEntries, not held until the part's time.
func TestCollectorWritesBigRowsEarly(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	w, err := trace.NewResultWriter(run, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := &Runner{}
	c := newCollector(w, time.Hour, r)
	perRow := maxRowList
	rows := 2*maxBufferedListEntries/perRow + 1
	for i := range rows {
		res := trace.Result{Identity: trace.Identity{RequestID: "r"}, Outcome: trace.OutcomeOK, TokenTimesNs: make([]int64, perRow)}
		res.TokenTimesNs[0] = int64(i)
		c.results <- finished{res: res}
	}
	close(c.results)
	<-c.done
	if got, want := len(w.Parts()), rows*perRow/(maxBufferedListEntries+perRow); got < want {
		t.Errorf("%d parts written while %d rows of %d entries came; want at least %d", got, rows, perRow, want)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var n int
	for _, p := range w.Parts() {
		n += int(p.Rows)
	}
	if n != rows {
		t.Errorf("%d rows written; want %d", n, rows)
	}
}
