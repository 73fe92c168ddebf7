package analyze

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/servetrace/servetrace/trace"
)

// probeConfidence is the confidence of the accuracy intervals.
const probeConfidence = 0.95

// Accuracy is how many graded probe answers were right, with the exact
// (Clopper–Pearson) 95% interval of the share.
type Accuracy struct {
	Graded   int     `json:"graded"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	Lo       float64 `json:"lo"`
	Hi       float64 `json:"hi"`
}

func (a *Accuracy) add(correct bool) {
	a.Graded++
	if correct {
		a.Correct++
	}
}

func (a *Accuracy) finish() {
	if a.Graded == 0 {
		return
	}
	a.Accuracy = float64(a.Correct) / float64(a.Graded)
	ci := BinomialCI(a.Correct, a.Graded, probeConfidence)
	a.Lo, a.Hi = ci[0], ci[1]
}

// Probes is what the probe requests (replay --probes) say of the answers'
// correctness: graded exactly, overall, by kind and by send window.
type Probes struct {
	// Sent counts the probes sent (not warmup); Failed those that did not
	// end ok, which are not graded.
	Sent   int `json:"sent"`
	Failed int `json:"failed"`
	Accuracy
	ByKind  map[string]*Accuracy `json:"by_kind"`
	WindowS float64              `json:"window_s"`
	Windows []ProbeWindow        `json:"windows"`
	// Notes say what was pooled: kinds past the most kept apart, probes
	// sent past the most windows kept.
	Notes []string `json:"notes,omitempty"`
}

// ProbeWindow is the accuracy of the probes sent in one window.
type ProbeWindow struct {
	StartS float64 `json:"start_s"`
	Accuracy
}

// probeColumns are the columns a probe tally reads.
var probeColumns = []string{"probe", "probe_correct", "sent_ns", "warmup", "outcome"}

// ProbeAccuracy grades the runs' probes by send window; nil when no run
// sent any. It reads only the probe columns, so it costs little beside
// the analysis whatever the run's length.
func ProbeAccuracy(runDirs []string, window time.Duration) (*Probes, error) {
	t := newProbeTally(window)
	if err := forEachResultBatch(runDirs, probeColumns, t.add); err != nil {
		return nil, err
	}
	return t.result(), nil
}

// probeTally counts probes batch by batch, so it can share a pass over
// the parts with other tallies.
type probeTally struct {
	p        *Probes
	byWindow map[int64]*Accuracy
	window   int64
	kinds    boundedValues
	// unwindowed counts the graded probes sent in no window kept.
	unwindowed int
}

// maxProbeWindows bounds the send windows a probe tally keeps: a day of
// the default 10 s windows is 8,640, and a hostile part can give each
// probe a window of its own.
const maxProbeWindows = 1 << 14

func newProbeTally(window time.Duration) *probeTally {
	if window <= 0 {
		window = 10 * time.Second
	}
	return &probeTally{p: &Probes{ByKind: map[string]*Accuracy{}, WindowS: window.Seconds()}, byWindow: map[int64]*Accuracy{}, window: int64(window),
		kinds: boundedValues{column: "probe"}}
}

// result is the tally's Probes; nil when no probe was sent.
func (t *probeTally) result() *Probes {
	p := t.p
	if p.Sent == 0 {
		return nil
	}
	p.finish()
	for _, a := range p.ByKind {
		a.finish()
	}
	if note := t.kinds.note(); note != "" {
		p.Notes = append(p.Notes, note)
	}
	if t.unwindowed > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("%d graded probes were sent past the first %d windows and are in no window", t.unwindowed, maxProbeWindows))
	}
	for _, k := range slices.Sorted(maps.Keys(t.byWindow)) {
		a := t.byWindow[k]
		a.finish()
		p.Windows = append(p.Windows, ProbeWindow{StartS: float64(k) * p.WindowS, Accuracy: *a})
	}
	return p
}

// add counts a batch's probes; a run from before probes has no probe
// column and adds nothing.
func (t *probeTally) add(rec arrow.RecordBatch) error {
	p := t.p
	col := func(name string) arrow.Array { return batchColumn(rec, name) }
	kindCol := col("probe")
	if kindCol == nil {
		return nil
	}
	var kinds, outcomes []string
	if err := t.kinds.appendTo(&kinds, kindCol); err != nil {
		return fmt.Errorf("column probe: %w", err)
	}
	outcomeCol := col("outcome")
	if outcomeCol == nil {
		return fmt.Errorf("no column outcome beside probe: not a servetrace results file")
	}
	if err := (&boundedValues{}).appendTo(&outcomes, outcomeCol); err != nil {
		return fmt.Errorf("column outcome: %w", err)
	}
	correct, _ := col("probe_correct").(*array.Boolean)
	sent, _ := col("sent_ns").(*array.Int64)
	warm, _ := col("warmup").(*array.Boolean)
	if correct == nil || sent == nil || warm == nil {
		return fmt.Errorf("columns probe_correct, sent_ns and warmup missing beside probe: not a servetrace results file")
	}
	for i, kind := range kinds {
		if kind == "" || warm.Value(i) {
			continue
		}
		p.Sent++
		if outcomes[i] != trace.OutcomeOK || !correct.IsValid(i) || !sent.IsValid(i) {
			p.Failed++
			continue
		}
		ok := correct.Value(i)
		p.add(ok)
		if p.ByKind[kind] == nil {
			p.ByKind[kind] = &Accuracy{}
		}
		p.ByKind[kind].add(ok)
		w := max(sent.Value(i), 0) / t.window
		if t.byWindow[w] == nil {
			if len(t.byWindow) >= maxProbeWindows {
				t.unwindowed++
				continue
			}
			t.byWindow[w] = &Accuracy{}
		}
		t.byWindow[w].add(ok)
	}
	return nil
}

// probesText says the probes' accuracy in a line, then one line per
// window with its interval, so a fall under load shows when it began.
func probesText(p *Probes) string {
	var b strings.Builder
	fmt.Fprintf(&b, "answers correct (probes, graded exactly): %s", p.Accuracy.text())
	if p.Failed > 0 {
		fmt.Fprintf(&b, "; %d of %d probes failed and are not graded", p.Failed, p.Sent)
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(p.ByKind)) {
		kinds = append(kinds, fmt.Sprintf("%s %d/%d", k, p.ByKind[k].Correct, p.ByKind[k].Graded))
	}
	if len(kinds) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(kinds, ", "))
	}
	if len(p.Windows) > 1 {
		for _, w := range p.Windows {
			fmt.Fprintf(&b, "\n  sent from %.0f s: %s", w.StartS, w.Accuracy.text())
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "\n  %s", n)
	}
	return b.String()
}

func (a Accuracy) text() string {
	if a.Graded == 0 {
		return "none graded"
	}
	return fmt.Sprintf("%.1f%% [95%% %.1f, %.1f] of %d", 100*a.Accuracy, 100*a.Lo, 100*a.Hi, a.Graded)
}
