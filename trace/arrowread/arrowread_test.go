package arrowread_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/servetrace/servetrace/trace"
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

// assertColumnOf checks column name against f of each written row.
func assertColumnOf[T any](t *testing.T, cols map[string][]any, name string, rows []T, f func(T) any) {
	t.Helper()
	want := make([]any, len(rows))
	for i, r := range rows {
		want[i] = f(r)
	}
	assertColumn(t, cols, name, want)
}

func TestArrowReadsRequestBucketColumnByColumn(t *testing.T) {
	dir := t.TempDir()
	in := sampleRequests(300)
	in[5].FinishReason = trace.Ptr("length")
	in[5].Cancelled = trace.Ptr(true)
	in[5].CancelAfterMs = trace.Ptr(12.5)
	in[7].Temperature = trace.Ptr(0.7)
	in[7].Phase = "warmup"
	in[9].Media = trace.Media{ImageCount: 2, ImageWidthsPx: []int32{640, 0}, ImageHeightsPx: []int32{480, 0}, ImageIDs: []int64{-7, 42},
		AudioCount: 1, AudioMs: []int64{1500}, AudioIDs: []int64{9}}
	in[9].Calls = trace.Calls{ToolCount: 3, ToolTokens: 210, ToolChoice: "required", OutputFormat: trace.OutputJSONSchema,
		SchemaTokens: 88, SchemaID: -5, Logprobs: true, StopCount: 2, ReasoningEffort: "high"}
	in[9].TopLogprobs, in[9].Seed, in[9].TopK = trace.Ptr(int32(5)), trace.Ptr(int64(-1234)), trace.Ptr(int32(40))
	in[9].PresencePenalty, in[9].FrequencyPenalty = trace.Ptr(-0.5), trace.Ptr(1.25)
	in[9].ImageTokens, in[9].AudioTokens = trace.Ptr(int64(1200)), trace.Ptr(int64(38))
	in[8].ParentIDs, in[8].ToolMs, in[8].Role = []string{in[2].RequestID, in[3].RequestID}, trace.Ptr(250.5), trace.RoleSubAgent
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range in {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	// Rows in file order, read by parquet-go (the writer's library), are
	// the reference order.
	m := mustManifest(t, dir)
	total := 0
	for _, p := range m.Parts {
		path := filepath.Join(dir, p.Path)
		rows, err := parquet.ReadFile[trace.Request](path)
		if err != nil {
			t.Fatal(err)
		}
		total += len(rows)
		cols := readWithArrow(t, path)
		if len(cols) != 54 {
			t.Errorf("%s: %d columns, want 54 (the request record)", p.Path, len(cols))
		}
		col := func(name string, f func(r trace.Request) any) { assertColumnOf(t, cols, name, rows, f) }
		col("request_id", func(r trace.Request) any { return r.RequestID })
		col("session_id", func(r trace.Request) any { return r.SessionID })
		col("turn", func(r trace.Request) any { return r.Turn })
		col("tenant", func(r trace.Request) any { return r.Tenant })
		col("model", func(r trace.Request) any { return r.Model })
		col("adapter", func(r trace.Request) any { return r.Adapter })
		col("ts", func(r trace.Request) any { return r.TS })
		col("input_tokens", func(r trace.Request) any { return r.InputTokens })
		col("output_tokens", func(r trace.Request) any { return r.OutputTokens })
		col("max_tokens", func(r trace.Request) any { return r.MaxTokens })
		col("api", func(r trace.Request) any { return r.API })
		col("stream", func(r trace.Request) any { return r.Stream })
		col("temperature", func(r trace.Request) any { return optional(r.Temperature) })
		col("top_p", func(r trace.Request) any { return optional(r.TopP) })
		col("n", func(r trace.Request) any { return r.N })
		col("features", func(r trace.Request) any { return listOf(r.Features) })
		col("prefix_blocks", func(r trace.Request) any { return listOf(r.PrefixBlocks) })
		col("finish_reason", func(r trace.Request) any { return optional(r.FinishReason) })
		col("status", func(r trace.Request) any { return optional(r.Status) })
		col("cancelled", func(r trace.Request) any { return optional(r.Cancelled) })
		col("cached_tokens", func(r trace.Request) any { return optional(r.CachedTokens) })
		col("ttft_ms", func(r trace.Request) any { return optional(r.TTFTMs) })
		col("e2e_ms", func(r trace.Request) any { return optional(r.E2EMs) })
		col("cancel_after_ms", func(r trace.Request) any { return optional(r.CancelAfterMs) })
		col("cancel_after_tokens", func(r trace.Request) any { return optional(r.CancelAfterTokens) })
		col("read_delay_ms", func(r trace.Request) any { return optional(r.ReadDelayMs) })
		col("think_time_ms", func(r trace.Request) any { return optional(r.ThinkTimeMs) })
		col("phase", func(r trace.Request) any { return r.Phase })
		col("parent_ids", func(r trace.Request) any { return listOf(r.ParentIDs) })
		col("tool_ms", func(r trace.Request) any { return optional(r.ToolMs) })
		col("role", func(r trace.Request) any { return r.Role })
		col("image_count", func(r trace.Request) any { return r.ImageCount })
		col("image_widths_px", func(r trace.Request) any { return listOf(r.ImageWidthsPx) })
		col("image_heights_px", func(r trace.Request) any { return listOf(r.ImageHeightsPx) })
		col("image_ids", func(r trace.Request) any { return listOf(r.ImageIDs) })
		col("audio_count", func(r trace.Request) any { return r.AudioCount })
		col("audio_ms", func(r trace.Request) any { return listOf(r.AudioMs) })
		col("audio_ids", func(r trace.Request) any { return listOf(r.AudioIDs) })
		col("tool_count", func(r trace.Request) any { return r.ToolCount })
		col("tool_tokens", func(r trace.Request) any { return r.ToolTokens })
		col("tool_choice", func(r trace.Request) any { return r.ToolChoice })
		col("output_format", func(r trace.Request) any { return r.OutputFormat })
		col("schema_tokens", func(r trace.Request) any { return r.SchemaTokens })
		col("schema_id", func(r trace.Request) any { return r.SchemaID })
		col("logprobs", func(r trace.Request) any { return r.Logprobs })
		col("stop_count", func(r trace.Request) any { return r.StopCount })
		col("reasoning_effort", func(r trace.Request) any { return r.ReasoningEffort })
		col("top_logprobs", func(r trace.Request) any { return optional(r.TopLogprobs) })
		col("seed", func(r trace.Request) any { return optional(r.Seed) })
		col("top_k", func(r trace.Request) any { return optional(r.TopK) })
		col("presence_penalty", func(r trace.Request) any { return optional(r.PresencePenalty) })
		col("frequency_penalty", func(r trace.Request) any { return optional(r.FrequencyPenalty) })
		col("image_tokens", func(r trace.Request) any { return optional(r.ImageTokens) })
		col("audio_tokens", func(r trace.Request) any { return optional(r.AudioTokens) })
	}
	if total != len(in) {
		t.Fatalf("arrow saw %d rows in all parts, wrote %d", total, len(in))
	}
}

func TestArrowReadsResultsColumnByColumn(t *testing.T) {
	run := t.TempDir()
	w, err := trace.NewResultWriter(run, 0)
	if err != nil {
		t.Fatal(err)
	}
	var in []trace.Result
	for i, q := range sampleRequests(50) {
		r := trace.Result{Identity: q.Identity, Shape: q.Shape, Phase: q.Phase,
			ScheduledNs: int64(i) * 1e6, AdmittedNs: int64(i)*1e6 + 10, Outcome: trace.OutcomeOK, HTTPStatus: 200, RunID: "run1", Shard: 2}
		if i%5 != 0 {
			r.SentNs = trace.Ptr(int64(i)*1e6 + 20)
			r.FirstTokenNs = trace.Ptr(int64(i)*1e6 + 5000)
			r.DoneNs = trace.Ptr(int64(i)*1e6 + 9000)
			r.TokenTimesNs = []int64{4980, 6000, 8000}
			r.UsageCompletionTokens = trace.Ptr(int64(3))
			r.ObservedOutputTokens = 3
		} else {
			r.Outcome, r.HTTPStatus, r.Error = trace.OutcomeHTTPError, 500, "HTTP 500"
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
	col := func(name string, f func(r trace.Result) any) { assertColumnOf(t, cols, name, in, f) }
	col("request_id", func(r trace.Result) any { return r.RequestID })
	col("input_tokens", func(r trace.Result) any { return r.InputTokens })
	col("prefix_blocks", func(r trace.Result) any { return listOf(r.PrefixBlocks) })
	col("scheduled_ns", func(r trace.Result) any { return r.ScheduledNs })
	col("admitted_ns", func(r trace.Result) any { return r.AdmittedNs })
	col("sent_ns", func(r trace.Result) any { return optional(r.SentNs) })
	col("first_token_ns", func(r trace.Result) any { return optional(r.FirstTokenNs) })
	col("first_chunk_ns", func(r trace.Result) any { return optional(r.FirstChunkNs) })
	col("done_ns", func(r trace.Result) any { return optional(r.DoneNs) })
	col("token_times_ns", func(r trace.Result) any { return listOf(r.TokenTimesNs) })
	col("usage_completion_tokens", func(r trace.Result) any { return optional(r.UsageCompletionTokens) })
	col("observed_output_tokens", func(r trace.Result) any { return r.ObservedOutputTokens })
	col("http_status", func(r trace.Result) any { return r.HTTPStatus })
	col("outcome", func(r trace.Result) any { return r.Outcome })
	col("error", func(r trace.Result) any { return r.Error })
	col("run_id", func(r trace.Result) any { return r.RunID })
	col("shard", func(r trace.Result) any { return r.Shard })
	col("warmup", func(r trace.Result) any { return r.Warmup })
}

// sampleRequests returns n requests over three hours, written out of time
// order, with every optional column set on some rows and not on others.
func sampleRequests(n int) []trace.Request {
	base := time.Date(2024, 1, 1, 22, 30, 0, 0, time.UTC).UnixMicro()
	rows := make([]trace.Request, n)
	for i := range rows {
		at := base + int64((i*7919)%n)*(3*3600*1_000_000/int64(n)) // a stride coprime with n
		r := trace.Request{
			Identity: trace.Identity{RequestID: fmt.Sprintf("r%d", i), SessionID: fmt.Sprintf("s%d", i/3), Turn: int32(i % 3), Model: "m", Tenant: fmt.Sprintf("t%d", i%4)},
			TS:       at,
			Shape:    trace.Shape{InputTokens: int64(100 + i), OutputTokens: int64(i % 50), MaxTokens: int64(i%50 + 1), API: trace.APIChat, Stream: true, N: 1, PrefixBlocks: []int64{int64(i), int64(i * 2)}},
		}
		if i%2 == 0 {
			r.TTFTMs, r.Status, r.Features = trace.Ptr(float64(i)/2), trace.Ptr(int32(200)), []string{"tools"}
		}
		rows[i] = r
	}
	return rows
}

func mustManifest(t *testing.T, dir string) *trace.Manifest {
	t.Helper()
	m, err := trace.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
