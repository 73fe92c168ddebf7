package analyze

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/servetrace/servetrace/analyze/peer"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace"
)

// null marks an absent optional int64 in resultColumns.
const null = math.MinInt64

// resultColumns holds the result columns analysis needs, column by column,
// read with arrow-go record batches: only these columns are decoded, and no
// per-row struct is built.
type resultColumns struct {
	n                            int
	warmup, stream               []bool
	outcome                      []string
	scheduled, admitted          []int64
	sent, firstChunk, firstToken []int64 // null where absent
	done, usagePrompt            []int64 // null where absent
	observedOut, promptSent      []int64
	// Row i's token times are tokenTimes[tokenOffsets[i]:tokenOffsets[i+1]].
	tokenOffsets []int64
	tokenTimes   []int64

	// What was sent, and how to group it.
	tenant, model, adapter, phase []string
	role                          []string // "" in runs from before agent graphs
	finishReason                  []string
	turn                          []int64
	status                        []int64 // HTTP status
	// requestID is read only when wantIDs is set (--vs-logged).
	requestID []string
	wantIDs   bool
	// lean leaves out groupColumns: they stay empty.
	lean                         bool
	inputTokens, requestedOutput []int64 // intended prompt tokens; output tokens the workload asked for
	maxTokens                    []int64
	featureOffsets               []int64
	features                     []string
	prefixOffsets                []int64
	prefixBlocks                 []int64

	// The workload contract (absent from version-1 parts: null and
	// empty): the first answer (not reasoning) event, reasoning tokens,
	// and each request's features sent, stripped and refused.
	firstAnswer, reasoning []int64
	// usageCached is the server's cached prompt tokens (null where
	// absent, and in parts written before the column).
	usageCached []int64
	// tap, when set, reads every batch read too (readPart).
	tap      *batchTap
	contract [3]stringLists // sent, stripped, refused
	// names interns the string columns' values, a bounded number of them;
	// chunks of one streamed analysis share it.
	names *columnNames
}

// stringsOf is the interner of column's values.
func (c *resultColumns) stringsOf(column string) *boundedValues {
	if c.names == nil {
		c.names = &columnNames{}
	}
	return c.names.of(column)
}

// stringLists is a list-of-strings column: row i's values are
// vals[offs[i]:offs[i+1]].
type stringLists struct {
	offs []int64
	vals []string
}

func (l *stringLists) of(i int) []string { return l.vals[l.offs[i]:l.offs[i+1]] }

// contractLists names the columns of resultColumns.contract, in order.
var contractLists = [3]string{"features_sent", "features_stripped", "features_refused"}

// tokenTimesOf returns row i's token times.
func (c *resultColumns) tokenTimesOf(i int) []int64 {
	return c.tokenTimes[c.tokenOffsets[i]:c.tokenOffsets[i+1]]
}

// featuresOf returns row i's feature tags.
func (c *resultColumns) featuresOf(i int) []string {
	return c.features[c.featureOffsets[i]:c.featureOffsets[i+1]]
}

// prefixBlocksOf returns row i's prefix block ids.
func (c *resultColumns) prefixBlocksOf(i int) []int64 {
	return c.prefixBlocks[c.prefixOffsets[i]:c.prefixOffsets[i+1]]
}

// analysisColumns are the Parquet leaf columns read, by top-level name.
var analysisColumns = []string{"warmup", "stream", "outcome", "scheduled_ns", "admitted_ns", "sent_ns", "first_chunk_ns", "first_token_ns",
	"done_ns", "usage_prompt_tokens", "observed_output_tokens", "prompt_tokens_sent", "token_times_ns",
	"tenant", "model", "adapter", "phase", "role", "observed_finish_reason", "turn", "http_status", "input_tokens", "output_tokens", "max_tokens", "features", "prefix_blocks",
	"first_answer_ns", "observed_reasoning_tokens", "usage_cached_tokens", "features_sent", "features_stripped", "features_refused"}

// readResultColumns reads the result parts of a run directory (those
// trace.ResultParts lists) into cols, checking each part's row count and
// every row's values.
func readResultColumns(ctx context.Context, runDir string, cols *resultColumns) error {
	parts, err := trace.ResultParts(runDir)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(runDir, p.Path)
		first := cols.n
		if err := cols.readPart(path); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if p.Rows >= 0 && int64(cols.n-first) != p.Rows {
			return fmt.Errorf("run %s: %s holds %d rows, %s says %d: the part was replaced", runDir, p.Path, cols.n-first, trace.RunInfoName, p.Rows)
		}
		if err := cols.validate(first); err != nil {
			return fmt.Errorf("run %s: %s %w", runDir, p.Path, err)
		}
	}
	return nil
}

// validate checks rows from first on as trace.Result.Validate does for the
// values analysis uses: counts within 0..trace.MaxTokens, times in order
// from sent, token times from zero and never decreasing, a known outcome.
// A fault names its row, counted from 1 within the part.
func (c *resultColumns) validate(first int) error { return c.validateFrom(first, 0) }

// validateFrom is validate for rows that follow base rows of their part
// not held here: a fault names row i−first+1+base.
func (c *resultColumns) validateFrom(first, base int) error {
	fail := func(i int, field string, v int64, why string) error {
		return fmt.Errorf("row %d: %w", i-first+1+base, &trace.FieldError{Field: field, Value: fmt.Sprint(v), Reason: why})
	}
	for i := first; i < c.n; i++ {
		for _, f := range []struct {
			name string
			v    int64
		}{{"observed_output_tokens", c.observedOut[i]}, {"prompt_tokens_sent", c.promptSent[i]}, {"input_tokens", c.inputTokens[i]},
			{"output_tokens", c.requestedOutput[i]}, {"max_tokens", c.maxTokens[i]}, {"usage_prompt_tokens", c.usagePrompt[i]},
			{"observed_reasoning_tokens", c.reasoning[i]}, {"usage_cached_tokens", c.usageCached[i]}} {
			if f.v != null && (f.v < 0 || f.v > trace.MaxTokens) {
				return fail(i, f.name, f.v, fmt.Sprintf("must be 0 to %d", trace.MaxTokens))
			}
		}
		if sent := c.sent[i]; sent != null {
			for _, f := range []struct {
				name string
				v    int64
			}{{"first_chunk_ns", c.firstChunk[i]}, {"first_token_ns", c.firstToken[i]}, {"first_answer_ns", c.firstAnswer[i]}, {"done_ns", c.done[i]}} {
				if f.v != null && f.v < sent {
					return fail(i, f.name, f.v, fmt.Sprintf("is before sent_ns %d", sent))
				}
			}
		}
		prev := int64(0)
		for _, t := range c.tokenTimesOf(i) {
			if t < prev {
				return fail(i, "token_times_ns", t, "must start at 0 or later and never decrease")
			}
			prev = t
		}
		if !slices.Contains(trace.Outcomes, c.outcome[i]) {
			return fmt.Errorf("row %d: %w", i-first+1+base, &trace.FieldError{Field: "outcome", Value: fmt.Sprintf("%q", c.outcome[i]), Reason: "is not one of the outcome classes (ok, http_error, ...)"})
		}
	}
	return nil
}

// readPart appends one Parquet part's rows, handing each batch to c's tap
// too.
func (c *resultColumns) readPart(path string) error {
	return forEachBatch(path, c.tap.wants(c.wantsColumn), c.tap.then(c.appendBatch))
}

// batchTap is a second reader of the batches an analysis reads (the probe
// and session tallies), so the parts are read once for both.
type batchTap struct {
	columns []string
	fn      func(arrow.RecordBatch) error
}

// wants adds the tap's columns to a reader's; a nil tap adds none.
func (t *batchTap) wants(want func(top string) bool) func(top string) bool {
	if t == nil {
		return want
	}
	return func(top string) bool { return want(top) || slices.Contains(t.columns, top) }
}

// then runs the tap on a batch before fn; a nil tap leaves fn as it is.
func (t *batchTap) then(fn func(arrow.RecordBatch) error) func(arrow.RecordBatch) error {
	if t == nil {
		return fn
	}
	return func(rec arrow.RecordBatch) error {
		if err := t.fn(rec); err != nil {
			return err
		}
		return fn(rec)
	}
}

// wantsColumn reports whether top-level column top is one c reads.
func (c *resultColumns) wantsColumn(top string) bool {
	if c.lean && slices.Contains(groupColumns, top) {
		return false
	}
	return slices.Contains(analysisColumns, top) || c.wantIDs && top == "request_id"
}

// groupColumns are read only to group rows (breakdowns, repeats): a lean
// read, the streamed analysis's, leaves them out.
var groupColumns = []string{"tenant", "model", "adapter", "phase", "role", "turn", "http_status"}

// openParquet opens a Parquet part for arrow-go's reader, only if it is a
// regular file (a named pipe in a run dir would block the read).
func openParquet(path string) (*file.Reader, error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	pf, err := file.NewParquetReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return pf, nil // its Close closes f
}

// batchColumn is a record batch's top-level column of that name, nil
// when the batch has none (a part from before the column existed).
func batchColumn(rec arrow.RecordBatch, name string) arrow.Array {
	if idx := rec.Schema().FieldIndices(name); len(idx) > 0 {
		return rec.Column(idx[0])
	}
	return nil
}

// forEachResultBatch hands fn a record batch of the named top-level
// columns at a time, over every part of the servetrace runs among dirs
// (other tools' result files are passed over): for a report's small
// passes that need a few columns of every row.
func forEachResultBatch(dirs, columns []string, fn func(arrow.RecordBatch) error) error {
	want := func(top string) bool { return slices.Contains(columns, top) }
	for _, dir := range dirs {
		if peer.IsResultFile(dir) {
			continue
		}
		parts, err := trace.ResultParts(dir)
		if err != nil {
			return err
		}
		for _, part := range parts {
			path := filepath.Join(dir, part.Path)
			if err := forEachBatch(path, want, fn); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
		}
	}
	return nil
}

// forEachBatch reads the top-level columns want accepts of one Parquet
// part with arrow-go record batches, handing each batch to fn; only those
// columns are decoded, and each row is held to the bounds of rowbounds.go
// (the footer's counts checked before any row is decoded).
func forEachBatch(path string, want func(top string) bool, fn func(arrow.RecordBatch) error) (err error) {
	defer func() {
		if r := recover(); r != nil { // a corrupt file must not take the process down
			err = fmt.Errorf("corrupt Parquet data: %v", r)
		}
	}()
	pf, err := openParquet(path)
	if err != nil {
		return err
	}
	defer pf.Close()
	schema := pf.MetaData().Schema
	var leaves []int
	for i := range schema.NumColumns() {
		top, _, _ := strings.Cut(schema.Column(i).Path(), ".")
		if want(top) {
			leaves = append(leaves, i)
		}
	}
	plan, err := planPart(pf, leaves)
	if err != nil {
		return err
	}
	props := pqarrow.ArrowReadProperties{Parallel: true, BatchSize: plan.batchRows}
	for _, leaf := range plan.dict {
		props.SetReadDict(leaf, true)
	}
	// A plain Go allocator: the checked one reports a library-side leak
	// in the delta decoder (trace/arrow_test.go).
	fr, err := pqarrow.NewFileReader(pf, props, memory.NewGoAllocator())
	if err != nil {
		return err
	}
	// A row group at a time: a batch spanning two would join their
	// dictionaries, at a cost of their distinct values again.
	var base int64
	for g := range pf.NumRowGroups() {
		if err := readRowGroup(fr, g, leaves, &base, fn); err != nil {
			return err
		}
	}
	return nil
}

// readRowGroup hands fn each batch of row group g, checked (checkBatch);
// base counts the part's rows before the batch.
func readRowGroup(fr *pqarrow.FileReader, g int, leaves []int, base *int64, fn func(arrow.RecordBatch) error) error {
	rr, err := fr.GetRecordReader(context.Background(), leaves, []int{g})
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		if err := checkBatch(rec, *base); err != nil {
			return err
		}
		*base += rec.NumRows()
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && err.Error() != "EOF" {
		return err
	}
	return nil
}

// appendBatch appends a record batch's rows.
func (c *resultColumns) appendBatch(rec arrow.RecordBatch) error {
	col := func(name string) (arrow.Array, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("no column %q: not a servetrace results file, or from an incompatible version", name)
		}
		return rec.Column(idx[0]), nil
	}
	n := int(rec.NumRows())
	for _, spec := range []struct {
		name string
		dst  *[]int64
		opt  bool
	}{
		{"scheduled_ns", &c.scheduled, false}, {"admitted_ns", &c.admitted, false}, {"sent_ns", &c.sent, true},
		{"first_chunk_ns", &c.firstChunk, true}, {"first_token_ns", &c.firstToken, true}, {"done_ns", &c.done, true},
		{"usage_prompt_tokens", &c.usagePrompt, true}, {"observed_output_tokens", &c.observedOut, false}, {"prompt_tokens_sent", &c.promptSent, false},
		{"input_tokens", &c.inputTokens, false}, {"output_tokens", &c.requestedOutput, false}, {"max_tokens", &c.maxTokens, false},
	} {
		a, err := col(spec.name)
		if err != nil {
			return err
		}
		ints, ok := a.(*array.Int64)
		if !ok {
			return fmt.Errorf("column %q is %s, want int64", spec.name, a.DataType())
		}
		vals := ints.Int64Values()
		if ints.NullN() == 0 {
			*spec.dst = append(*spec.dst, vals...)
			continue
		}
		for i := range n {
			if ints.IsNull(i) {
				*spec.dst = append(*spec.dst, null)
			} else {
				*spec.dst = append(*spec.dst, vals[i])
			}
		}
	}
	for _, spec := range []struct {
		name string
		dst  *[]bool
	}{{"warmup", &c.warmup}, {"stream", &c.stream}} {
		a, err := col(spec.name)
		if err != nil {
			return err
		}
		b, ok := a.(*array.Boolean)
		if !ok {
			return fmt.Errorf("column %q is %s, want bool", spec.name, a.DataType())
		}
		for i := range n {
			*spec.dst = append(*spec.dst, b.Value(i))
		}
	}
	for _, spec := range []struct {
		name string
		dst  *[]string
	}{{"outcome", &c.outcome}, {"tenant", &c.tenant}, {"model", &c.model}, {"adapter", &c.adapter}, {"phase", &c.phase}, {"observed_finish_reason", &c.finishReason}} {
		if c.lean && slices.Contains(groupColumns, spec.name) {
			continue
		}
		a, err := col(spec.name)
		if err != nil {
			return err
		}
		if err := c.stringsOf(spec.name).appendTo(spec.dst, a); err != nil {
			return fmt.Errorf("column %s: %w", spec.name, err)
		}
	}
	if !c.lean {
		// A run from before agent graphs has no role: every row has none.
		if a, err := col("role"); err == nil {
			if err := c.stringsOf("role").appendTo(&c.role, a); err != nil {
				return fmt.Errorf("column role: %w", err)
			}
		} else {
			for range n {
				c.role = append(c.role, "")
			}
		}
	}
	if c.wantIDs {
		a, err := col("request_id")
		if err != nil {
			return err
		}
		if err := appendStrings(&c.requestID, a); err != nil {
			return fmt.Errorf("column request_id: %w", err)
		}
	}
	for _, spec := range []struct {
		name string
		dst  *[]int64
	}{{"turn", &c.turn}, {"http_status", &c.status}} {
		if c.lean && slices.Contains(groupColumns, spec.name) {
			continue
		}
		a, err := col(spec.name)
		if err != nil {
			return err
		}
		ints, ok := a.(*array.Int32)
		if !ok {
			return fmt.Errorf("column %s is %s, want int32", spec.name, a.DataType())
		}
		for _, v := range ints.Int32Values() {
			*spec.dst = append(*spec.dst, int64(v))
		}
	}
	for _, spec := range []struct {
		name string
		offs *[]int64
		vals *[]int64
	}{{"token_times_ns", &c.tokenOffsets, &c.tokenTimes}, {"prefix_blocks", &c.prefixOffsets, &c.prefixBlocks}} {
		a, err := col(spec.name)
		if err != nil {
			return err
		}
		list, ok := a.(*array.List)
		if !ok {
			return fmt.Errorf("column %s is %s, want a list of int64", spec.name, a.DataType())
		}
		values, ok := list.ListValues().(*array.Int64)
		if !ok {
			return fmt.Errorf("column %s holds %s, want int64", spec.name, list.ListValues().DataType())
		}
		appendList(spec.offs, list, n, func(from, to int) { *spec.vals = append(*spec.vals, values.Int64Values()[from:to]...) }, int64(len(*spec.vals)))
	}
	a, err := col("features")
	if err != nil {
		return err
	}
	list, ok := a.(*array.List)
	if !ok {
		return fmt.Errorf("column features is %s, want a list of strings", a.DataType())
	}
	var words []string
	if err := c.stringsOf("features").appendTo(&words, list.ListValues()); err != nil {
		return fmt.Errorf("column features: %w", err)
	}
	appendList(&c.featureOffsets, list, n, func(from, to int) { c.features = append(c.features, words[from:to]...) }, int64(len(c.features)))
	if err := c.appendContract(rec, n); err != nil {
		return err
	}
	c.n += n
	return nil
}

// appendContract appends the workload-contract columns, which a
// version-1 part lacks: their rows then read as null and empty.
func (c *resultColumns) appendContract(rec arrow.RecordBatch, n int) error {
	optional := func(name string) arrow.Array {
		if idx := rec.Schema().FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	for _, spec := range []struct {
		name string
		dst  *[]int64
	}{{"first_answer_ns", &c.firstAnswer}, {"observed_reasoning_tokens", &c.reasoning}, {"usage_cached_tokens", &c.usageCached}} {
		a := optional(spec.name)
		if a == nil {
			for range n {
				*spec.dst = append(*spec.dst, null)
			}
			continue
		}
		ints, ok := a.(*array.Int64)
		if !ok {
			return fmt.Errorf("column %q is %s, want int64", spec.name, a.DataType())
		}
		for i := range n {
			if ints.IsNull(i) {
				*spec.dst = append(*spec.dst, null)
			} else {
				*spec.dst = append(*spec.dst, ints.Value(i))
			}
		}
	}
	for k, name := range contractLists {
		l := &c.contract[k]
		if len(l.offs) == 0 {
			l.offs = append(l.offs, 0)
		}
		a := optional(name)
		if a == nil {
			for range n {
				l.offs = append(l.offs, int64(len(l.vals)))
			}
			continue
		}
		list, ok := a.(*array.List)
		if !ok {
			return fmt.Errorf("column %s is %s, want a list of strings", name, a.DataType())
		}
		var words []string
		if err := c.stringsOf(name).appendTo(&words, list.ListValues()); err != nil {
			return fmt.Errorf("column %s: %w", name, err)
		}
		appendList(&l.offs, list, n, func(from, to int) { l.vals = append(l.vals, words[from:to]...) }, int64(len(l.vals)))
	}
	return nil
}

// appendList appends n rows of a list column: take(from, to) appends the
// values slice [from, to) and offsets grow from base.
func appendList(offsets *[]int64, list *array.List, n int, take func(from, to int), base int64) {
	if len(*offsets) == 0 {
		*offsets = append(*offsets, 0)
	}
	offs := list.Offsets()
	first := int64(offs[0])
	take(int(first), int(offs[n]))
	for i := range n {
		*offsets = append(*offsets, base+int64(offs[i+1])-first)
	}
}

// appendStrings appends a string or dictionary-of-strings column,
// interning repeated values.
func appendStrings(dst *[]string, a arrow.Array) error {
	switch a := a.(type) {
	case *array.String:
		var last string
		for i := range a.Len() {
			v := a.Value(i)
			if v != last {
				last = strings.Clone(v)
			}
			*dst = append(*dst, last)
		}
	case *array.Dictionary:
		dict, ok := a.Dictionary().(*array.String)
		if !ok {
			return fmt.Errorf("dictionary of %s, want strings", a.Dictionary().DataType())
		}
		words := make([]string, dict.Len())
		for i := range words {
			words[i] = strings.Clone(dict.Value(i))
		}
		for i := range a.Len() {
			*dst = append(*dst, words[a.GetValueIndex(i)])
		}
	default:
		return fmt.Errorf("type %s, want string", a.DataType())
	}
	return nil
}

// columnsOf lays out result rows (already in memory) as resultColumns, so
// one extraction serves both paths.
func columnsOf(rows []trace.Result) *resultColumns {
	c := &resultColumns{tokenOffsets: []int64{0}, featureOffsets: []int64{0}, prefixOffsets: []int64{0}, wantIDs: true}
	for k := range c.contract {
		c.contract[k].offs = []int64{0}
	}
	opt := func(p *int64) int64 {
		if p == nil {
			return null
		}
		return *p
	}
	for i := range rows {
		r := &rows[i]
		c.warmup = append(c.warmup, r.Warmup)
		c.stream = append(c.stream, r.Stream)
		c.outcome = append(c.outcome, r.Outcome)
		c.scheduled = append(c.scheduled, r.ScheduledNs)
		c.admitted = append(c.admitted, r.AdmittedNs)
		c.sent = append(c.sent, opt(r.SentNs))
		c.firstChunk = append(c.firstChunk, opt(r.FirstChunkNs))
		c.firstToken = append(c.firstToken, opt(r.FirstTokenNs))
		c.done = append(c.done, opt(r.DoneNs))
		c.usagePrompt = append(c.usagePrompt, opt(r.UsagePromptTokens))
		c.observedOut = append(c.observedOut, r.ObservedOutputTokens)
		c.promptSent = append(c.promptSent, r.PromptTokensSent)
		c.tokenTimes = append(c.tokenTimes, r.TokenTimesNs...)
		c.tokenOffsets = append(c.tokenOffsets, int64(len(c.tokenTimes)))
		c.tenant = append(c.tenant, r.Tenant)
		c.model = append(c.model, r.Model)
		c.adapter = append(c.adapter, r.Adapter)
		c.phase = append(c.phase, r.Phase)
		c.role = append(c.role, r.Role)
		c.finishReason = append(c.finishReason, r.ObservedFinishReason)
		c.turn = append(c.turn, int64(r.Turn))
		c.status = append(c.status, int64(r.HTTPStatus))
		c.requestID = append(c.requestID, r.RequestID)
		c.inputTokens = append(c.inputTokens, r.InputTokens)
		c.requestedOutput = append(c.requestedOutput, r.OutputTokens)
		c.maxTokens = append(c.maxTokens, r.MaxTokens)
		c.features = append(c.features, r.Features...)
		c.featureOffsets = append(c.featureOffsets, int64(len(c.features)))
		c.prefixBlocks = append(c.prefixBlocks, r.PrefixBlocks...)
		c.prefixOffsets = append(c.prefixOffsets, int64(len(c.prefixBlocks)))
		c.firstAnswer = append(c.firstAnswer, opt(r.FirstAnswerNs))
		c.reasoning = append(c.reasoning, r.ObservedReasoningTokens)
		c.usageCached = append(c.usageCached, opt(r.UsageCachedTokens))
		for k, vals := range [3][]string{r.FeaturesSent, r.FeaturesStripped, r.FeaturesRefused} {
			l := &c.contract[k]
			l.vals = append(l.vals, vals...)
			l.offs = append(l.offs, int64(len(l.vals)))
		}
	}
	c.n = len(rows)
	return c
}

// reset empties c, keeping its slices' capacity, so a streamed analysis
// reads batch after batch into the same memory.
func (c *resultColumns) reset() {
	c.n = 0
	c.warmup, c.stream = c.warmup[:0], c.stream[:0]
	for _, s := range []*[]string{&c.outcome, &c.tenant, &c.model, &c.adapter, &c.phase, &c.role, &c.finishReason, &c.requestID, &c.features} {
		*s = (*s)[:0]
	}
	for _, s := range []*[]int64{&c.scheduled, &c.admitted, &c.sent, &c.firstChunk, &c.firstToken, &c.done, &c.usagePrompt, &c.observedOut,
		&c.promptSent, &c.tokenOffsets, &c.tokenTimes, &c.turn, &c.status, &c.inputTokens, &c.requestedOutput, &c.maxTokens,
		&c.featureOffsets, &c.prefixOffsets, &c.prefixBlocks, &c.firstAnswer, &c.reasoning, &c.usageCached} {
		*s = (*s)[:0]
	}
	for k := range c.contract {
		c.contract[k].offs, c.contract[k].vals = c.contract[k].offs[:0], c.contract[k].vals[:0]
	}
}
