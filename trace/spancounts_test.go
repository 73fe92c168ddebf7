package trace

import (
	"fmt"
	"testing"
)

// TestSpanCountsInvalidText (issue 46 item 12): the invalid-phase counts
// read as words in a note, not in Go's map syntax ("map[a:1 b:2]"), in
// the order of their names.
func TestSpanCountsInvalidText(t *testing.T) {
	c := SpanCounts{Invalid: map[string]int64{"gen_ai.latency.time_in_queue": 2, "gen_ai.latency.e2e": 1}}
	if got, want := fmt.Sprintf("%v", c.Invalid), "1 (gen_ai.latency.e2e), 2 (gen_ai.latency.time_in_queue)"; got != want {
		t.Errorf("%%v of the invalid counts = %q, want %q", got, want)
	}
}
