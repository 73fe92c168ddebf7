package analyze

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/servetrace/servetrace/trace"
)

// Sessions is what a run's sessions (conversations and agent graphs) took
// end to end, with the session, not the request, as the unit: an agent's
// user waits for the whole graph, and one slow call delays every call
// after it.
type Sessions struct {
	// Sessions counts the sessions of two or more requests, none left
	// out; Requests their requests.
	Sessions int `json:"sessions"`
	Requests int `json:"requests"`
	// MakespanMs is each session's first send to its last answer's end,
	// over the sessions whose every request ended ok, with order-statistic
	// intervals (sessions are independent of each other far more than
	// requests are).
	MakespanMs Distribution `json:"makespan_ms"`
	// Incomplete counts the sessions with a request that did not end ok
	// (their makespan would be short or unknown) or was warmup.
	Incomplete int `json:"incomplete"`
	// Truncated: more sessions than maxSessions; the rest were not read.
	Truncated bool `json:"truncated,omitempty"`
}

// maxSessions bounds the sessions a run's report follows.
const maxSessions = 1 << 22

// sessionSpan is one session's extent so far.
type sessionSpan struct {
	first, last int64
	requests    int32
	incomplete  bool
}

// sessionKey names a session: its run (an index into the tally's run
// ids) and a 128-bit hash of its session_id. What a session costs is
// then fixed, whatever its id's length; two of 2^22 ids collide with
// odds below 2^-80.
type sessionKey struct {
	run uint32
	id  [2]uint64
}

// sessionColumns are the columns a session tally reads.
var sessionColumns = []string{"session_id", "sent_ns", "done_ns", "warmup", "outcome", "run_id"}

// sessionTally follows sessions batch by batch, so it can share a pass
// over the parts with other tallies.
type sessionTally struct {
	spans     map[sessionKey]sessionSpan
	runs      boundedValues // run ids, within maxDistinctValues
	truncated bool
}

func newSessionTally() *sessionTally {
	return &sessionTally{spans: map[sessionKey]sessionSpan{}, runs: boundedValues{column: "run_id"}}
}

func (t *sessionTally) add(rec arrow.RecordBatch) error {
	truncated, err := t.addBatch(rec)
	t.truncated = t.truncated || truncated
	return err
}

// result is the tally's Sessions; nil when none has two requests.
func (t *sessionTally) result(percentiles []float64) *Sessions {
	out := &Sessions{Truncated: t.truncated}
	var makespans []float64
	for _, s := range t.spans {
		if s.requests < 2 {
			continue
		}
		out.Sessions++
		out.Requests += int(s.requests)
		if s.incomplete {
			out.Incomplete++
			continue
		}
		makespans = append(makespans, float64(s.last-s.first)/1e6)
	}
	if out.Sessions == 0 {
		return nil
	}
	out.MakespanMs = Summarize(makespans, percentiles)
	return out
}

// probeSessionTap is the probe and session tallies, fed the batches an
// analysis reads anyway.
type probeSessionTap struct {
	probes   *probeTally
	sessions *sessionTally
}

func newProbeSessionTap(window time.Duration) *probeSessionTap {
	return &probeSessionTap{probes: newProbeTally(window), sessions: newSessionTally()}
}

// tap returns the batch reader that feeds both tallies.
func (p *probeSessionTap) tap() *batchTap {
	return &batchTap{columns: slices.Concat(probeColumns, sessionColumns), fn: func(rec arrow.RecordBatch) error {
		if err := p.probes.add(rec); err != nil {
			return err
		}
		return p.sessions.add(rec)
	}}
}

// addProbesAndSessions sets the report's probes, sessions and, against
// opts.Baseline, the sessions' slowdown, from tallies fed every batch of
// the runs' parts.
func (rep *Report) addProbesAndSessions(t *probeSessionTap, runDirs []string, opts Options) error {
	rep.Probes, rep.Sessions = t.probes.result(), t.sessions.result(opts.Percentiles)
	if note := t.sessions.runs.note(); note != "" {
		rep.Notes = append(rep.Notes, "sessions: "+note)
	}
	if opts.Baseline == "" {
		return nil
	}
	var err error
	if rep.SessionSlowdown, err = sessionSlowdown(t.sessions, opts.Baseline, opts.Percentiles); err != nil {
		return err
	}
	if note := otherWorkload(runDirs, opts.Baseline); note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	return nil
}

// addBatch folds a batch's rows into their sessions (keyed by run and
// session, so repeats of one workload stay apart); truncated is true once
// maxSessions are followed and a new one was left out.
func (t *sessionTally) addBatch(rec arrow.RecordBatch) (truncated bool, err error) {
	col := func(name string) arrow.Array { return batchColumn(rec, name) }
	var outcomes, runs []string
	for _, c := range []struct {
		name string
		dst  *[]string
		into *boundedValues
	}{{"outcome", &outcomes, &boundedValues{}}, {"run_id", &runs, &t.runs}} {
		a := col(c.name)
		if a == nil {
			return false, fmt.Errorf("no column %q: not a servetrace results file", c.name)
		}
		if err := c.into.appendTo(c.dst, a); err != nil {
			return false, fmt.Errorf("column %q: %w", c.name, err)
		}
	}
	ids, err := sessionHashes(col("session_id"))
	if err != nil {
		return false, err
	}
	sent, _ := col("sent_ns").(*array.Int64)
	done, _ := col("done_ns").(*array.Int64)
	warm, _ := col("warmup").(*array.Boolean)
	if sent == nil || done == nil || warm == nil {
		return false, fmt.Errorf("columns sent_ns, done_ns and warmup missing: not a servetrace results file")
	}
	for i, id := range ids {
		if id == ([2]uint64{}) {
			continue
		}
		run, _ := t.runs.find(runs[i]) // interned above
		key := sessionKey{run: uint32(run), id: id}
		s, ok := t.spans[key]
		if !ok {
			if len(t.spans) >= maxSessions {
				truncated = true
				continue
			}
			s = sessionSpan{first: 1<<63 - 1, last: -1 << 63}
		}
		s.requests++
		if outcomes[i] != trace.OutcomeOK || warm.Value(i) || !sent.IsValid(i) || !done.IsValid(i) {
			s.incomplete = true
		} else {
			s.first, s.last = min(s.first, sent.Value(i)), max(s.last, done.Value(i))
		}
		t.spans[key] = s
	}
	return truncated, nil
}

// sessionHashes hashes a session_id column's values, row by row; a row
// of no session gets the zero hash.
func sessionHashes(a arrow.Array) ([][2]uint64, error) {
	var out [][2]uint64
	hash := func(id string) [2]uint64 {
		if id == "" {
			return [2]uint64{}
		}
		return hash128(id)
	}
	switch a := a.(type) {
	case nil:
		return nil, fmt.Errorf("no column %q: not a servetrace results file", "session_id")
	case *array.String:
		for i := range a.Len() {
			out = append(out, hash(a.Value(i)))
		}
	case *array.Dictionary:
		dict, err := dictionaryStrings(a)
		if err != nil {
			return nil, fmt.Errorf("column session_id: %w", err)
		}
		words := make([][2]uint64, dict.Len())
		for k := range words {
			words[k] = hash(dict.Value(k))
		}
		for i := range a.Len() {
			out = append(out, words[a.GetValueIndex(i)])
		}
	default:
		return nil, fmt.Errorf("column session_id: type %s, want string", a.DataType())
	}
	return out, nil
}

// sessionsText says the sessions' makespans in a line, each percentile
// with its order-statistic interval.
func sessionsText(s *Sessions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sessions (%d of %d requests; first send to last answer, sessions as the unit): ", s.Sessions, s.Requests)
	d := s.MakespanMs
	if d.N == 0 {
		b.WriteString("none complete")
	} else {
		fmt.Fprintf(&b, "makespan mean %s ms", num(d.Mean))
		quantilesText(&b, d)
		fmt.Fprintf(&b, " (n %d)", d.N)
	}
	if s.Incomplete > 0 {
		fmt.Fprintf(&b, "; %d with a request not ok or warmup left out", s.Incomplete)
	}
	if s.Truncated {
		fmt.Fprintf(&b, "; only the first %d sessions followed", maxSessions)
	}
	return b.String()
}

// quantilesText appends ", pP value [lo, hi]" for each of d's
// percentiles, its order-statistic interval; where too few sessions bound
// it above, only the floor that is known ("≥x").
func quantilesText(b *strings.Builder, d Distribution) {
	for _, q := range d.Quantiles {
		if q.CIHi == nil {
			fmt.Fprintf(b, ", p%g ≥%s", q.P, num(max(q.Value, deref0(q.CILo))))
			continue
		}
		fmt.Fprintf(b, ", p%g %s [%s, %s]", q.P, num(q.Value), bound(q.CILo), bound(q.CIHi))
	}
}

// deref0 is *p, or 0 for nil.
func deref0(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
