package analyze

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
)

// keepDistinct lowers maxDistinctValues to n for the test.
func keepDistinct(t *testing.T, n int) {
	old := maxDistinctValues
	maxDistinctValues = n
	t.Cleanup(func() { maxDistinctValues = old })
}

// TestDistinctValuesBounded (issue 46, item 5): with 256 distinct values
// kept apart, 300 rows of 300 distinct values of a string column keep
// the first 256 apart and pool the other 44 as "(other)", with a note
// naming the column and the first value pooled, wherever analysis keeps
// such values: breakdown columns, held and streamed, probe kinds, the
// sessions' run ids, answers' finish reasons (before, every value was
// kept, however many).
func TestDistinctValuesBounded(t *testing.T) {
	keepDistinct(t, 256)
	const n = 300
	want := func(column string) string {
		return fmt.Sprintf("column %s has more than 256 distinct values: 44 row values first seen past them (the first %q) are pooled as \"(other)\"", column, "v256")
	}
	run := func(t *testing.T, edit func(i int, r *trace.Result)) string {
		dir := filepath.Join(t.TempDir(), "run")
		writeRun(t, dir, "run", listRows(n, edit), 0)
		return dir
	}
	t.Run("tenants, held and streamed", func(t *testing.T) {
		dir := run(t, func(i int, r *trace.Result) { r.Tenant = fmt.Sprintf("v%d", i) })
		for _, rows := range []int{0, 10} {
			rep, err := Analyze([]string{dir}, Options{By: []string{"tenant"}, InMemoryRows: rows, Bootstrap: BootstrapOptions{Resamples: 50}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(rep.Notes, "\n"), want("tenant")) {
				t.Errorf("in-memory rows %d: notes %q; want %q", rows, rep.Notes, want("tenant"))
			}
			other := 0
			for _, g := range rep.Breakdowns["tenant"] {
				if g.Value == otherValue {
					other = g.Counted
				}
			}
			if other != n-19 { // maxGroups keeps 19 apart, pools the rest
				t.Errorf("in-memory rows %d: (other) counts %d; want %d", rows, other, n-19)
			}
		}
	})
	t.Run("features", func(t *testing.T) {
		dir := run(t, func(i int, r *trace.Result) { r.Features = []string{fmt.Sprintf("v%d", i)} })
		rep, err := Analyze([]string{dir}, Options{Bootstrap: BootstrapOptions{Resamples: 50}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(rep.Notes, "\n"), want("features")) || len(rep.Sent.FeatureShares) != 257 {
			t.Errorf("notes %q, %d feature shares; want %q and 257", rep.Notes, len(rep.Sent.FeatureShares), want("features"))
		}
	})
	t.Run("probe kinds", func(t *testing.T) {
		yes := true
		dir := run(t, func(i int, r *trace.Result) { r.Probe, r.ProbeCorrect = fmt.Sprintf("v%d", i), &yes })
		p, err := ProbeAccuracy([]string{dir}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.ByKind) != 257 || p.ByKind[otherValue].Graded != 44 || !strings.Contains(strings.Join(p.Notes, "\n"), want("probe")) {
			t.Errorf("%d kinds, notes %q; want 257, (other) of 44 and %q", len(p.ByKind), p.Notes, want("probe"))
		}
	})
	t.Run("sessions' run ids", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		w, err := trace.NewResultWriter(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range listRows(n, func(i int, r *trace.Result) { r.SessionID = "s" }) {
			r.RunID = fmt.Sprintf("v%d", i)
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), trace.RunInfo{SchemaVersion: 1, RunID: "run", Complete: true, Parts: w.Parts()}); err != nil {
			t.Fatal(err)
		}
		rep, err := Analyze([]string{dir}, Options{Bootstrap: BootstrapOptions{Resamples: 50}})
		if err != nil {
			t.Fatal(err)
		}
		// The 44 rows pooled are one session of 44 requests.
		if s := rep.Sessions; s == nil || s.Sessions != 1 || s.Requests != 44 || !strings.Contains(strings.Join(rep.Notes, "\n"), "sessions: "+want("run_id")) {
			t.Errorf("sessions %+v, notes %q; want one of 44 requests and %q", s, rep.Notes, want("run_id"))
		}
	})
	t.Run("finish reasons", func(t *testing.T) {
		one := 1.0
		rows := func(i int, r *trace.Result) {
			r.Temperature, r.ObservedFinishReason, r.OutputHashes = &one, fmt.Sprintf("v%d", i), []string{fmt.Sprintf("%032x", i)}
		}
		a := answersRun(t, "fp", listRows(n, rows))
		c, err := CompareOutputs(a, answersRun(t, "fp", listRows(n, rows)), 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Sampled.FinishA) != 257 || c.Sampled.FinishA[otherValue] != 44 || !strings.Contains(strings.Join(c.Notes, "\n"), "A: "+want("observed_finish_reason")) {
			t.Errorf("%d finish reasons of A, notes %q; want 257, (other) 44 and %q", len(c.Sampled.FinishA), c.Notes, want("observed_finish_reason"))
		}
	})
}

// TestLongDistinctStringsHeldOnce (issue 46, item 5): 40,000 rows, each
// with its own tenant, model, adapter, phase, role and finish reason of
// 1,000 bytes, analyzed held by tenant within 320 MiB, with 1 MiB of
// distinct strings kept a column: past the first 1,048 values of a column
// every row shares one "(other)" (without the bound, each row holds its
// six strings: out of memory). At the real 16 MiB a column, the same run
// takes between 400 and 448 MiB, its writing included.
func TestLongDistinctStringsHeldOnce(t *testing.T) {
	memcap.Run(t, 320<<20, func(t *testing.T) {
		maxDistinctBytes = 1 << 20
		const n = 40_000
		dir := filepath.Join(t.TempDir(), "run")
		writeStringsRun(t, dir, n, func(col string, i int) string {
			switch col {
			case "outcome":
				return trace.OutcomeOK
			case "tenant", "model", "adapter", "phase", "role", "observed_finish_reason":
				return fmt.Sprintf("%s%0999d", col[:1], i)
			}
			return ""
		})
		rep, err := Analyze([]string{dir}, Options{By: []string{"tenant"}, Bootstrap: BootstrapOptions{Resamples: 50}})
		if err != nil {
			t.Fatal(err)
		}
		kept := maxDistinctBytes / 1000
		if rep.Requests.Counted != n || len(rep.Breakdowns["tenant"]) != maxGroups || len(rep.Sent.FinishReasons) != kept+1 {
			t.Errorf("%d counted, %d groups, %d finish reasons; want %d, %d, %d", rep.Requests.Counted, len(rep.Breakdowns["tenant"]), len(rep.Sent.FinishReasons), n, maxGroups, kept+1)
		}
	})
}

// writeStringsRun writes a run of n rows of the result schema, every
// value zero or empty but the strings value gives, with arrow-go's
// writer a row group of 4,000 rows at a time: the run writer holds a
// part's distinct strings several times over while it encodes.
func writeStringsRun(t *testing.T, dir string, n int, value func(col string, i int) string) {
	t.Helper()
	// The schema, from a part of one row the run writer wrote.
	model := filepath.Join(t.TempDir(), "model")
	writeRun(t, model, "run", listRows(1, nil), 0)
	pf, err := openParquet(filepath.Join(model, trace.ResultsDir, "part-00000.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
	if err != nil {
		t.Fatal(err)
	}
	schema, err := fr.Schema()
	pf.Close()
	if err != nil {
		t.Fatal(err)
	}
	rel := trace.ResultsDir + "/part-00000.parquet"
	if err := os.MkdirAll(filepath.Join(dir, trace.ResultsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < n; from += 4000 {
		b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
		for i := from; i < min(from+4000, n); i++ {
			for k, field := range schema.Fields() {
				if sb, ok := b.Field(k).(*array.StringBuilder); ok {
					sb.Append(value(field.Name, i))
				} else {
					b.Field(k).AppendEmptyValue()
				}
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: "run", Complete: true, Parts: []trace.Part{{Path: rel, Rows: int64(n)}}}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		t.Fatal(err)
	}
}

// TestEnvelopeLeavesPooledPhasesOut (issue 46, item 5): a ramp run of
// 260 phases keeps the first 256 as steps; the 4 pooled as "(other)"
// are no load level and are left out, the note saying so (before, every
// phase was a step, however many).
func TestEnvelopeLeavesPooledPhasesOut(t *testing.T) {
	keepDistinct(t, 256)
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(520, func(i int, r *trace.Result) { r.Phase = fmt.Sprintf("v%d", i/2) }), 0)
	env, err := FindEnvelope([]string{dir}, EnvelopeOptions{Attainment: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range env.Steps {
		if s.Name == otherValue {
			t.Fatalf("a step of the pooled phases: %+v", s)
		}
	}
	if len(env.Steps) != 256 || !strings.Contains(strings.Join(env.Notes, "\n"), "column phase has more than 256 distinct values: 8 row values first seen past them") {
		t.Errorf("%d steps, notes %q; want 256 and the phase note", len(env.Steps), env.Notes)
	}
}

// TestProbeWindowsBounded (issue 46, item 5): 16,400 probes, each sent in
// a 10-second window of its own, keep the first 16,384 windows; the 16
// later ones count overall, in no window, and a note says so (before,
// every window was kept, however many).
func TestProbeWindowsBounded(t *testing.T) {
	yes := true
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(16_400, func(i int, r *trace.Result) {
		sent := int64(i) * 10e9
		r.SentNs, r.Probe, r.ProbeCorrect = &sent, "arith", &yes
	}), 0)
	p, err := ProbeAccuracy([]string{dir}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Graded != 16_400 || len(p.Windows) != maxProbeWindows || !strings.Contains(strings.Join(p.Notes, "\n"), "16 graded probes were sent past the first 16384 windows") {
		t.Errorf("%d graded, %d windows, notes %q; want 16400, %d and the note", p.Graded, len(p.Windows), p.Notes, maxProbeWindows)
	}
}

// TestLargestValueSeenLateKeepsItsGroup: a gateway replay's first 300
// requests come from 300 tenants of one request each, then 100 from one
// tenant: the held breakdown by tenant shows that tenant first, with its
// 100 requests, and pools no value at read. Before, every value first
// seen past the 256th was "(other)", the largest tenant among them.
func TestLargestValueSeenLateKeepsItsGroup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(400, func(i int, r *trace.Result) {
		r.Tenant = fmt.Sprintf("t%d", min(i, 300))
	}), 0)
	rep, err := Analyze([]string{dir}, Options{By: []string{"tenant"}, Bootstrap: BootstrapOptions{Resamples: 50}})
	if err != nil {
		t.Fatal(err)
	}
	g := rep.Breakdowns["tenant"]
	if len(g) == 0 || g[0].Value != "t300" || g[0].Counted != 100 || strings.Contains(strings.Join(rep.Notes, "\n"), "pooled as") {
		t.Errorf("first group %s of %d requests, notes %q; want t300 with 100 requests and nothing pooled at read", g[0].Value, g[0].Counted, rep.Notes)
	}
}

// TestDistinctBytesBounded: past maxDistinctBytes of distinct strings a
// column's new values are pooled too, and the note says the bytes bound:
// 10 values of 100 bytes under a 512-byte bound keep 5 apart.
func TestDistinctBytesBounded(t *testing.T) {
	defer func(n int) { maxDistinctBytes = n }(maxDistinctBytes)
	maxDistinctBytes = 512
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(10, func(i int, r *trace.Result) { r.Tenant = fmt.Sprintf("%0100d", i) }), 0)
	rep, err := Analyze([]string{dir}, Options{By: []string{"tenant"}, Bootstrap: BootstrapOptions{Resamples: 50}})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("column tenant has more than 512 B of distinct values (5 of them): 5 row values first seen past them (the first %q) are pooled as \"(other)\"", fmt.Sprintf("%0100d", 5)[:40]+"…")
	if g := rep.Breakdowns["tenant"]; len(g) != 6 || !strings.Contains(strings.Join(rep.Notes, "\n"), want) {
		t.Errorf("%d groups, notes %q; want 6 and %q", len(g), rep.Notes, want)
	}
}
