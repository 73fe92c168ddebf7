package trace

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"

	"github.com/servetrace/servetrace/internal/regfile"
)

// DefaultRowGroupRows is the number of rows per Parquet row group.
const DefaultRowGroupRows = 128 << 10

// writePartFile writes rows as the part at path with parquet-go's generic
// writer, in row groups of rowGroupRows (createPart).
func writePartFile[T any](path string, rows []T, rowGroupRows int) error {
	return createPart(path, func(f io.Writer) error { return encodeParquet(f, rows, rowGroupRows) })
}

// encodeParquet writes rows to f as a Parquet file with parquet-go's
// generic writer, in row groups of rowGroupRows.
func encodeParquet[T any](f io.Writer, rows []T, rowGroupRows int) error {
	if rowGroupRows <= 0 {
		rowGroupRows = DefaultRowGroupRows
	}
	w := parquet.NewGenericWriter[T](f, parquetWriterOptions(rowGroupRows)...)
	for len(rows) > 0 {
		k := min(len(rows), rowGroupRows)
		if _, err := w.Write(rows[:k]); err != nil {
			return fmt.Errorf("write parquet rows: %w", err)
		}
		if rows = rows[k:]; len(rows) > 0 {
			if err := w.Flush(); err != nil {
				return fmt.Errorf("flush a row group: %w", err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("finish the parquet file: %w", err)
	}
	return nil
}

// createPart writes a part file atomically (WriteFileAtomic), making its
// partition directory first.
func createPart(path string, write func(io.Writer) error) error {
	if err := MakeDir(filepath.Dir(path)); err != nil {
		return err
	}
	return WriteFileAtomic(path, write)
}

// openParts counts the part files open for reading: Scan's bound on them
// is tested through it.
var openParts atomic.Int64

// partFile is an open Parquet file read row group by row group into T.
type partFile[T any] struct {
	path   string
	f      *os.File
	pf     *parquet.File
	group  int
	reader *parquet.GenericReader[T]
	// columns reads a request part column by column where its schema
	// allows (newRequestDecoder); nil for other records and layouts.
	columns *requestDecoder
	inGroup bool // a row group is being read
	// batch is the most rows a read of the current row group returns
	// (planGroup).
	batch int
	// rows is how many rows read has returned.
	rows int64
	// stop, once closed, stops a row group's checks between pages: a
	// cursor closes it when the scan no longer wants the part.
	stop    <-chan struct{}
	buf     []T
	pos, n  int
	numRows int64
}

// decodeByColumns turns the column decoder of request parts on; the scan
// benchmark turns it off to measure parquet-go's generic reader beside it.
var decodeByColumns = true

// openPartFile opens path for reading rows of type T. parquet-go panics on
// some malformed files; that panic is turned into an error naming the file.
func openPartFile[T any](path string) (p *partFile[T], err error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open part %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat part %s: %w", path, err)
	}
	defer func() {
		if r := recover(); r != nil {
			f.Close()
			p, err = nil, fmt.Errorf("read part %s: not a valid Parquet file (%v)", path, r)
		}
	}()
	if err := checkFooter(f, st.Size()); err != nil {
		f.Close()
		return nil, fmt.Errorf("read part %s: not a valid Parquet file: %w", path, err)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read part %s: not a valid Parquet file: %w", path, err)
	}
	for _, col := range requiredColumns[T]() {
		if _, ok := pf.Schema().Lookup(col); !ok {
			f.Close()
			return nil, fmt.Errorf("read part %s: no %s column: not a servetrace %s part (every row would read as zero)", path, col, recordKind[T]())
		}
	}
	openParts.Add(1)
	p = &partFile[T]{path: path, f: f, pf: pf, group: -1, numRows: pf.NumRows()}
	if _, ok := any(*new(T)).(Request); ok && decodeByColumns {
		p.columns = newRequestDecoder(pf.Schema())
	}
	return p, nil
}

// requiredColumns lists the columns a part of record type T must have: a
// file without them reads as rows of zeros, not as an error.
func requiredColumns[T any]() []string {
	switch any(*new(T)).(type) {
	case Request:
		return []string{"ts", "input_tokens", "output_tokens"}
	case Result:
		return []string{"scheduled_ns", "outcome", "run_id"}
	}
	return nil
}

// recordKind names T for errors.
func recordKind[T any]() string {
	switch any(*new(T)).(type) {
	case Request:
		return "trace or workload"
	case Result:
		return "results"
	case ServerPhases:
		return "server phases"
	}
	return "record"
}

// next returns the next row, or io.EOF after the last. The row is valid
// until the next call.
func (p *partFile[T]) next() (*T, error) {
	if p.buf == nil {
		p.buf = make([]T, 512) // made here: a cursor reads into its own batches
	}
	for p.pos >= p.n {
		n, err := p.read(p.buf)
		if err != nil {
			return nil, err
		}
		p.pos, p.n = 0, n
	}
	row := &p.buf[p.pos]
	p.pos++
	return row, nil
}

// read fills dst (cleared first) with the part's next rows and returns how
// many, at least one and at most the row group's batch (planGroup), or
// io.EOF after the last row. Every slice and pointer
// of a row is set afresh, so no row read earlier shares memory with dst's
// new rows. parquet-go panics on some corrupt pages; that panic is turned
// into an error naming the file.
func (p *partFile[T]) read(dst []T) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = 0, fmt.Errorf("read part %s: corrupt data (%v)", p.path, r)
		}
	}()
	for {
		if p.inGroup {
			batch := dst[:min(len(dst), p.batch)]
			clear(batch)
			if p.columns != nil {
				n, err = p.columns.read(any(batch).([]Request), p.rows)
			} else {
				n, err = p.reader.Read(batch)
			}
			if n > 0 {
				p.rows += int64(n)
				return n, nil // an io.EOF with rows comes back with the next call
			}
			if err != nil && err != io.EOF {
				return 0, fmt.Errorf("read part %s row group %d: %w", p.path, p.group, err)
			}
			p.endGroup()
		}
		p.group++
		groups := p.pf.RowGroups()
		if p.group >= len(groups) {
			return 0, io.EOF
		}
		if err := p.checkGroup(p.group); err != nil {
			return 0, fmt.Errorf("read part %s row group %d: %w", p.path, p.group, err)
		}
		if p.batch, err = p.planGroup(p.group); err != nil {
			return 0, fmt.Errorf("read part %s: %w", p.path, err)
		}
		if p.columns != nil {
			p.columns.reset(groups[p.group])
		} else {
			p.reader = parquet.NewGenericRowGroupReader[T](groups[p.group])
		}
		p.inGroup = true
	}
}

// checkGroup checks row group g before it is read: every column chunk's
// page headers (checkPages).
func (p *partFile[T]) checkGroup(g int) error {
	for i := range p.pf.Metadata().RowGroups[g].Columns {
		cc := &p.pf.Metadata().RowGroups[g].Columns[i]
		if err := checkPages(p.f, cc); err != nil {
			return fmt.Errorf("column %s: %w", strings.Join(cc.MetaData.PathInSchema, "."), err)
		}
	}
	return nil
}

// endGroup releases the current row group's readers.
func (p *partFile[T]) endGroup() {
	if p.reader != nil {
		p.reader.Close()
		p.reader = nil
	}
	if p.columns != nil {
		p.columns.close()
	}
	p.inGroup = false
}

func (p *partFile[T]) close() error {
	p.endGroup()
	openParts.Add(-1)
	return p.f.Close()
}

// presize is how many rows to make room for where a file says it holds n:
// a footer's count is only what it says, so it presizes within reason and
// the rows read are what counts.
func presize(n int64) int { return int(min(max(n, 0), 1<<16)) }

// readPartFile reads every row of one Parquet file.
func readPartFile[T any](path string) ([]T, error) {
	p, err := openPartFile[T](path)
	if err != nil {
		return nil, err
	}
	defer p.close()
	rows := make([]T, 0, presize(p.numRows))
	for {
		r, err := p.next()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		rows = append(rows, *r)
	}
}

// writerTag returns the fixed tag "det" for a deterministic writer, else a
// random one (newWriterTag).
func writerTag(deterministic bool) string {
	if deterministic {
		return "det"
	}
	return newWriterTag()
}

// newWriterTag returns a short random tag that makes part names unique per
// writer, so several writers can fill one layout.
func newWriterTag() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // never happens on Linux
	}
	return hex.EncodeToString(b[:])
}
