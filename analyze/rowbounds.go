package analyze

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/servetrace/servetrace/trace"
)

// MaxRowEvents bounds one result row's per-event lists as analysis reads
// them (token_times_ns, choice_index, output_event_hashes) and its
// prefix_blocks: a row holding more is refused, naming its part, row and
// column. It is the bound replay writes to and trace checks
// (trace.MaxResultList).
const MaxRowEvents = trace.MaxResultList

// listBounds is the most entries one row's list column may hold at read,
// by column; a list column not named here is held to MaxRowEvents.
var listBounds = map[string]int64{
	"token_times_ns": MaxRowEvents, "choice_index": MaxRowEvents, "output_event_hashes": MaxRowEvents, "prefix_blocks": MaxRowEvents,
	"features": trace.MaxFeatures, "features_sent": trace.MaxFeatures, "features_stripped": trace.MaxFeatures, "features_refused": trace.MaxFeatures,
	"output_hashes": trace.MaxOutputHashes, "parent_ids": trace.MaxParents,
}

// listBound is the bound of the list column top.
func listBound(top string) int64 {
	if b, ok := listBounds[top]; ok {
		return b
	}
	return MaxRowEvents
}

// batchEntries bounds the list entries one record batch materialises per
// column: a row group holding more is read in batches of as many rows as
// fit, its longest row found first by a pass over its levels in fixed
// memory. A variable so that tests can lower it.
var batchEntries int64 = 1 << 22

// batchBytes bounds the string bytes one record batch decodes, as the
// footer gives them (each string column chunk's uncompressed size over
// its rows): rows of many long strings are read in fewer rows a batch.
// A variable so that tests can lower it.
var batchBytes int64 = 32 << 20

// defaultBatchRows is the rows of a record batch where no list or string
// bounds it.
const defaultBatchRows = 64 << 10

// partPlan is how a part is read: its batch size and the string columns
// read as dictionaries.
type partPlan struct {
	batchRows int64
	// dict lists the leaf columns of strings stored with a dictionary:
	// read as one, a value repeated on every row is held once, where a
	// plain read would copy it into every row.
	dict []int
}

// fit lowers the batch size to at most rows.
func (p *partPlan) fit(rows int64) { p.batchRows = min(p.batchRows, max(1, rows)) }

// planPart checks a part's footer before any row is decoded: a row group
// whose list column holds more entries than its rows times the column's
// bound holds a row past it, and is refused naming its rows. A row group
// of more entries than batchEntries in a list column is scanned for its
// longest row (refusing one past the bound, by row) and read in batches
// that fit; one of long strings, in batches of about batchBytes.
func planPart(pf *file.Reader, leaves []int) (partPlan, error) {
	plan := partPlan{batchRows: defaultBatchRows}
	schema := pf.MetaData().Schema
	var first int64 // the row group's first row in the part, from 0
	for g := range pf.NumRowGroups() {
		rg := pf.RowGroup(g)
		rows := rg.NumRows()
		var stringBytes int64
		for _, leaf := range leaves {
			col := schema.Column(leaf)
			meta, err := rg.MetaData().ColumnChunk(leaf)
			if err != nil {
				return plan, err
			}
			top, _, _ := strings.Cut(col.Path(), ".")
			if col.PhysicalType() == parquet.Types.ByteArray {
				stringBytes += max(meta.TotalUncompressedSize(), 0)
				if meta.HasDictionaryPage() && !containsInt(plan.dict, leaf) {
					plan.dict = append(plan.dict, leaf)
				}
			}
			if col.MaxRepetitionLevel() == 0 {
				continue
			}
			bound, entries := listBound(top), meta.NumValues()
			if entries > rows*bound {
				if rows == 1 {
					return plan, fmt.Errorf("row %d: column %s holds %d entries, at most %d", first+1, top, entries, bound)
				}
				return plan, fmt.Errorf("rows %d to %d: column %s holds %d entries, more than %d rows of at most %d each", first+1, first+rows, top, entries, rows, bound)
			}
			if entries <= batchEntries {
				continue
			}
			longest, err := longestRow(rg, leaf, first, top, bound)
			if err != nil {
				return plan, err
			}
			plan.fit(batchEntries / max(longest, 1))
		}
		if rows > 0 {
			plan.fit(batchBytes / max(stringBytes/rows, 1))
		}
		first += rows
	}
	return plan, nil
}

// containsInt reports whether xs holds x.
func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// levelBatch is how many levels a scan for the longest row reads at a
// time.
const levelBatch = 64 << 10

// longestRow scans a list column's levels in one row group, in fixed
// memory, for its longest row; a row past bound is an error naming it
// (counted from 1 within the part, whose row group starts at row first).
func longestRow(rg *file.RowGroupReader, leaf int, first int64, top string, bound int64) (int64, error) {
	cr, err := rg.Column(leaf)
	if err != nil {
		return 0, err
	}
	var (
		row     = int64(-1) // from 0 within the row group
		n, most int64
	)
	end := func() error {
		if n > bound {
			return fmt.Errorf("row %d: column %s holds %d or more entries, at most %d", first+row+1, top, n, bound)
		}
		most = max(most, n)
		return nil
	}
	reps := make([]int16, levelBatch)
	visit := func(levels int64) error {
		for _, r := range reps[:levels] {
			if r == 0 {
				if row >= 0 {
					if err := end(); err != nil {
						return err
					}
				}
				row, n = row+1, 0
			}
			if n++; n > bound {
				return end()
			}
		}
		return nil
	}
	switch r := cr.(type) {
	case *file.Int64ColumnChunkReader:
		err = scanLevels(r, make([]int64, levelBatch), reps, visit)
	case *file.Int32ColumnChunkReader:
		err = scanLevels(r, make([]int32, levelBatch), reps, visit)
	case *file.ByteArrayColumnChunkReader:
		err = scanLevels(r, make([]parquet.ByteArray, levelBatch), reps, visit)
	case *file.BooleanColumnChunkReader:
		err = scanLevels(r, make([]bool, levelBatch), reps, visit)
	case *file.Float64ColumnChunkReader:
		err = scanLevels(r, make([]float64, levelBatch), reps, visit)
	default:
		return 0, fmt.Errorf("column %s: a list of %s, not a result column", top, cr.Type())
	}
	if err != nil {
		return 0, err
	}
	if row >= 0 {
		if err := end(); err != nil {
			return 0, err
		}
	}
	return most, nil
}

// levelReader is a typed column chunk reader of arrow-go.
type levelReader[T any] interface {
	HasNext() bool
	ReadBatch(batchSize int64, values []T, defLvls, repLvls []int16) (int64, int, error)
}

// scanLevels reads a column chunk's repetition levels into reps, batch by
// batch, handing visit the count read each time.
func scanLevels[T any](r levelReader[T], values []T, reps []int16, visit func(levels int64) error) error {
	defs := make([]int16, len(reps))
	for r.HasNext() {
		levels, _, err := r.ReadBatch(int64(len(reps)), values, defs, reps)
		if err != nil {
			return err
		}
		if levels == 0 {
			return nil
		}
		if err := visit(levels); err != nil {
			return err
		}
	}
	return nil
}

// checkBatch holds a decoded batch's rows to the bounds a part's footer
// cannot prove: each list within its column's bound, each string within
// trace.MaxStringBytes. Row i of the batch is row base+i+1 of its part.
func checkBatch(rec arrow.RecordBatch, base int64) error {
	for k, f := range rec.Schema().Fields() {
		if err := checkColumn(f.Name, rec.Column(k), base); err != nil {
			return err
		}
	}
	return nil
}

// checkColumn is checkBatch for one top-level column.
func checkColumn(name string, a arrow.Array, base int64) error {
	switch a := a.(type) {
	case *array.List:
		bound, offs := listBound(name), a.Offsets()
		for i := range a.Len() {
			if n := int64(offs[i+1] - offs[i]); n > bound {
				return fmt.Errorf("row %d: column %s holds %d entries, at most %d", base+int64(i)+1, name, n, bound)
			}
		}
		if at, n := longString(a.ListValues()); at >= 0 {
			return fmt.Errorf("column %s: an entry of %d bytes, at most %d", name, n, trace.MaxStringBytes)
		}
	default:
		if at, n := longString(a); at >= 0 {
			return fmt.Errorf("row %d: column %s holds %d bytes, at most %d", base+int64(at)+1, name, n, trace.MaxStringBytes)
		}
	}
	return nil
}

// longString finds a string past trace.MaxStringBytes in a string or
// dictionary column: its index (the first row using it, for a dictionary)
// and length; -1 when there is none.
func longString(a arrow.Array) (at, n int) {
	switch a := a.(type) {
	case *array.String:
		for i := range a.Len() {
			if l := a.ValueLen(i); l > trace.MaxStringBytes {
				return i, l
			}
		}
	case *array.Dictionary:
		dict, err := dictionaryStrings(a)
		if err != nil {
			return -1, 0
		}
		for d := range dict.Len() {
			if l := dict.ValueLen(d); l > trace.MaxStringBytes {
				for i := range a.Len() {
					if a.GetValueIndex(i) == d {
						return i, l
					}
				}
			}
		}
	}
	return -1, 0
}
