package analyze

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// Verdicts of an answers comparison.
const (
	OutputsIdentical    = "identical"
	OutputsChanged      = "changed"
	OutputsSimilar      = "similar"
	OutputsDiffer       = "differ"
	OutputsInconclusive = "inconclusive"
)

// OutputComparison says whether the answers of B are those of A: the
// greedy ones (temperature 0 or a seed sent) answer for answer by their
// fingerprints, the sampled ones by their lengths and finish reasons.
type OutputComparison struct {
	Confidence float64 `json:"confidence"`
	// SaltFingerprint is the output salt's fingerprint both runs share.
	SaltFingerprint string `json:"salt_fingerprint"`
	// Paired counts the ok requests of B with an ok request of the same
	// id in A; the rest are left out.
	Paired  int           `json:"paired"`
	Greedy  GreedyAnswers `json:"greedy"`
	Sampled SampledAnswer `json:"sampled"`
	Notes   []string      `json:"notes,omitempty"`
}

// GreedyAnswers compares the answers that should repeat exactly, choice
// by choice.
type GreedyAnswers struct {
	Compared  int `json:"compared"`
	Identical int `json:"identical"`
	// ChangedShare is the share of compared answers that changed, with
	// its exact (Clopper–Pearson) interval.
	ChangedShare float64 `json:"changed_share"`
	ChangedLo    float64 `json:"changed_lo"`
	ChangedHi    float64 `json:"changed_hi"`
	// FirstChanged names up to five requests whose answers changed.
	FirstChanged []string `json:"first_changed,omitempty"`
	// PartedAt is where changed answers first part, in streamed events
	// (tokens, where the server streams one an event), over the changed
	// answers both runs streamed with per-event hashes.
	PartedAt *PartedAt `json:"parted_at,omitempty"`
	Verdict  string    `json:"verdict"`
	Why      string    `json:"why"`
}

// SampledAnswer compares sampled answers, which may differ one by one,
// by distribution: output length by a two-sample Kolmogorov–Smirnov test
// and finish reasons by a χ² test of homogeneity.
type SampledAnswer struct {
	A        int            `json:"a_count"`
	B        int            `json:"b_count"`
	LengthKS float64        `json:"length_ks"`
	LengthP  float64        `json:"length_p"`
	FinishA  map[string]int `json:"finish_a"`
	FinishB  map[string]int `json:"finish_b"`
	FinishP  float64        `json:"finish_p"`
	Verdict  string         `json:"verdict"`
	Why      string         `json:"why"`
}

// ErrSaltsDiffer: two runs fingerprinted their answers under different
// output salts, so no answer of one can match the other's.
var ErrSaltsDiffer = errors.New("the answers were fingerprinted under different output salts: none can match; replay both under one salt")

// PartedAt summarizes the first differing streamed event of changed
// answers: counted from 0, so 0 means the first event already differed.
type PartedAt struct {
	Answers int     `json:"answers"`
	Min     int     `json:"min"`
	P50     float64 `json:"p50"`
	Max     int     `json:"max"`
}

// answer is what a result row of the first run says of its answer,
// held at a size bounded by its choices and events.
type answer struct {
	greedy bool
	hashes [][2]uint64 // each choice's output hash, hashed
	events []int32     // chained per-event hashes, greedy streamed answers
	length int64
	finish string
}

// partedAt is the first event at which two chains differ; ok is false
// when either has none, or they never differ.
func partedAt(a, b []int32) (int, bool) {
	if len(a) == 0 || len(b) == 0 {
		return 0, false
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i, true
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b)), true // one went on where the other stopped
	}
	return 0, false
}

// CompareOutputs compares the answers of run b against run a, request by
// request id. Both runs must carry answer fingerprints under one output
// salt (replay --salt-file): under two salts no answer could match. Run
// a's answers are held, each by a hash of its id; run b's are read past
// them batch by batch.
func CompareOutputs(aDir, bDir string, confidence float64) (*OutputComparison, error) {
	if confidence <= 0 || confidence >= 1 {
		confidence = 0.95
	}
	saltA, err := outputSalt(aDir)
	if err != nil {
		return nil, err
	}
	saltB, err := outputSalt(bDir)
	if err != nil {
		return nil, err
	}
	if saltA != saltB {
		return nil, fmt.Errorf("%s and %s (salts %s, %s): %w", aDir, bDir, saltA, saltB, ErrSaltsDiffer)
	}
	a, err := readAnswers(aDir)
	if err != nil {
		return nil, err
	}
	p := newAnswerPairing(a, confidence)
	p.c.SaltFingerprint = saltA
	if err := forEachResultBatch([]string{bDir}, answerColumns, p.addBatch); err != nil {
		return nil, err
	}
	return p.result(), nil
}

// answerPairing compares run b's answers, batch by batch, with run a's.
type answerPairing struct {
	c          *OutputComparison
	a          *heldAnswers
	seen       map[[2]uint64]struct{} // b's ids so far, hashed
	finish     boundedValues          // b's finish reasons
	lenA, lenB []float64
	parted     []float64
	unpaired   int
}

func newAnswerPairing(a *heldAnswers, confidence float64) *answerPairing {
	c := &OutputComparison{Confidence: confidence}
	c.Sampled.FinishA, c.Sampled.FinishB = map[string]int{}, map[string]int{}
	c.Notes = a.notes()
	return &answerPairing{c: c, a: a, seen: map[[2]uint64]struct{}{}, finish: boundedValues{column: "observed_finish_reason"}}
}

// addBatch pairs a batch of run b's ok rows with run a's answers.
func (p *answerPairing) addBatch(rec arrow.RecordBatch) error {
	return eachAnswer(rec, &p.finish, func(id string, rb answerRow) error {
		key := hash128(id)
		if _, dup := p.seen[key]; dup {
			return fmt.Errorf("request id %q appears twice among ok requests: compare one run with one run", clip(id, 80))
		}
		p.seen[key] = struct{}{}
		ra, ok := p.a.byID[key]
		if !ok {
			p.unpaired++
			return nil
		}
		c := p.c
		c.Paired++
		if ra.greedy && rb.greedy {
			changed := len(ra.hashes) != len(rb.hashes)
			for i := range min(len(ra.hashes), len(rb.hashes)) {
				c.Greedy.Compared++
				if ra.hashes[i] == rb.hashes[i] {
					c.Greedy.Identical++
				} else {
					changed = true
				}
			}
			if !changed {
				return nil
			}
			at, known := partedAt(ra.events, rb.events)
			if known {
				p.parted = append(p.parted, float64(at))
				id = fmt.Sprintf("%s (at event %d)", id, at)
			}
			c.Greedy.FirstChanged = firstFive(c.Greedy.FirstChanged, id)
			return nil
		}
		p.lenA, p.lenB = append(p.lenA, float64(ra.length)), append(p.lenB, float64(rb.length))
		c.Sampled.FinishA[ra.finish]++
		c.Sampled.FinishB[rb.finish]++
		return nil
	})
}

// firstFive adds id to the five least ids changed so far (as strings,
// the order the report names them in), dropping the greatest past five.
func firstFive(ids []string, id string) []string {
	at, _ := slices.BinarySearch(ids, id)
	if at >= 5 {
		return ids
	}
	ids = slices.Insert(ids, at, strings.Clone(id))
	return ids[:min(len(ids), 5)]
}

// result is the comparison, judged.
func (p *answerPairing) result() *OutputComparison {
	c := p.c
	if p.unpaired > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("%d ok request(s) of B have no ok request of the same id in A: left out", p.unpaired))
	}
	if note := p.finish.note(); note != "" {
		c.Notes = append(c.Notes, "B: "+note)
	}
	if len(p.parted) > 0 {
		slices.Sort(p.parted)
		c.Greedy.PartedAt = &PartedAt{Answers: len(p.parted), Min: int(p.parted[0]), P50: rank.Percentile(p.parted, 0.5), Max: int(p.parted[len(p.parted)-1])}
	}
	c.Greedy.judge(c.Confidence)
	c.Sampled.judge(p.lenA, p.lenB, 1-c.Confidence)
	return c
}

// judge gives the greedy verdict: identical when no compared answer
// changed, changed when some did, with the changed share's interval.
func (g *GreedyAnswers) judge(confidence float64) {
	n, k := g.Compared, g.Compared-g.Identical
	if n == 0 {
		g.Verdict, g.Why = OutputsInconclusive, "no request was sent greedy (temperature 0 or a seed) in both runs"
		return
	}
	g.ChangedShare = float64(k) / float64(n)
	ci := BinomialCI(k, n, confidence)
	g.ChangedLo, g.ChangedHi = ci[0], ci[1]
	if k == 0 {
		g.Verdict = OutputsIdentical
		g.Why = fmt.Sprintf("all %d greedy answers identical; at most %.2f%% change at %.0f%% confidence", n, 100*g.ChangedHi, 100*confidence)
		return
	}
	g.Verdict = OutputsChanged
	g.Why = fmt.Sprintf("%d of %d greedy answers changed: %.2f%% [%.2f%%, %.2f%%]", k, n, 100*g.ChangedShare, 100*g.ChangedLo, 100*g.ChangedHi)
}

// judge gives the sampled verdict: differ when the lengths or the finish
// reasons differ at level alpha, else similar.
func (s *SampledAnswer) judge(lenA, lenB []float64, alpha float64) {
	s.A, s.B = len(lenA), len(lenB)
	if s.A < 20 {
		s.Verdict, s.Why = OutputsInconclusive, fmt.Sprintf("%d sampled pairs; at least 20 are needed", s.A)
		return
	}
	s.LengthKS = rank.KS(lenA, lenB)
	s.LengthP = ksPValue(s.LengthKS, s.A, s.B)
	s.FinishP = homogeneityP(s.FinishA, s.FinishB)
	var why []string
	if s.LengthP < alpha {
		why = append(why, fmt.Sprintf("output lengths differ (KS %.3f, p %.2g)", s.LengthKS, s.LengthP))
	}
	if s.FinishP < alpha {
		why = append(why, fmt.Sprintf("finish reasons differ (χ² p %.2g)", s.FinishP))
	}
	if len(why) > 0 {
		s.Verdict, s.Why = OutputsDiffer, strings.Join(why, "; ")
		return
	}
	s.Verdict = OutputsSimilar
	s.Why = fmt.Sprintf("output lengths (KS %.3f, p %.2g) and finish reasons (p %.2g) alike", s.LengthKS, s.LengthP, s.FinishP)
}

// ksPValue is the asymptotic two-sample Kolmogorov–Smirnov p-value of
// distance d between samples of n and m, with Stephens' small-sample
// correction. Ties (lengths are integers) make it conservative.
func ksPValue(d float64, n, m int) float64 {
	ne := float64(n) * float64(m) / float64(n+m)
	l := (math.Sqrt(ne) + 0.12 + 0.11/math.Sqrt(ne)) * d
	if l < 0.2 {
		return 1
	}
	p := 0.0
	for k := 1; k <= 100; k++ {
		term := 2 * math.Pow(-1, float64(k-1)) * math.Exp(-2*float64(k*k)*l*l)
		p += term
		if math.Abs(term) < 1e-12 {
			break
		}
	}
	return min(max(p, 0), 1)
}

// homogeneityP is the p-value of Pearson's χ² test that two samples of
// categories come from one distribution; 1 with a single category.
func homogeneityP(a, b map[string]int) float64 {
	keys := map[string]bool{}
	var na, nb float64
	for k, v := range a {
		keys[k], na = true, na+float64(v)
	}
	for k, v := range b {
		keys[k], nb = true, nb+float64(v)
	}
	if len(keys) < 2 || na == 0 || nb == 0 {
		return 1
	}
	chi := 0.0
	for k := range keys {
		tot := float64(a[k] + b[k])
		for _, o := range []struct{ obs, n float64 }{{float64(a[k]), na}, {float64(b[k]), nb}} {
			e := tot * o.n / (na + nb)
			chi += (o.obs - e) * (o.obs - e) / e
		}
	}
	return distuv.ChiSquared{K: float64(len(keys) - 1)}.Survival(chi)
}

// outputSalt reads the fingerprint of a run's output salt from run.json.
func outputSalt(dir string) (string, error) {
	info, err := trace.ReadRunInfo(dir)
	if err != nil {
		return "", err
	}
	opts, _ := info.Options.(map[string]any)
	fp, _ := opts["output_salt_fingerprint"].(string)
	if fp == "" {
		return "", fmt.Errorf("%s records no output salt: it was replayed before servetrace fingerprinted answers, or by another tool; replay it again", dir)
	}
	return fp, nil
}

// maxHeldEvents bounds the chained event hashes held of run a's answers
// together (128 MiB): answers past it are held without them, and their
// parting is not located. A variable so that tests can lower it.
var maxHeldEvents = 1 << 25

// heldAnswers are run a's ok, non-warmup answers by a hash of their
// request id.
type heldAnswers struct {
	byID   map[[2]uint64]answer
	finish boundedValues
	// events counts the event hashes held; without counts the greedy
	// answers held without theirs, past maxHeldEvents.
	events, without int
}

// notes says what of run a was held short.
func (h *heldAnswers) notes() []string {
	var out []string
	if h.without > 0 {
		out = append(out, fmt.Sprintf("A: %d greedy answers past the first %d event hashes held are held without theirs: where they changed, where they parted is not located", h.without, maxHeldEvents))
	}
	if note := h.finish.note(); note != "" {
		out = append(out, "A: "+note)
	}
	return out
}

// readAnswers reads the ok, non-warmup requests' answers of a run by
// request id.
func readAnswers(dir string) (*heldAnswers, error) {
	h := &heldAnswers{byID: map[[2]uint64]answer{}, finish: boundedValues{column: "observed_finish_reason"}}
	err := forEachResultBatch([]string{dir}, answerColumns, func(rec arrow.RecordBatch) error {
		return eachAnswer(rec, &h.finish, func(id string, r answerRow) error {
			key := hash128(id)
			if _, dup := h.byID[key]; dup {
				return fmt.Errorf("request id %q appears twice among ok requests: compare one run with one run", clip(id, 80))
			}
			ans := answer{greedy: r.greedy, hashes: r.hashes, length: r.length, finish: r.finish}
			if r.greedy && len(r.events) > 0 {
				if h.events+len(r.events) <= maxHeldEvents {
					ans.events = slices.Clone(r.events)
					h.events += len(r.events)
				} else {
					h.without++
				}
			}
			h.byID[key] = ans
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// answerColumns are the result columns an answers comparison reads.
var answerColumns = []string{"request_id", "outcome", "warmup", "temperature", "seed", "output_hashes", "output_event_hashes",
	"observed_output_tokens", "observed_finish_reason"}

// answerRow is one ok, non-warmup row's answer as a batch holds it: its
// events are the batch's, valid only while fn runs.
type answerRow struct {
	greedy bool
	hashes [][2]uint64
	events []int32
	length int64
	finish string
}

// eachAnswer hands fn each ok, non-warmup row of a batch: its request id
// (the batch's bytes, to be cloned if kept) and answer; finish reasons are
// interned in finish.
func eachAnswer(rec arrow.RecordBatch, finish *boundedValues, fn func(id string, r answerRow) error) error {
	col := func(name string) arrow.Array { return batchColumn(rec, name) }
	var outcomes, reasons []string
	for _, c := range []struct {
		name string
		dst  *[]string
		into *boundedValues
	}{{"outcome", &outcomes, &boundedValues{}}, {"observed_finish_reason", &reasons, finish}} {
		a := col(c.name)
		if a == nil {
			return fmt.Errorf("no column %q: not a servetrace results file", c.name)
		}
		if err := c.into.appendTo(c.dst, a); err != nil {
			return fmt.Errorf("column %q: %w", c.name, err)
		}
	}
	ids := col("request_id")
	if ids == nil {
		return fmt.Errorf("no column %q: not a servetrace results file", "request_id")
	}
	warm, _ := col("warmup").(*array.Boolean)
	temp, _ := col("temperature").(*array.Float64)
	seed, _ := col("seed").(*array.Int64)
	length, _ := col("observed_output_tokens").(*array.Int64)
	hashes, _ := col("output_hashes").(*array.List)
	events, _ := col("output_event_hashes").(*array.List) // absent before per-event hashes
	if warm == nil || length == nil {
		return fmt.Errorf("no columns warmup and observed_output_tokens: not a servetrace results file")
	}
	if hashes == nil {
		return fmt.Errorf("no column output_hashes: replayed before servetrace fingerprinted answers; replay it again")
	}
	values := hashes.ListValues()
	var eventVals []int32
	if events != nil {
		if v, ok := events.ListValues().(*array.Int32); ok {
			eventVals = v.Int32Values()
		}
	}
	offs := hashes.Offsets()
	for i := range int(rec.NumRows()) {
		if outcomes[i] != trace.OutcomeOK || warm.Value(i) {
			continue
		}
		r := answerRow{length: length.Value(i), finish: reasons[i]}
		r.greedy = (temp != nil && temp.IsValid(i) && temp.Value(i) == 0) || (seed != nil && seed.IsValid(i))
		for j := offs[i]; j < offs[i+1]; j++ {
			h, err := stringAt(values, int(j))
			if err != nil {
				return fmt.Errorf("column output_hashes: %w", err)
			}
			r.hashes = append(r.hashes, hash128(h))
		}
		if r.greedy && eventVals != nil {
			eo := events.Offsets()
			r.events = eventVals[eo[i]:eo[i+1]]
		}
		id, err := stringAt(ids, i)
		if err != nil {
			return fmt.Errorf("column request_id: %w", err)
		}
		if err := fn(id, r); err != nil {
			return err
		}
	}
	return nil
}

// stringAt is row i of a string or dictionary-of-strings column, as the
// batch holds it (not copied).
func stringAt(a arrow.Array, i int) (string, error) {
	switch a := a.(type) {
	case *array.String:
		return a.Value(i), nil
	case *array.Dictionary:
		dict, err := dictionaryStrings(a)
		if err != nil {
			return "", err
		}
		return dict.Value(a.GetValueIndex(i)), nil
	}
	return "", fmt.Errorf("type %s, want string", a.DataType())
}
