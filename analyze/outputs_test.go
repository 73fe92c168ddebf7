package analyze

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
)

// answersRun writes a run whose rows carry the given answers under salt
// fingerprint fp.
func answersRun(t *testing.T, fp string, rows []trace.Result) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	w, err := trace.NewResultWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: "r", Complete: true, Parts: w.Parts(), Options: map[string]any{"output_salt_fingerprint": fp}}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		t.Fatal(err)
	}
	return dir
}

// answerRows builds n greedy rows (temperature 0) whose answer hashes are
// "g<i>" unless changed(i), and m sampled rows (temperature 1) whose
// lengths and finish reasons come from sampled(i).
func answerRows(n int, changed func(int) bool, m int, sampled func(int) (int64, string)) []trace.Result {
	var rows []trace.Result
	zero, one := 0.0, 1.0
	for i := range n {
		h := fmt.Sprintf("%032x", i)
		if changed(i) {
			h = fmt.Sprintf("%032x", i+1<<40)
		}
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("g%d", i)}, Temperature: &zero,
			Outcome: trace.OutcomeOK, OutputHashes: []string{h}, ObservedOutputTokens: 10, ObservedFinishReason: "length"})
	}
	for i := range m {
		l, f := sampled(i)
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("s%d", i)}, Temperature: &one,
			Outcome: trace.OutcomeOK, OutputHashes: []string{fmt.Sprintf("%032x", 1<<50+i)}, ObservedOutputTokens: l, ObservedFinishReason: f})
	}
	// A failed request and a warmup one are never compared.
	rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: "failed"}, Temperature: &zero, Outcome: trace.OutcomeHTTPError},
		trace.Result{Identity: trace.Identity{RequestID: "warm"}, Temperature: &zero, Outcome: trace.OutcomeOK, Warmup: true,
			OutputHashes: []string{fmt.Sprintf("%032x", 7)}})
	return rows
}

func TestCompareOutputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	uniform := func(int) (int64, string) { return 1 + rng.Int64N(100), "length" }
	halved := func(int) (int64, string) { return 1 + rng.Int64N(50), "length" }
	stopping := func(i int) (int64, string) {
		if i%3 == 0 {
			return 1 + rng.Int64N(100), "stop"
		}
		return 1 + rng.Int64N(100), "length"
	}
	never := func(int) bool { return false }
	base := answersRun(t, "salt", answerRows(400, never, 300, uniform))
	for _, c := range []struct {
		name             string
		changed          func(int) bool
		sampled          func(int) (int64, string)
		greedy, sampledV string
		changedN         int
	}{
		{"the same answers", never, uniform, OutputsIdentical, OutputsSimilar, 0},
		{"a tenth changed", func(i int) bool { return i%10 == 3 }, uniform, OutputsChanged, OutputsSimilar, 40},
		{"shorter sampled answers", never, halved, OutputsIdentical, OutputsDiffer, 0},
		{"sampled answers stopping", never, stopping, OutputsIdentical, OutputsDiffer, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := CompareOutputs(base, answersRun(t, "salt", answerRows(400, c.changed, 300, c.sampled)), 0.95)
			if err != nil {
				t.Fatal(err)
			}
			if got.SaltFingerprint != "salt" {
				t.Errorf("salt fingerprint %q; want the runs' %q", got.SaltFingerprint, "salt")
			}
			g := got.Greedy
			if g.Compared != 400 || g.Identical != 400-c.changedN || g.Verdict != c.greedy {
				t.Errorf("greedy: %d compared, %d identical, %s (%s); want 400, %d, %s", g.Compared, g.Identical, g.Verdict, g.Why, 400-c.changedN, c.greedy)
			}
			if share := float64(c.changedN) / 400; g.ChangedLo > share || g.ChangedHi < share {
				t.Errorf("changed share interval [%g, %g] misses %g", g.ChangedLo, g.ChangedHi, share)
			}
			if c.changedN == 0 {
				// Clopper–Pearson with no change: 1 − (α/2)^(1/n).
				if want := 1 - math.Pow(0.025, 1.0/400); math.Abs(g.ChangedHi-want) > 1e-6 {
					t.Errorf("upper bound %g; want %g", g.ChangedHi, want)
				}
			}
			if got.Sampled.A != 300 || got.Sampled.Verdict != c.sampledV {
				t.Errorf("sampled: %d pairs, %s (%s); want 300, %s", got.Sampled.A, got.Sampled.Verdict, got.Sampled.Why, c.sampledV)
			}
			if got.Paired != 700 {
				t.Errorf("%d paired; want 700 (failed and warmup requests left out)", got.Paired)
			}
		})
	}
	if _, err := CompareOutputs(base, answersRun(t, "other", answerRows(4, never, 0, uniform)), 0.95); !errors.Is(err, ErrSaltsDiffer) {
		t.Errorf("two salts: %v; want ErrSaltsDiffer", err)
	}
}

// TestOutputStatistics checks the intervals and tests against values
// from their tables.
func TestOutputStatistics(t *testing.T) {
	// Clopper–Pearson, 1 of 10: [0.00253, 0.44502].
	if ci := BinomialCI(1, 10, 0.95); math.Abs(ci[0]-0.00253) > 1e-5 || math.Abs(ci[1]-0.44502) > 1e-5 {
		t.Errorf("BinomialCI(1, 10) = %v; want [0.00253, 0.44502]", ci)
	}
	// The KS distribution's 5% point is λ = 1.358.
	if p := ksPValue(1.358/1000, 2_000_000, 2_000_000); math.Abs(p-0.05) > 0.001 {
		t.Errorf("KS p at λ 1.358: %g; want 0.05", p)
	}
	// χ² of 2×2 counts (30, 70) against (50, 50): 8.333 on 1 df, p 0.00389.
	if p := homogeneityP(map[string]int{"stop": 30, "length": 70}, map[string]int{"stop": 50, "length": 50}); math.Abs(p-0.00389) > 2e-5 {
		t.Errorf("χ² p %g; want 0.00389", p)
	}
}

// TestOutputsPartAt: changed greedy answers whose per-event chains first
// differ at events 3, 5 and 0 are said to part at 0 to 5, median 3; the
// unchanged one is not counted.
func TestOutputsPartAt(t *testing.T) {
	chain := func(n int, from int, alt int32) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(i)
			if i >= from {
				out[i] = alt + int32(i)
			}
		}
		return out
	}
	rows := func(changed bool) []trace.Result {
		zero := 0.0
		var out []trace.Result
		for i, from := range []int{3, 5, 0, 100} {
			h, ev := fmt.Sprintf("%032x", i), chain(8, 100, 0)
			if changed && from < 100 {
				h, ev = fmt.Sprintf("%032x", i+1000), chain(8, from, 50)
			}
			out = append(out, trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", i)}, Temperature: &zero, Outcome: trace.OutcomeOK,
				OutputHashes: []string{h}, OutputEventHashes: ev, ObservedOutputTokens: 8})
		}
		return out
	}
	got, err := CompareOutputs(answersRun(t, "s", rows(false)), answersRun(t, "s", rows(true)), 0.95)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Greedy.PartedAt
	if got.Greedy.Identical != 1 || p == nil || p.Answers != 3 || p.Min != 0 || p.Max != 5 || p.P50 != 3 {
		t.Errorf("identical %d, parted at %+v; want 1 and 3 answers from 0 to 5, median 3", got.Greedy.Identical, p)
	}
	if got.Greedy.FirstChanged[0] != "r0 (at event 3)" {
		t.Errorf("first changed %q", got.Greedy.FirstChanged)
	}
	// Held to 16 event hashes, A keeps r0's and r1's (8 each) and not
	// r2's or r3's: r2's change is counted, its parting not located.
	defer func(old int) { maxHeldEvents = old }(maxHeldEvents)
	maxHeldEvents = 16
	got, err = CompareOutputs(answersRun(t, "s", rows(false)), answersRun(t, "s", rows(true)), 0.95)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Greedy.PartedAt; got.Greedy.Identical != 1 || p == nil || p.Answers != 2 || p.Min != 3 || p.Max != 5 {
		t.Errorf("held to 16 events: identical %d, parted at %+v; want 1 and 2 answers at 3 and 5", got.Greedy.Identical, p)
	}
	if !strings.Contains(strings.Join(got.Notes, "\n"), "A: 2 greedy answers past the first 16 event hashes held are held without theirs") {
		t.Errorf("notes %q", got.Notes)
	}
}

// TestLongAnswersHeldFixedSize (issue 46, item 5): two runs of 150,000
// greedy answers with request ids of 1,000 bytes are compared within
// 384 MiB: one side is held by a hash of each id, the other streamed
// (before, both sides were held by id: out of memory).
func TestLongAnswersHeldFixedSize(t *testing.T) {
	memcap.Run(t, 384<<20, func(t *testing.T) {
		const n = 150_000
		write := func(changed int) string {
			dir := filepath.Join(t.TempDir(), "run")
			w, err := trace.NewResultWriter(dir, 10_000)
			if err != nil {
				t.Fatal(err)
			}
			zero := 0.0
			for i := range n {
				h := fmt.Sprintf("%032x", i)
				if i < changed {
					h = fmt.Sprintf("%032x", i+1<<40)
				}
				if err := w.Write(trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("%01000d", i)}, Temperature: &zero, Outcome: trace.OutcomeOK,
					OutputHashes: []string{h}, OutputEventHashes: []int32{1, 2, int32(i)}, ObservedOutputTokens: 3, ObservedFinishReason: "stop"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			ri := trace.RunInfo{SchemaVersion: 1, RunID: "r", Complete: true, Parts: w.Parts(), Options: map[string]any{"output_salt_fingerprint": "fp"}}
			if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
				t.Fatal(err)
			}
			return dir
		}
		got, err := CompareOutputs(write(0), write(7), 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if g := got.Greedy; got.Paired != n || g.Compared != n || g.Identical != n-7 || len(g.FirstChanged) != 5 || !strings.HasPrefix(g.FirstChanged[0], fmt.Sprintf("%01000d", 0)) {
			t.Errorf("paired %d, compared %d, identical %d, first changed %d; want %d, %d, %d, 5 from id 0", got.Paired, g.Compared, g.Identical, len(g.FirstChanged), n, n, n-7)
		}
	})
}
