package peer

import (
	"fmt"
	"math"

	"github.com/servetrace/servetrace/trace"
)

// A peer tool's values are held to the ceilings servetrace holds its own
// records to (trace.MaxTokens, trace.MaxClientMs) and to each other: a
// value out of range or contradicted by another is left out of the
// analysis, never pooled as it is, and every one left out is counted and
// named in the report.

// maxLatencyNs is the longest time a request's latency, TTFT or token gap
// may take: a week, as for the latencies of servetrace's own records.
const maxLatencyNs = int64(trace.MaxClientMs) * 1e6

// invalid marks a value the file gave that is out of range (negative, not
// finite, past its ceiling); check counts it and leaves it out. A value
// the file does not give is -1.
const invalid = math.MinInt64

// maxCompleted bounds a run's count of completed requests: no benchmark
// file records a run of more.
const maxCompleted = 1 << 32

// maxRate bounds a request rate and a concurrency limit.
const maxRate = 1e7

// secondsToNs converts a time in seconds, invalid when out of range.
func secondsToNs(s float64) int64 {
	if !(s >= 0 && s*1e9 <= float64(maxLatencyNs)) {
		return invalid
	}
	return int64(math.Round(s * 1e9))
}

// msToNs converts a time in milliseconds, invalid when out of range.
func msToNs(ms float64) int64 { return secondsToNs(ms / 1e3) }

// tokens converts a token count, invalid when out of range or not whole.
func tokens(x float64) int64 {
	if !(x >= 0 && x <= trace.MaxTokens) || x != math.Trunc(x) {
		return invalid
	}
	return int64(x)
}

// reason is why a value was left out, and what was left out.
type reason struct{ what, left string }

// Reasons a value is left out, as the notes name them.
var (
	leftSend        = reason{"no valid send time", "the record"}
	leftInput       = reason{"input tokens out of range (0 to 10,000,000)", "the count"}
	leftOutput      = reason{"output tokens out of range (0 to 10,000,000)", "the count"}
	leftTTFT        = reason{"a TTFT out of range (negative, not a number, or past a week)", "the TTFT"}
	leftE2E         = reason{"a latency out of range (negative, not a number, or past a week)", "the request's end, so its latencies,"}
	leftE2EBefore   = reason{"a latency shorter than its TTFT", "the request's end, so its latencies,"}
	leftGapRange    = reason{"a token gap out of range (negative, not a number, or past a week)", "its token gaps"}
	leftGapCount    = reason{"more token gaps than output tokens", "its token gaps"}
	leftGapsTooLong = reason{"a TTFT and token gaps adding up past a week", "its token gaps"}
)

// tally counts the values of a run's records that were left out, by
// reason, with the first record of each.
type tally struct {
	order []reason
	by    map[reason]*leftOut
}

type leftOut struct {
	n     int64
	first int64 // 1-based record
}

func (t *tally) add(r reason, record int64) {
	if t.by == nil {
		t.by = map[reason]*leftOut{}
	}
	l := t.by[r]
	if l == nil {
		l = &leftOut{first: record}
		t.by[r] = l
		t.order = append(t.order, r)
	}
	l.n++
}

// count is how many records a reason left a value out of.
func (t *tally) count(r reason) int64 {
	if l := t.by[r]; l != nil {
		return l.n
	}
	return 0
}

// notes says, a line a reason, what was left out of the run from src.
func (t *tally) notes(src string) []string {
	var out []string
	for _, r := range t.order {
		l := t.by[r]
		out = append(out, fmt.Sprintf("%s: %d record(s) with %s: %s left out (first: record %d)", src, l.n, r.what, r.left, l.first))
	}
	return out
}

// check holds one request, the record-th of its run (1-based), to the
// ceilings and rules: it clears what fails (to -1, or the gaps to none)
// and counts it. keep is false for a request that cannot be placed at
// all (no valid send time).
func (t *tally) check(q *Request, record int64) (keep bool) {
	if q.SentNs < 0 || q.SentNs > maxLatencyNs {
		r := leftSend
		if q.badSend != "" {
			r.what = q.badSend
		}
		t.add(r, record)
		return false
	}
	if q.InputTokens != -1 && !(q.InputTokens >= 0 && q.InputTokens <= trace.MaxTokens) {
		t.add(leftInput, record)
		q.InputTokens = -1
	}
	if q.OutputTokens != -1 && !(q.OutputTokens >= 0 && q.OutputTokens <= trace.MaxTokens) {
		t.add(leftOutput, record)
		q.OutputTokens = -1
	}
	if !q.OK {
		return true // a failure's times are not used
	}
	if q.TTFTNs != -1 && !(q.TTFTNs >= 0 && q.TTFTNs <= maxLatencyNs) {
		t.add(leftTTFT, record)
		q.TTFTNs = -1
	}
	switch {
	case q.E2ENs == -1:
	case !(q.E2ENs >= 0 && q.E2ENs <= maxLatencyNs):
		t.add(leftE2E, record)
		q.E2ENs, q.EndUnknown = -1, true
	case q.TTFTNs >= 0 && q.E2ENs < q.TTFTNs:
		t.add(leftE2EBefore, record)
		q.E2ENs, q.EndUnknown = -1, true
	}
	if len(q.GapsNs) > 0 {
		var why *reason
		sum := max(q.TTFTNs, 0)
		for _, g := range q.GapsNs {
			if !(g >= 0 && g <= maxLatencyNs) {
				why = &leftGapRange
				break
			}
			if sum += g; sum > maxLatencyNs {
				why = &leftGapsTooLong
				break
			}
		}
		if why == nil && q.OutputTokens >= 0 && int64(len(q.GapsNs)) > max(q.OutputTokens-1, 0) {
			why = &leftGapCount
		}
		if why != nil {
			t.add(*why, record)
			q.GapsNs = nil
		}
	}
	return true
}

// runChecks holds a run's own figures to their ranges and to its records,
// ok of which succeeded: a duration and rates in range, and no more
// completed requests than the file holds (where the tool keeps every
// request). What fails is dropped or replaced by what the records say,
// and noted; a file without a completed count that takes it from its
// records gets ok.
func (r *Run) runChecks(ok int64) {
	if d := r.DurationS; d != 0 && !(d > 0 && d*1e3 <= trace.MaxClientMs) {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: its duration %g s is out of range (more than 0, at most a week): left out, so no throughput is taken from it", r.Source, d))
		r.DurationS = 0
	}
	if x := r.OfferedRate; x != 0 && !(x > 0 && x <= maxRate) {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: its request rate %g is out of range: left out", r.Source, x))
		r.OfferedRate = 0
	}
	if c := r.MaxConcurrency; c < 0 || c > maxRate {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: its concurrency limit %d is out of range: left out", r.Source, c))
		r.MaxConcurrency = 0
	}
	if r.Completed < -1 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: its count of completed requests is out of range: left out", r.Source))
		r.Completed = -1
	}
	if r.Completed < 0 && r.completedFromRecords {
		r.Completed = ok
	}
	if r.Completed < 0 {
		return
	}
	switch {
	case r.Completed > maxCompleted:
		r.Notes = append(r.Notes, fmt.Sprintf("%s: it says %d requests completed, more than any benchmark runs: throughput counts the %d successful records instead", r.Source, r.Completed, ok))
		r.Completed = ok
	case !r.sampled && r.Completed > r.Records:
		r.Notes = append(r.Notes, fmt.Sprintf("%s: it says %d requests completed but holds %d records: throughput counts the %d successful records instead", r.Source, r.Completed, r.Records, ok))
		r.Completed = ok
	}
}

// meanNotes compares the means a run's records give with the tool's own
// figures, where they differ by more than meanTolerance: a tool that
// counts TPOT or E2E to its own end of the request (vLLM does) gives
// another mean than its token events, when its file keeps no latencies;
// a file whose mean counts values left out here as out of range differs
// for that reason, and says so.
func (r *Run) meanNotes(m *means, t *tally) []string {
	var notes []string
	gaps := t.count(leftGapRange) + t.count(leftGapCount) + t.count(leftGapsTooLong)
	ends := t.count(leftE2E) + t.count(leftE2EBefore)
	for _, c := range []struct {
		metric, why string
		names       []string
		sum         float64
		n           int64
		dropped     int64
	}{
		{"TTFT", "its records are rounded or cut", []string{"mean_ttft_ms"}, m.ttftMs, m.ttftN, t.count(leftTTFT)},
		{"TPOT", "the tool counts it from its own end-of-request time, which its records do not hold", []string{"mean_tpot_ms"}, m.tpotMs, m.tpotN,
			t.count(leftTTFT) + gaps + ends},
		{"E2E", "the records end at their last token where the file keeps no latencies, and the tool counts to its own end of the request, after it", []string{"mean_e2el_ms", "mean_latency_ms"}, m.e2eMs, m.e2eN, t.count(leftTTFT) + gaps + ends},
	} {
		given, name, ok := 0.0, "", false
		for _, n := range c.names {
			if given, ok = r.Figure(n); ok {
				name = n
				break
			}
		}
		if !ok || !(given > 0) || c.n == 0 {
			continue
		}
		ours := c.sum / float64(c.n)
		if math.Abs(ours-given) <= meanTolerance*given {
			continue
		}
		why := c.why
		if c.dropped > 0 {
			why = fmt.Sprintf("the file's mean counts the %d value(s) left out here as out of range", c.dropped)
		}
		notes = append(notes, fmt.Sprintf("%s: mean %s %.2f ms from its records, where the file's %s says %.2f ms (%+.2f%%): %s",
			r.Source, c.metric, ours, name, given, 100*(ours-given)/given, why))
	}
	return notes
}

// meanTolerance is how far a mean from a file's records may stray from
// the file's own, relatively, without a note: a file's times are written
// to the microsecond, so more is a difference of definition, not rounding.
const meanTolerance = 0.001

// means sums what meanNotes compares: TTFT, TPOT and E2E over ok
// requests.
type means struct {
	ttftMs, tpotMs, e2eMs float64
	ttftN, tpotN, e2eN    int64
}

func (m *means) add(q *Request) {
	if q.OK && !q.EndUnknown {
		if end := q.LastEventNs(); end >= 0 {
			m.e2eMs += float64(end) / 1e6
			m.e2eN++
		}
	}
	if !q.OK || q.TTFTNs < 0 {
		return
	}
	m.ttftMs += float64(q.TTFTNs) / 1e6
	m.ttftN++
	if q.OutputTokens >= 2 && !q.EndUnknown {
		m.tpotMs += float64(q.LastEventNs()-q.TTFTNs) / 1e6 / float64(q.OutputTokens-1)
		m.tpotN++
	}
}
