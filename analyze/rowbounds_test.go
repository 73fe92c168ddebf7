package analyze

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
)

// TestLongCompareOutputsRefusesEndlessEventHashes (issue 46, item 5): two
// runs of 8 greedy answers of 4M chained event hashes each, a few KB on
// disk since Parquet stores the repeated value in a few bytes, are
// refused from the part's footer, naming the part, its row and the
// column, within 256 MiB (before, compare --outputs decoded and held
// them: out of memory).
func TestLongCompareOutputsRefusesEndlessEventHashes(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		a, b := endlessAnswersRun(t, 8, 4_000_000), endlessAnswersRun(t, 8, 4_000_000)
		_, err := CompareOutputs(a, b, 0.95)
		if err == nil {
			t.Fatal("compared answers of 4M event hashes each; want them refused")
		}
		for _, want := range []string{"part-00000.parquet", "row 1: column output_event_hashes holds 4000000 entries", fmt.Sprint(MaxRowEvents)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})
}

// endlessAnswersRun writes a run of n greedy ok answers of events chained
// hashes each, a row group per answer, with arrow-go's writer: it encodes
// a row as it goes, where the run writer would hold the part's values.
// Only the columns an answers comparison reads are written.
func endlessAnswersRun(t *testing.T, n, events int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(filepath.Join(dir, trace.ResultsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "request_id", Type: arrow.BinaryTypes.String}, {Name: "outcome", Type: arrow.BinaryTypes.String},
		{Name: "warmup", Type: arrow.FixedWidthTypes.Boolean}, {Name: "temperature", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "output_hashes", Type: arrow.ListOf(arrow.BinaryTypes.String)}, {Name: "output_event_hashes", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "observed_output_tokens", Type: arrow.PrimitiveTypes.Int64}, {Name: "observed_finish_reason", Type: arrow.BinaryTypes.String},
	}, nil)
	rel := trace.ResultsDir + "/part-00000.parquet"
	f, err := os.Create(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewGoAllocator()
	chain := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int32)
	chain.Append(true)
	vals := chain.ValueBuilder().(*array.Int32Builder)
	vals.Reserve(events)
	for range events {
		vals.UnsafeAppend(7)
	}
	chains := chain.NewArray() // one answer's, shared by every row
	for i := range n {
		b := array.NewRecordBuilder(mem, schema)
		b.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("r%d", i))
		b.Field(1).(*array.StringBuilder).Append(trace.OutcomeOK)
		b.Field(2).(*array.BooleanBuilder).Append(false)
		b.Field(3).(*array.Float64Builder).Append(0)
		hashes := b.Field(4).(*array.ListBuilder)
		hashes.Append(true)
		hashes.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("%032x", i))
		b.Field(5).(*array.ListBuilder).AppendNull()
		b.Field(6).(*array.Int64Builder).Append(int64(events))
		b.Field(7).(*array.StringBuilder).Append("stop")
		built := b.NewRecordBatch()
		cols := slices.Clone(built.Columns())
		cols[5] = chains
		rec := array.NewRecordBatch(schema, cols, 1)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		built.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: "r", Complete: true, Parts: []trace.Part{{Path: rel, Rows: int64(n)}},
		Options: map[string]any{"output_salt_fingerprint": "fp"}}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		t.Fatal(err)
	}
	return dir
}

// listRows is a run of n ok streamed rows of two token events each; edit
// changes row i (from 0).
func listRows(n int, edit func(i int, r *trace.Result)) []trace.Result {
	var rows []trace.Result
	for i := range n {
		sent, first, done := int64(i)*1e6, int64(i)*1e6+2e6, int64(i)*1e6+5e6
		r := trace.Result{Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", i), Model: "m"},
			Shape:  trace.Shape{InputTokens: 4, OutputTokens: 2, MaxTokens: 2, API: trace.APIChat, Stream: true, N: 1},
			SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{2e6, 5e6},
			ObservedOutputTokens: 2, Outcome: trace.OutcomeOK}
		if edit != nil {
			edit(i, &r)
		}
		rows = append(rows, r)
	}
	return rows
}

// TestRowListsAndStringsBounded (issue 46, item 5): a row whose list or
// string passes its bound is refused naming the part, the row and the
// column, whether the footer proves it (every row over), a scan of the
// levels finds it (a row group over batchEntries) or the decoded batch
// shows it; before, each was read and held.
func TestRowListsAndStringsBounded(t *testing.T) {
	long := make([]int64, MaxRowEvents+1)
	for i := range long {
		long[i] = 5e6
	}
	for _, c := range []struct {
		name     string
		rows     []trace.Result
		entries  int64 // batchEntries during the read
		want     []string
		analysis Options
	}{
		{"one row of too many token events, decoded", listRows(10, func(i int, r *trace.Result) {
			if i == 6 {
				r.TokenTimesNs = long
			}
		}), 1 << 22, []string{"row 7: column token_times_ns holds 262145 entries, at most 262144"}, Options{}},
		{"one row of too many token events, found by the level scan", listRows(10, func(i int, r *trace.Result) {
			if i == 6 {
				r.TokenTimesNs = long
			}
		}), 1000, []string{"row 7: column token_times_ns holds 262145 or more entries, at most 262144"}, Options{}},
		{"every row over, from the footer", listRows(2, func(i int, r *trace.Result) { r.PrefixBlocks = long }), 1 << 22,
			[]string{"rows 1 to 2: column prefix_blocks holds 524290 entries, more than 2 rows of at most 262144 each"}, Options{}},
		{"too many features", listRows(5, func(i int, r *trace.Result) {
			if i == 3 {
				r.FeaturesSent = make([]string, trace.MaxFeatures+1)
			}
		}), 1 << 22, []string{"row 4: column features_sent holds 65 entries, at most 64"}, Options{}},
		{"a model name of 2,000 bytes", listRows(5, func(i int, r *trace.Result) {
			if i == 2 {
				r.Model = strings.Repeat("m", 2000)
			}
		}), 1 << 22, []string{"row 3: column model holds 2000 bytes, at most 1024"}, Options{By: []string{"model"}}},
		{"a session id of 2,000 bytes on every row", listRows(5, func(i int, r *trace.Result) { r.SessionID = strings.Repeat("s", 2000) }), 1 << 22,
			[]string{"row 1: column session_id holds 2000 bytes, at most 1024"}, Options{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func(old int64) { batchEntries = old }(batchEntries)
			batchEntries = c.entries
			dir := filepath.Join(t.TempDir(), "run")
			writeRun(t, dir, "run", c.rows, 0)
			_, err := Analyze([]string{dir}, c.analysis)
			if err == nil {
				t.Fatal("analyzed; want the row refused")
			}
			for _, want := range append(c.want, "part-00000.parquet") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestRowGroupsReadInBatchesThatFit: a row group of more list entries
// than batchEntries is read in batches of as many rows as fit its longest
// row, to the same report as one batch.
func TestRowGroupsReadInBatchesThatFit(t *testing.T) {
	rows := listRows(3000, func(i int, r *trace.Result) {
		n := 2 + i%50
		r.TokenTimesNs = make([]int64, n)
		for k := range n {
			r.TokenTimesNs[k] = 2e6 + int64(k)*1e5
		}
		r.ObservedOutputTokens = int64(n)
	})
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", rows, 0)
	opts := Options{Bootstrap: BootstrapOptions{Resamples: 100, Seed: 1}}
	want, err := Analyze([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func(old int64) { batchEntries = old }(batchEntries)
	batchEntries = 500
	pf, err := openParquet(filepath.Join(dir, "results", "part-00000.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	leaves := []int{pf.MetaData().Schema.ColumnIndexByName("token_times_ns.list.element")}
	if plan, err := planPart(pf, leaves); err != nil || plan.batchRows != 500/51 {
		t.Fatalf("plan %+v, %v; want batches of %d rows (the longest row holds 51 events)", plan, err, 500/51)
	}
	got, err := Analyze([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Metrics["itl_ms"], want.Metrics["itl_ms"]) || !reflect.DeepEqual(got.Requests, want.Requests) {
		t.Errorf("in small batches: itl %+v, requests %+v; in one: %+v, %+v", got.Metrics["itl_ms"], got.Requests, want.Metrics["itl_ms"], want.Requests)
	}
}

// TestLongRepeatedLongStringIsReadOnce (issue 46, item 5): a model name
// of 512 KB on each of 10,000 rows, kept once in the part's dictionary,
// is read as a dictionary (one copy) and refused naming its first row,
// within 256 MiB (before, every row got its own copy: 5 GB).
func TestLongRepeatedLongStringIsReadOnce(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		model := strings.Repeat("m", 512<<10)
		dir := filepath.Join(t.TempDir(), "run")
		writeRun(t, dir, "run", listRows(10_000, func(i int, r *trace.Result) { r.Model = model }), 0)
		_, err := Analyze([]string{dir}, Options{By: []string{"model"}})
		if err == nil || !strings.Contains(err.Error(), "row 1: column model holds 524288 bytes, at most 1024") {
			t.Fatalf("error %v; want row 1's model refused", err)
		}
	})
}

// TestAnswersCountTowardTheRowsHeld (issue 46, item 5): 100 rows of
// 50,000 token events each hold as much as 94,441 rows of a few (the
// footer counts an empty prefix_blocks list as one entry): above an
// in-memory limit of 10,000 rows they are streamed, and say why (before,
// the 100 rows were held whatever their lists held).
func TestAnswersCountTowardTheRowsHeld(t *testing.T) {
	times := make([]int64, 50_000)
	for i := range times {
		times[i] = 2e6 + int64(i)
	}
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, "run", listRows(100, func(i int, r *trace.Result) { r.TokenTimesNs, r.ObservedOutputTokens = times, int64(len(times)) }), 0)
	rep, err := Analyze([]string{dir}, Options{InMemoryRows: 10_000, Bootstrap: BootstrapOptions{Resamples: 50}})
	if err != nil {
		t.Fatal(err)
	}
	held := int64(100 + (100*50_000+100)/heldEntriesPerRow)
	if s := rep.Streamed; s == nil || s.Rows != 100 || s.HeldRows != held {
		t.Fatalf("streamed %+v; want 100 rows counted as %d", s, held)
	}
	if want := fmt.Sprintf("streamed analysis of 100 result rows, whose token times and prefix blocks count as %d, (over 10000 held in memory)", held); !strings.Contains(strings.Join(rep.Notes, "\n"), want) {
		t.Errorf("notes %q; want %q", rep.Notes, want)
	}
	if m := rep.Metrics["itl_ms"]; m.N != 100*(50_000-1) {
		t.Errorf("ITL n %d; want %d", m.N, 100*(50_000-1))
	}
}
