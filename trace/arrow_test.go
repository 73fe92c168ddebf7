package trace

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// readWithArrow reads a Parquet file with arrow-go, an independent reader of
// what parquet-go wrote, and returns its columns by name as Go values (nil
// for null), one slice entry per row.
func readWithArrow(t *testing.T, path string) map[string][]any {
	t.Helper()
	// A plain Go allocator: arrow-go v18.8's delta-bit-pack decoder (used
	// for our delta-encoded ts column) does not return 64 bytes per column
	// chunk to a checked allocator; that leak is the library's, not ours.
	mem := memory.NewGoAllocator()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatalf("arrow-go cannot open %s: %v", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("arrow-go cannot read %s: %v", path, err)
	}
	defer tbl.Release()
	cols := map[string][]any{}
	for i := 0; i < int(tbl.NumCols()); i++ {
		col := tbl.Column(i)
		var vals []any
		for _, chunk := range col.Data().Chunks() {
			for j := 0; j < chunk.Len(); j++ {
				vals = append(vals, arrowValue(t, chunk, j))
			}
		}
		cols[col.Name()] = vals
	}
	return cols
}

func arrowValue(t *testing.T, a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Int32:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.Boolean:
		return a.Value(i)
	case *array.Timestamp:
		return int64(a.Value(i))
	case *array.List:
		start, end := a.ValueOffsets(i)
		var out []any
		for k := start; k < end; k++ {
			out = append(out, arrowValue(t, a.ListValues(), int(k)))
		}
		return out
	case *array.Dictionary:
		return arrowValue(t, a.Dictionary(), a.GetValueIndex(i))
	}
	t.Fatalf("unexpected arrow type %T", a)
	return nil
}

func optional[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func listOf[T any](s []T) any {
	if len(s) == 0 {
		return []any(nil)
	}
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func assertColumn(t *testing.T, cols map[string][]any, name string, want []any) {
	t.Helper()
	got, ok := cols[name]
	if !ok {
		t.Errorf("column %s missing from the file", name)
		return
	}
	if len(got) != len(want) {
		t.Errorf("column %s: %d values, want %d", name, len(got), len(want))
		return
	}
	for i := range want {
		g, w := got[i], want[i]
		gl, gIsList := g.([]any)
		wl, wIsList := w.([]any)
		if gIsList || wIsList {
			if !slices.Equal(gl, wl) {
				t.Errorf("column %s row %d: arrow read %v, wrote %v", name, i, g, w)
			}
			continue
		}
		if g != w {
			t.Errorf("column %s row %d: arrow read %v (%T), wrote %v (%T)", name, i, g, g, w, w)
		}
	}
}

func TestArrowReadsRequestBucketColumnByColumn(t *testing.T) {
	dir := t.TempDir()
	in := sampleRequests(300)
	in[5].FinishReason = Ptr("length")
	in[5].Cancelled = Ptr(true)
	in[5].CancelAfterMs = Ptr(12.5)
	in[7].Temperature = Ptr(0.7)
	in[7].Phase = "warmup"
	w, err := NewBucketWriter(dir, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range in {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&Manifest{}); err != nil {
		t.Fatal(err)
	}
	// Rows in file order, read by our own reader, are the reference order.
	m := mustManifest(t, dir)
	total := 0
	for _, p := range m.Parts {
		path := filepath.Join(dir, p.Path)
		rows, err := readPartFile[Request](path)
		if err != nil {
			t.Fatal(err)
		}
		total += len(rows)
		cols := readWithArrow(t, path)
		if len(cols) != 28 {
			t.Errorf("%s: %d columns, want 28 (the request record)", p.Path, len(cols))
		}
		col := func(name string, f func(r Request) any) {
			want := make([]any, len(rows))
			for i, r := range rows {
				want[i] = f(r)
			}
			assertColumn(t, cols, name, want)
		}
		col("request_id", func(r Request) any { return r.RequestID })
		col("session_id", func(r Request) any { return r.SessionID })
		col("turn", func(r Request) any { return r.Turn })
		col("tenant", func(r Request) any { return r.Tenant })
		col("model", func(r Request) any { return r.Model })
		col("adapter", func(r Request) any { return r.Adapter })
		col("ts", func(r Request) any { return r.TS })
		col("input_tokens", func(r Request) any { return r.InputTokens })
		col("output_tokens", func(r Request) any { return r.OutputTokens })
		col("max_tokens", func(r Request) any { return r.MaxTokens })
		col("api", func(r Request) any { return r.API })
		col("stream", func(r Request) any { return r.Stream })
		col("temperature", func(r Request) any { return optional(r.Temperature) })
		col("top_p", func(r Request) any { return optional(r.TopP) })
		col("n", func(r Request) any { return r.N })
		col("features", func(r Request) any { return listOf(r.Features) })
		col("prefix_blocks", func(r Request) any { return listOf(r.PrefixBlocks) })
		col("finish_reason", func(r Request) any { return optional(r.FinishReason) })
		col("status", func(r Request) any { return optional(r.Status) })
		col("cancelled", func(r Request) any { return optional(r.Cancelled) })
		col("cached_tokens", func(r Request) any { return optional(r.CachedTokens) })
		col("ttft_ms", func(r Request) any { return optional(r.TTFTMs) })
		col("e2e_ms", func(r Request) any { return optional(r.E2EMs) })
		col("cancel_after_ms", func(r Request) any { return optional(r.CancelAfterMs) })
		col("cancel_after_tokens", func(r Request) any { return optional(r.CancelAfterTokens) })
		col("read_delay_ms", func(r Request) any { return optional(r.ReadDelayMs) })
		col("think_time_ms", func(r Request) any { return optional(r.ThinkTimeMs) })
		col("phase", func(r Request) any { return r.Phase })
	}
	if total != len(in) {
		t.Fatalf("arrow saw %d rows in all parts, wrote %d", total, len(in))
	}
}

func TestArrowReadsResultsColumnByColumn(t *testing.T) {
	run := t.TempDir()
	w, err := NewResultWriter(run, 0)
	if err != nil {
		t.Fatal(err)
	}
	var in []Result
	for i, q := range sampleRequests(50) {
		r := Result{Identity: q.Identity, Shape: q.Shape, Phase: q.Phase,
			ScheduledNs: int64(i) * 1e6, AdmittedNs: int64(i)*1e6 + 10, Outcome: OutcomeOK, HTTPStatus: 200, RunID: "run1", Shard: 2}
		if i%5 != 0 {
			r.SentNs = Ptr(int64(i)*1e6 + 20)
			r.FirstTokenNs = Ptr(int64(i)*1e6 + 5000)
			r.DoneNs = Ptr(int64(i)*1e6 + 9000)
			r.TokenTimesNs = []int64{4980, 6000, 8000}
			r.UsageCompletionTokens = Ptr(int64(3))
			r.ObservedOutputTokens = 3
		} else {
			r.Outcome, r.HTTPStatus, r.Error = OutcomeHTTPError, 500, "HTTP 500"
		}
		in = append(in, r)
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	cols := readWithArrow(t, filepath.Join(run, w.Parts()[0].Path))
	col := func(name string, f func(r Result) any) {
		want := make([]any, len(in))
		for i, r := range in {
			want[i] = f(r)
		}
		assertColumn(t, cols, name, want)
	}
	col("request_id", func(r Result) any { return r.RequestID })
	col("input_tokens", func(r Result) any { return r.InputTokens })
	col("prefix_blocks", func(r Result) any { return listOf(r.PrefixBlocks) })
	col("scheduled_ns", func(r Result) any { return r.ScheduledNs })
	col("admitted_ns", func(r Result) any { return r.AdmittedNs })
	col("sent_ns", func(r Result) any { return optional(r.SentNs) })
	col("first_token_ns", func(r Result) any { return optional(r.FirstTokenNs) })
	col("first_chunk_ns", func(r Result) any { return optional(r.FirstChunkNs) })
	col("done_ns", func(r Result) any { return optional(r.DoneNs) })
	col("token_times_ns", func(r Result) any { return listOf(r.TokenTimesNs) })
	col("usage_completion_tokens", func(r Result) any { return optional(r.UsageCompletionTokens) })
	col("observed_output_tokens", func(r Result) any { return r.ObservedOutputTokens })
	col("http_status", func(r Result) any { return r.HTTPStatus })
	col("outcome", func(r Result) any { return r.Outcome })
	col("error", func(r Result) any { return r.Error })
	col("run_id", func(r Result) any { return r.RunID })
	col("shard", func(r Result) any { return r.Shard })
	col("warmup", func(r Result) any { return r.Warmup })
}
