package trace

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// requestColumn decodes one leaf column of the request record into a
// Request: set takes a present value of a row, or one element of a list.
// The column's type and nesting are the record schema's (requestSchema);
// the Go field each helper below takes keeps the table in step with them,
// and TestRequestColumnsCoverTheSchema holds its paths to the struct tags.
type requestColumn struct {
	path string
	set  func(r *Request, v *parquet.Value, c *decodedColumn)
	// empty sets a list column's empty list: non-nil and of capacity 0, as
	// parquet-go's generic reader gives it.
	empty func(r *Request)
	// distinct marks a column whose values rarely repeat (request ids):
	// its pages are not checked for one repeated value.
	distinct bool
	// buffer makes the column's buffer for the encoder (requestbuffer.go).
	buffer func() bufferedColumn
}

// The helpers build a requestColumn for one Go field type from the field's
// accessor, which serves both directions; value reads the field's Go value
// out of a parquet value of the column.

func scalarCol[V comparable](path string, value func(*parquet.Value, *decodedColumn) V, f func(*Request) *V) requestColumn {
	return requestColumn{path: path, set: func(r *Request, v *parquet.Value, c *decodedColumn) { *f(r) = value(v, c) },
		buffer: func() bufferedColumn { return newScalarBuffer(f) }}
}

func optCol[V any](path string, value func(*parquet.Value, *decodedColumn) V, f func(*Request) **V) requestColumn {
	return requestColumn{path: path, set: func(r *Request, v *parquet.Value, c *decodedColumn) {
		x := value(v, c)
		*f(r) = &x
	}, buffer: func() bufferedColumn { return newOptionalBuffer(f) }}
}

func listCol[V any](path string, value func(*parquet.Value, *decodedColumn) V, f func(*Request) *[]V) requestColumn {
	return requestColumn{path: path + ".list.element",
		set:    func(r *Request, v *parquet.Value, c *decodedColumn) { *f(r) = append(*f(r), value(v, c)) },
		empty:  func(r *Request) { *f(r) = []V{} },
		buffer: func() bufferedColumn { return newListBuffer(f) }}
}

func distinctCol(c requestColumn) requestColumn {
	c.distinct = true
	return c
}

func int64Of(v *parquet.Value, _ *decodedColumn) int64     { return v.Int64() }
func int32Of(v *parquet.Value, _ *decodedColumn) int32     { return v.Int32() }
func float64Of(v *parquet.Value, _ *decodedColumn) float64 { return v.Double() }
func boolOf(v *parquet.Value, _ *decodedColumn) bool       { return v.Boolean() }

// stringOf copies the value's bytes; internedOf shares one string among
// equal values, for columns of few distinct values (dict columns), so a row
// costs no allocation.
func stringOf(v *parquet.Value, _ *decodedColumn) string   { return string(v.ByteArray()) }
func internedOf(v *parquet.Value, c *decodedColumn) string { return c.intern(v.ByteArray()) }

// requestColumns is every leaf column of Request, by its Parquet path.
var requestColumns = []requestColumn{
	distinctCol(scalarCol("request_id", stringOf, func(r *Request) *string { return &r.RequestID })),
	scalarCol("session_id", internedOf, func(r *Request) *string { return &r.SessionID }),
	scalarCol("turn", int32Of, func(r *Request) *int32 { return &r.Turn }),
	scalarCol("tenant", internedOf, func(r *Request) *string { return &r.Tenant }),
	scalarCol("model", internedOf, func(r *Request) *string { return &r.Model }),
	scalarCol("adapter", internedOf, func(r *Request) *string { return &r.Adapter }),
	scalarCol("ts", int64Of, func(r *Request) *int64 { return &r.TS }),
	scalarCol("input_tokens", int64Of, func(r *Request) *int64 { return &r.InputTokens }),
	scalarCol("output_tokens", int64Of, func(r *Request) *int64 { return &r.OutputTokens }),
	scalarCol("max_tokens", int64Of, func(r *Request) *int64 { return &r.MaxTokens }),
	scalarCol("api", internedOf, func(r *Request) *string { return &r.API }),
	scalarCol("stream", boolOf, func(r *Request) *bool { return &r.Stream }),
	scalarCol("n", int32Of, func(r *Request) *int32 { return &r.N }),
	listCol("features", internedOf, func(r *Request) *[]string { return &r.Features }),
	listCol("prefix_blocks", int64Of, func(r *Request) *[]int64 { return &r.PrefixBlocks }),
	optCol("temperature", float64Of, func(r *Request) **float64 { return &r.Temperature }),
	optCol("top_p", float64Of, func(r *Request) **float64 { return &r.TopP }),
	scalarCol("image_count", int32Of, func(r *Request) *int32 { return &r.ImageCount }),
	listCol("image_widths_px", int32Of, func(r *Request) *[]int32 { return &r.ImageWidthsPx }),
	listCol("image_heights_px", int32Of, func(r *Request) *[]int32 { return &r.ImageHeightsPx }),
	listCol("image_ids", int64Of, func(r *Request) *[]int64 { return &r.ImageIDs }),
	scalarCol("audio_count", int32Of, func(r *Request) *int32 { return &r.AudioCount }),
	listCol("audio_ms", int64Of, func(r *Request) *[]int64 { return &r.AudioMs }),
	listCol("audio_ids", int64Of, func(r *Request) *[]int64 { return &r.AudioIDs }),
	scalarCol("tool_count", int32Of, func(r *Request) *int32 { return &r.ToolCount }),
	scalarCol("tool_tokens", int64Of, func(r *Request) *int64 { return &r.ToolTokens }),
	scalarCol("tool_choice", internedOf, func(r *Request) *string { return &r.ToolChoice }),
	scalarCol("output_format", internedOf, func(r *Request) *string { return &r.OutputFormat }),
	scalarCol("schema_tokens", int64Of, func(r *Request) *int64 { return &r.SchemaTokens }),
	scalarCol("schema_id", int64Of, func(r *Request) *int64 { return &r.SchemaID }),
	scalarCol("logprobs", boolOf, func(r *Request) *bool { return &r.Logprobs }),
	scalarCol("stop_count", int32Of, func(r *Request) *int32 { return &r.StopCount }),
	scalarCol("reasoning_effort", internedOf, func(r *Request) *string { return &r.ReasoningEffort }),
	optCol("top_logprobs", int32Of, func(r *Request) **int32 { return &r.TopLogprobs }),
	optCol("seed", int64Of, func(r *Request) **int64 { return &r.Seed }),
	optCol("top_k", int32Of, func(r *Request) **int32 { return &r.TopK }),
	optCol("presence_penalty", float64Of, func(r *Request) **float64 { return &r.PresencePenalty }),
	optCol("frequency_penalty", float64Of, func(r *Request) **float64 { return &r.FrequencyPenalty }),
	optCol("image_tokens", int64Of, func(r *Request) **int64 { return &r.ImageTokens }),
	optCol("audio_tokens", int64Of, func(r *Request) **int64 { return &r.AudioTokens }),
	optCol("finish_reason", internedOf, func(r *Request) **string { return &r.FinishReason }),
	optCol("status", int32Of, func(r *Request) **int32 { return &r.Status }),
	optCol("cancelled", boolOf, func(r *Request) **bool { return &r.Cancelled }),
	optCol("cached_tokens", int64Of, func(r *Request) **int64 { return &r.CachedTokens }),
	optCol("ttft_ms", float64Of, func(r *Request) **float64 { return &r.TTFTMs }),
	optCol("e2e_ms", float64Of, func(r *Request) **float64 { return &r.E2EMs }),
	optCol("cancel_after_ms", float64Of, func(r *Request) **float64 { return &r.CancelAfterMs }),
	optCol("cancel_after_tokens", int64Of, func(r *Request) **int64 { return &r.CancelAfterTokens }),
	optCol("read_delay_ms", float64Of, func(r *Request) **float64 { return &r.ReadDelayMs }),
	optCol("think_time_ms", float64Of, func(r *Request) **float64 { return &r.ThinkTimeMs }),
	listCol("parent_ids", stringOf, func(r *Request) *[]string { return &r.ParentIDs }),
	optCol("tool_ms", float64Of, func(r *Request) **float64 { return &r.ToolMs }),
	scalarCol("role", internedOf, func(r *Request) *string { return &r.Role }),
	scalarCol("phase", internedOf, func(r *Request) *string { return &r.Phase }),
}

// requestColumnByPath finds requestColumns' entries by their path.
var requestColumnByPath = func() map[string]*requestColumn {
	m := make(map[string]*requestColumn, len(requestColumns))
	for i := range requestColumns {
		m[requestColumns[i].path] = &requestColumns[i]
	}
	return m
}()

// maxInterned bounds a decoder's intern table; past it the table starts
// over, so a column of many distinct values (session ids) costs memory no
// longer than a batch or two.
const maxInterned = 1 << 14

// requestDecoder reads the rows of a request part column by column: each
// column chunk's pages are read as values and set straight into the rows,
// with no row-shaped intermediate and no reflection, which is most of what
// parquet-go's generic reader spends on a request row. It is used only where
// every column of the file is one of requestColumns with the same type and
// levels (newRequestDecoder says so); other files take the generic reader.
type requestDecoder struct {
	cols []decodedColumn
}

// decodedColumn is one column's reader within the current row group: the
// values read from its pages and not yet set.
type decodedColumn struct {
	spec   *requestColumn
	index  int // the leaf's column index in the file
	maxDef int
	list   bool // a list's elements (repetition level 1)
	float  bool
	str    bool // strings, each held to MaxStringBytes before it is set
	pages  parquet.Pages
	values parquet.ValueReader
	buf    []parquet.Value
	pos, n int
	// last and interned make a string column's repeated values one string
	// each: most rows repeat the row above (a model, an API), and the rest
	// mostly come from a few values.
	last     string
	interned map[string]string
	// same counts the rows left of a page whose rows all hold one value,
	// set without decoding each: sameValue where present, else a null or
	// an empty list (most of a trace's columns are one value a page).
	same      int64
	sameValue parquet.Value
	present   bool
}

// newRequestDecoder returns a decoder for the file's schema, or nil unless
// the file holds exactly the table's columns, each with the record's
// physical and logical type and nesting: a file written by another tool, or
// an older layout (a missing list reads as an empty one, a timestamp in
// milliseconds is converted, by the generic reader) takes the generic
// reader.
func newRequestDecoder(schema *parquet.Schema) *requestDecoder {
	if len(schema.Columns()) != len(requestColumns) {
		return nil
	}
	d := &requestDecoder{}
	for _, path := range schema.Columns() {
		spec := requestColumnByPath[strings.Join(path, ".")]
		leaf, ok := schema.Lookup(path...)
		want, known := requestSchema.Lookup(path...)
		if spec == nil || !ok || !known || !sameLeafType(leaf.Node.Type(), want.Node.Type()) ||
			leaf.MaxRepetitionLevel != want.MaxRepetitionLevel || leaf.MaxDefinitionLevel != want.MaxDefinitionLevel {
			return nil
		}
		d.cols = append(d.cols, decodedColumn{spec: spec, index: leaf.ColumnIndex, maxDef: want.MaxDefinitionLevel,
			list: want.MaxRepetitionLevel > 0, float: want.Node.Type().Kind() == parquet.Double, str: want.Node.Type().Kind() == parquet.ByteArray,
			buf: make([]parquet.Value, 128)})
	}
	return d
}

// requestSchema is the request record's own schema, which a part's columns
// are held to.
var requestSchema = parquet.SchemaOf(Request{})

// sameLeafType reports whether a and b store and mean values alike: one
// physical kind and one logical type (a timestamp's unit, a string).
func sameLeafType(a, b parquet.Type) bool {
	return a.Kind() == b.Kind() && reflect.DeepEqual(a.LogicalType(), b.LogicalType())
}

// intern returns b as a string, the same string for equal bytes while the
// table lasts.
func (c *decodedColumn) intern(b []byte) string {
	if string(b) == c.last {
		return c.last
	}
	if c.interned == nil {
		c.interned = make(map[string]string)
	}
	s, ok := c.interned[string(b)]
	if !ok {
		if len(c.interned) >= maxInterned {
			clear(c.interned)
		}
		s = string(b)
		c.interned[s] = s
	}
	c.last = s
	return s
}

// reset starts reading rg.
func (d *requestDecoder) reset(rg parquet.RowGroup) {
	d.close()
	chunks := rg.ColumnChunks()
	for i := range d.cols {
		c := &d.cols[i]
		c.pages, c.values, c.pos, c.n, c.same = chunks[c.index].Pages(), nil, 0, 0, 0
	}
}

// close releases the current row group's page readers.
func (d *requestDecoder) close() {
	for i := range d.cols {
		if d.cols[i].pages != nil {
			d.cols[i].pages.Close()
			d.cols[i].pages = nil
		}
	}
}

// read decodes the next rows of the row group into rows, which must be
// zero, and returns how many; io.EOF once the row group is done. Every
// column must give the same number of rows, or the file is corrupt. rows
// start at row base+1 of the part, for errors.
func (d *requestDecoder) read(rows []Request, base int64) (int, error) {
	n := -1
	for i := range d.cols {
		c := &d.cols[i]
		got, err := c.read(rows)
		if long, ok := err.(*longString); ok {
			top, _, _ := strings.Cut(c.spec.path, ".")
			return 0, fmt.Errorf("row %d: column %s holds a string of %d bytes, at most %d", base+int64(long.row)+1, top, long.n, MaxStringBytes)
		}
		if err != nil {
			return 0, fmt.Errorf("column %s: %w", c.spec.path, err)
		}
		if n >= 0 && got != n {
			return 0, fmt.Errorf("column %s holds %d rows where column %s holds %d: corrupt data", c.spec.path, got, d.cols[0].spec.path, n)
		}
		n = got
	}
	if n <= 0 {
		return 0, io.EOF
	}
	return n, nil
}

// fill reads the column's next values into its buffer, reading pages as
// needed; it leaves the buffer empty at the end of the column chunk. A page
// of one repeated value is not decoded: fill sets same instead.
func (c *decodedColumn) fill() error {
	c.pos, c.n = 0, 0
	for c.n == 0 {
		if c.values == nil {
			page, err := c.pages.ReadPage()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if c.uniform(page) {
				return nil
			}
			c.values = page.Values()
		}
		n, err := c.values.ReadValues(c.buf)
		c.n = n
		if errors.Is(err, io.EOF) {
			c.values = nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// uniform reports whether every row of page holds one value: one level
// entry a row, and either every entry null (a null, or an empty list), or
// none null, not a list, not floating point, and the page's least value
// equal to its greatest. Floats are left out because a page's bounds skip
// NaNs and do not tell -0 from 0. It sets same, sameValue and present for
// read.
func (c *decodedColumn) uniform(page parquet.Page) bool {
	rows := page.NumRows()
	if rows == 0 || page.NumValues() != rows {
		return false
	}
	switch nulls := page.NumNulls(); {
	case nulls == rows:
		c.same, c.present = rows, false
		return true
	case nulls != 0 || c.list || c.spec.distinct || c.float:
		return false
	}
	lo, hi, ok := page.Bounds()
	if !ok || !parquet.Equal(lo, hi) {
		return false
	}
	c.same, c.sameValue, c.present = rows, lo, true
	return true
}

// longString is a string past MaxStringBytes in row (of a batch), n
// bytes long: refused before it is copied.
type longString struct{ row, n int }

func (e *longString) Error() string {
	return fmt.Sprintf("row %d of the batch: a string of %d bytes, at most %d", e.row+1, e.n, MaxStringBytes)
}

// read sets the column's values of up to len(rows) rows and returns how
// many rows it reached. A row starts at a value of repetition level 0; a
// value whose definition level is below the column's maximum is a null or
// an empty list, which leaves the field zero (an empty list, for lists).
func (c *decodedColumn) read(rows []Request) (int, error) {
	row := -1
	for {
		if c.same > 0 {
			k := min(c.same, int64(len(rows)-(row+1)))
			if k == 0 {
				return len(rows), nil
			}
			if c.present && c.str && len(c.sameValue.ByteArray()) > MaxStringBytes {
				return 0, &longString{row + 1, len(c.sameValue.ByteArray())}
			}
			for i := row + 1; i <= row+int(k); i++ {
				switch {
				case c.present:
					c.spec.set(&rows[i], &c.sameValue, c)
				case c.spec.empty != nil:
					c.spec.empty(&rows[i])
				}
			}
			row += int(k)
			c.same -= k
			continue
		}
		if c.pos >= c.n {
			if err := c.fill(); err != nil {
				return row + 1, err
			}
			if c.n == 0 && c.same == 0 {
				return row + 1, nil
			}
			continue
		}
		for ; c.pos < c.n; c.pos++ {
			v := &c.buf[c.pos]
			if v.RepetitionLevel() == 0 {
				if row+1 == len(rows) {
					return len(rows), nil
				}
				row++
			} else if row < 0 {
				return 0, errors.New("a list continues a row before this batch: corrupt data")
			}
			switch {
			case v.DefinitionLevel() == c.maxDef && !v.IsNull():
				if c.str && len(v.ByteArray()) > MaxStringBytes {
					return 0, &longString{row, len(v.ByteArray())}
				}
				c.spec.set(&rows[row], v, c)
			case c.spec.empty != nil:
				c.spec.empty(&rows[row])
			}
		}
	}
}
