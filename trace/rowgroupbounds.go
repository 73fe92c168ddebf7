package trace

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"
)

// A row group is read in batches of rows (cursorBatchRows), and Parquet
// stores a list of one repeated value, or a long string repeated, in a few
// bytes: a part of kilobytes can hold batches of gigabytes. Before a row
// group is read, its footer's counts (which its pages are held to,
// checkPages) bound what a batch may decode, and its batches are cut to
// fit.

// batchEntries bounds the list entries one batch decodes, all list
// columns together: a row group holding more is scanned for each list
// column's longest row, in a page's memory, and read in batches of as
// many rows as fit (one, where one row holds more). A variable so that
// tests can lower it.
var batchEntries int64 = 1 << 22

// batchBytes bounds the string bytes one batch decodes, as the footer
// gives them (each string column chunk's uncompressed size over its
// rows): rows of long strings are read in fewer rows a batch.
var batchBytes int64 = 32 << 20

// maxStringChunkBytesPerValue bounds a string column chunk's
// uncompressed size over its values: a string of at most MaxStringBytes,
// its length, its levels and a share of its page's header, whose
// statistics may hold two strings.
const maxStringChunkBytesPerValue = 4 * MaxStringBytes

// errStopped ends a scan of a row group's pages whose read was stopped.
var errStopped = errors.New("the read was stopped")

// stopped reports whether stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// prepassPages counts the pages longestRow and checkStrings read: that
// they stop when their scan does is tested through it.
var prepassPages atomic.Int64

// listCeiling is the most entries a row of record T may hold in list
// column top (Validate's bounds); 0 for a column T has no list of.
func listCeiling[T any](top string) int64 {
	switch top {
	case "prefix_blocks":
		if _, ok := any(*new(T)).(Request); ok {
			return MaxTokens
		}
		return MaxResultList
	case "token_times_ns", "choice_index", "output_event_hashes":
		return MaxResultList
	case "features", "features_sent", "features_stripped", "features_refused":
		return MaxFeatures
	case "output_hashes":
		return MaxOutputHashes
	case "parent_ids":
		return MaxParents
	case "image_widths_px", "image_heights_px", "image_ids", "audio_ms", "audio_ids":
		return MaxMediaParts
	}
	return 0
}

// planGroup checks row group g from the footer and returns how many rows
// a batch of it may hold. A list column holding more entries than its
// rows may (listCeiling) is refused, naming the rows, and so is a string
// column of more bytes than its values may take; a row group of more list
// entries than batchEntries is scanned for each list column's longest
// row, refusing one past its ceiling.
func (p *partFile[T]) planGroup(g int) (int, error) {
	groups := p.pf.Metadata().RowGroups
	var first int64 // the row group's first row in the part, from 0
	for _, rg := range groups[:g] {
		first += rg.NumRows
	}
	rows := groups[g].NumRows
	type list struct {
		leaf             int
		top              string
		ceiling, entries int64
	}
	var lists []list
	var entries, stringBytes int64
	schema := p.pf.Schema()
	for _, path := range schema.Columns() {
		leaf, _ := schema.Lookup(path...)
		md := &groups[g].Columns[leaf.ColumnIndex].MetaData
		top := path[0]
		if leaf.Node.Type().Kind() == parquet.ByteArray {
			if md.TotalUncompressedSize > md.NumValues*maxStringChunkBytesPerValue {
				return 0, fmt.Errorf("rows %d to %d: column %s holds %d bytes in %d values, more than strings of at most %d bytes take", first+1, first+rows, top, md.TotalUncompressedSize, md.NumValues, MaxStringBytes)
			}
			stringBytes += md.TotalUncompressedSize
			if p.columns == nil { // the column decoder checks each string as it reads it
				if err := checkStrings(p.pf.RowGroups()[g].ColumnChunks()[leaf.ColumnIndex], first, rows, top, leaf.MaxDefinitionLevel, p.stop); err != nil {
					return 0, err
				}
			}
		}
		ceiling := listCeiling[T](top)
		if leaf.MaxRepetitionLevel == 0 || ceiling == 0 {
			continue
		}
		if md.NumValues > rows*ceiling {
			if rows == 1 {
				return 0, fmt.Errorf("row %d: column %s holds %d entries, at most %d", first+1, top, md.NumValues, ceiling)
			}
			return 0, fmt.Errorf("rows %d to %d: column %s holds %d entries, more than %d rows of at most %d each", first+1, first+rows, top, md.NumValues, rows, ceiling)
		}
		lists = append(lists, list{leaf.ColumnIndex, top, ceiling, md.NumValues})
		entries += md.NumValues
	}
	batch := int64(cursorBatchRows)
	if entries > batchEntries {
		var longest int64 // the longest rows of every list column, together
		chunks := p.pf.RowGroups()[g].ColumnChunks()
		for _, l := range lists {
			if l.entries <= rows { // a level entry a row: none longer than one
				longest += min(l.entries, 1)
				continue
			}
			n, err := longestRow(chunks[l.leaf], first, l.top, l.ceiling, p.stop)
			if err != nil {
				return 0, err
			}
			longest += n
		}
		batch = min(batch, batchEntries/max(longest, 1))
	}
	if rows > 0 {
		batch = min(batch, batchBytes/max(stringBytes/rows, 1))
	}
	return int(max(batch, 1)), nil
}

// longestRow reads a list column chunk's repetition levels, a page at a
// time, for its longest row in level entries (an empty list takes one); a
// row past ceiling is an error naming it (counted from 1 within the part,
// whose row group starts at row first). It stops with errStopped between
// pages once stop is closed.
func longestRow(chunk parquet.ColumnChunk, first int64, top string, ceiling int64, stop <-chan struct{}) (int64, error) {
	pages := chunk.Pages()
	defer pages.Close()
	row, n, most := int64(-1), int64(0), int64(0)
	end := func() error {
		if n > ceiling {
			return fmt.Errorf("row %d: column %s holds %d entries, at most %d", first+row+1, top, n, ceiling)
		}
		most = max(most, n)
		return nil
	}
	for {
		if stopped(stop) {
			return 0, errStopped
		}
		page, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		prepassPages.Add(1)
		if err != nil {
			return 0, fmt.Errorf("column %s: %w", top, err)
		}
		for _, r := range page.RepetitionLevels() {
			if r == 0 {
				if row >= 0 {
					if err := end(); err != nil {
						parquet.Release(page)
						return 0, err
					}
				}
				row, n = row+1, 0
			}
			n++
		}
		parquet.Release(page)
	}
	if row >= 0 {
		if err := end(); err != nil {
			return 0, err
		}
	}
	return most, nil
}

// checkStrings reads a string column chunk a page at a time and refuses a
// string past MaxStringBytes, naming its row (counted from 1 within the
// part, whose row group starts at row first and holds rows rows), or, for
// a dictionary's value, the row group. parquet-go's generic reader copies
// a string into every row that holds it, a dictionary's value into every
// row that refers to it, so a long one is refused before any is copied.
func checkStrings(chunk parquet.ColumnChunk, first, rows int64, top string, maxDef int, stop <-chan struct{}) error {
	pages := chunk.Pages()
	defer pages.Close()
	var dict parquet.Dictionary
	row := int64(-1) // within the row group
	for {
		if stopped(stop) {
			return errStopped
		}
		page, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return nil
		}
		prepassPages.Add(1)
		if err != nil {
			return fmt.Errorf("column %s: %w", top, err)
		}
		err = checkPageStrings(page, &dict, &row, maxDef)
		parquet.Release(page)
		if long, ok := err.(*longString); ok {
			if long.row < 0 {
				return fmt.Errorf("rows %d to %d: column %s holds a string of %d bytes, at most %d", first+1, first+rows, top, long.n, MaxStringBytes)
			}
			return fmt.Errorf("row %d: column %s holds a string of %d bytes, at most %d", first+int64(long.row)+1, top, long.n, MaxStringBytes)
		}
		if err != nil {
			return err
		}
	}
}

// checkPageStrings checks one page's strings, or its dictionary's when it
// refers to one not seen before (dict), counting rows on from row; the
// longString it returns has row -1 for a dictionary's value.
func checkPageStrings(page parquet.Page, dict *parquet.Dictionary, row *int64, maxDef int) error {
	reps, defs := page.RepetitionLevels(), page.DefinitionLevels()
	if d := page.Dictionary(); d != nil {
		if d != *dict {
			*dict = d
			data := d.Page().Data()
			_, offs := data.ByteArray()
			for i := 1; i < len(offs); i++ {
				if n := int(offs[i] - offs[i-1]); n > MaxStringBytes {
					return &longString{-1, n}
				}
			}
		}
		*row += rowStarts(reps, page.NumValues())
		return nil
	}
	data := page.Data()
	_, offs := data.ByteArray()
	v := 0 // the next value
	for i := range max(len(reps), len(defs), len(offs)-1) {
		if len(reps) == 0 || reps[i] == 0 {
			*row++
		}
		if len(defs) > 0 && int(defs[i]) != maxDef {
			continue
		}
		if v+1 >= len(offs) {
			return errors.New("a page of fewer values than its levels say: corrupt data")
		}
		if n := int(offs[v+1] - offs[v]); n > MaxStringBytes {
			return &longString{int(*row), n}
		}
		v++
	}
	return nil
}

// rowStarts counts the rows a page's level entries start: those of
// repetition level 0, or every one of n where there are no repetition
// levels.
func rowStarts(reps []byte, n int64) int64 {
	if len(reps) == 0 {
		return n
	}
	var k int64
	for _, r := range reps {
		if r == 0 {
			k++
		}
	}
	return k
}
