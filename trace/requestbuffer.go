package trace

import (
	"cmp"
	"slices"
	"unsafe"
)

// columnValues holds the level entries and values of one data page of a
// column (or, for a dictionary column, of one row group), as the encoder
// writes them: only the slice of the column's Go type is used; defs and
// reps stay empty for a column without such levels.
type columnValues struct {
	// entries counts level entries: one per row, or for a list one per
	// element and one per empty list.
	entries    int
	defs, reps []uint8
	i64        []int64
	i32        []int32
	f64        []float64
	bools      []bool
	strs       []string
}

func (cv *columnValues) reset() {
	cv.entries = 0
	cv.defs, cv.reps = cv.defs[:0], cv.reps[:0]
	cv.i64, cv.i32, cv.f64, cv.bools = cv.i64[:0], cv.i32[:0], cv.f64[:0], cv.bools[:0]
	clear(cv.strs) // drop the rows' strings so they can be collected
	cv.strs = cv.strs[:0]
}

// values returns how many present values cv holds, whatever their type.
func (cv *columnValues) values() int {
	return len(cv.i64) + len(cv.i32) + len(cv.f64) + len(cv.bools) + len(cv.strs)
}

// slotOf returns the slice of cv that holds values of type V.
func slotOf[V any](cv *columnValues) *[]V {
	var p any
	switch any(*new(V)).(type) {
	case int64:
		p = &cv.i64
	case int32:
		p = &cv.i32
	case float64:
		p = &cv.f64
	case bool:
		p = &cv.bools
	case string:
		p = &cv.strs
	}
	return p.(*[]V)
}

// bufferedColumn holds one leaf column of a partition's buffered rows. A
// column whose rows all hold one value so far (an empty list, a null, a
// repeated model name: most of a trace's ~50 columns) keeps just that
// value; it is spread into chunks at its first differing row. So a
// buffered row costs the bytes of its varying columns, not the ~600 of a
// Request, and the encoder reads each column as a slice.
type bufferedColumn interface {
	// push appends the column's values of rows, the first of them the
	// buffer's row number first.
	push(rows []Request, first int)
	// permute reorders the rows: row i becomes what was row perm[i].
	permute(perm []int32)
	// page appends to cv the levels and values of rows lo, lo+1, ... up to
	// hi, stopping after a row once cv holds maxEntries level entries (a
	// list's row is taken whole, and the first always), and returns the
	// rows taken.
	page(lo, hi int, cv *columnValues, maxEntries int) int
	// uniform reports whether every row holds one value, and which (nil
	// for all null or all empty lists): pages of as many rows of one
	// value are alike byte for byte.
	uniform() (value any, ok bool)
	// reset empties the column for the next partition.
	reset()
}

// fieldOffset returns the offset in a Request of the field get gives.
// The buffers read a field of each of a block's rows by its offset: a
// call of the accessor for each field of each row cost more than the rest
// of buffering the row. It panics unless get gives a field of the Request
// it is passed.
func fieldOffset[V any](get func(*Request) *V) uintptr {
	var r Request
	base, p := uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(get(&r)))
	if p < base || p+unsafe.Sizeof(*new(V)) > base+unsafe.Sizeof(r) {
		panic("trace: a column accessor does not give a field of its request")
	}
	return p - base
}

// field returns the field at offset off of r.
func field[V any](r *Request, off uintptr) *V { return (*V)(unsafe.Add(unsafe.Pointer(r), off)) }

// scalarBuffer buffers a required column.
type scalarBuffer[V comparable] struct {
	off uintptr // of the field in a Request
	// exact turns off the one-value form (floating point: -0 equals 0).
	exact         bool
	spread        bool // vals holds every row; else every row holds first
	first         V
	vals, scratch chunked[V]
}

func newScalarBuffer[V comparable](get func(*Request) *V) bufferedColumn {
	_, float := any(*new(V)).(float64)
	return &scalarBuffer[V]{off: fieldOffset(get), exact: float}
}

func (b *scalarBuffer[V]) push(rows []Request, first int) {
	for i := range rows {
		v := *field[V](&rows[i], b.off)
		if !b.spread {
			if first+i == 0 {
				b.first = v
				if !b.exact {
					continue
				}
			} else if v == b.first {
				continue
			}
			b.spread = true
			b.vals.reset()
			b.vals.addN(b.first, first+i)
		}
		b.vals.add(v)
	}
}

func (b *scalarBuffer[V]) permute(perm []int32) {
	if b.spread {
		b.vals.permuted(&b.scratch, perm)
		b.vals, b.scratch = b.scratch, b.vals
	}
}

func (b *scalarBuffer[V]) page(lo, hi int, cv *columnValues, maxEntries int) int {
	n := min(hi-lo, max(maxEntries-cv.entries, 1))
	slot := slotOf[V](cv)
	if b.spread {
		*slot = b.vals.appendTo(*slot, lo, lo+n)
	} else {
		for range n {
			*slot = append(*slot, b.first)
		}
	}
	cv.entries += n
	return n
}

func (b *scalarBuffer[V]) uniform() (any, bool) { return b.first, !b.spread }

func (b *scalarBuffer[V]) reset() {
	var zero V
	b.spread, b.first = false, zero
	b.vals.reset()
	b.scratch.reset()
}

// optionalBuffer buffers a nullable column; its one-value form is all
// null.
type optionalBuffer[V any] struct {
	off               uintptr // of the field in a Request
	spread            bool
	present, present2 chunked[bool]
	vals, vals2       chunked[V] // one per row, zero where null
}

func newOptionalBuffer[V any](get func(*Request) **V) bufferedColumn {
	return &optionalBuffer[V]{off: fieldOffset(get)}
}

func (b *optionalBuffer[V]) push(rows []Request, first int) {
	var zero V
	for i := range rows {
		p := *field[*V](&rows[i], b.off)
		if !b.spread {
			if p == nil {
				continue
			}
			b.spread = true
			b.present.reset()
			b.vals.reset()
			b.present.addN(false, first+i)
			b.vals.addN(zero, first+i)
		}
		if p == nil {
			b.present.add(false)
			b.vals.add(zero)
		} else {
			b.present.add(true)
			b.vals.add(*p)
		}
	}
}

func (b *optionalBuffer[V]) permute(perm []int32) {
	if b.spread {
		b.present.permuted(&b.present2, perm)
		b.vals.permuted(&b.vals2, perm)
		b.present, b.present2 = b.present2, b.present
		b.vals, b.vals2 = b.vals2, b.vals
	}
}

func (b *optionalBuffer[V]) page(lo, hi int, cv *columnValues, maxEntries int) int {
	n := min(hi-lo, max(maxEntries-cv.entries, 1))
	if !b.spread {
		for range n {
			cv.defs = append(cv.defs, 0)
		}
	} else {
		slot := slotOf[V](cv)
		for i := lo; i < lo+n; i++ {
			if b.present.at(i) {
				cv.defs, *slot = append(cv.defs, 1), append(*slot, b.vals.at(i))
			} else {
				cv.defs = append(cv.defs, 0)
			}
		}
	}
	cv.entries += n
	return n
}

func (b *optionalBuffer[V]) uniform() (any, bool) { return nil, !b.spread }

func (b *optionalBuffer[V]) reset() {
	b.spread = false
	b.present.reset()
	b.vals.reset()
	b.present2.reset()
	b.vals2.reset()
}

// listBuffer buffers a list column (a required LIST of required
// elements); its one-value form is all empty. In a page an element's
// entry has definition level 1 and repetition level 1 but for the first
// of its row; an empty (or nil) list is one entry of levels 0.
type listBuffer[V any] struct {
	off         uintptr // of the field in a Request
	spread      bool
	lens, lens2 chunked[int32] // one per row
	vals, vals2 chunked[V]     // the rows' elements, one after another
	// atRow and atVal are where the last page ended, so that the next
	// page of a row group starts without a scan.
	atRow, atVal int
}

func newListBuffer[V any](get func(*Request) *[]V) bufferedColumn {
	return &listBuffer[V]{off: fieldOffset(get)}
}

func (b *listBuffer[V]) push(rows []Request, first int) {
	for i := range rows {
		l := *field[[]V](&rows[i], b.off)
		if !b.spread {
			if len(l) == 0 {
				continue
			}
			b.spread = true
			b.lens.reset()
			b.vals.reset()
			b.lens.addN(0, first+i)
		}
		b.lens.add(int32(len(l)))
		b.vals.addAll(l)
	}
}

func (b *listBuffer[V]) permute(perm []int32) {
	if !b.spread {
		return
	}
	starts := make([]int, b.lens.n+1)
	for i := range b.lens.n {
		starts[i+1] = starts[i] + int(b.lens.at(i))
	}
	b.lens2.reset()
	b.vals2.reset()
	for _, p := range perm {
		b.lens2.add(b.lens.at(int(p)))
		for j := starts[p]; j < starts[p+1]; j++ {
			b.vals2.add(b.vals.at(j))
		}
	}
	b.lens, b.lens2 = b.lens2, b.lens
	b.vals, b.vals2 = b.vals2, b.vals
	b.atRow, b.atVal = 0, 0
}

func (b *listBuffer[V]) page(lo, hi int, cv *columnValues, maxEntries int) int {
	if !b.spread {
		n := min(hi-lo, max(maxEntries-cv.entries, 1))
		for range n {
			cv.defs, cv.reps = append(cv.defs, 0), append(cv.reps, 0)
		}
		cv.entries += n
		return n
	}
	if lo != b.atRow { // a page that does not follow the last: find its first element
		b.atVal = 0
		for i := range lo {
			b.atVal += int(b.lens.at(i))
		}
		b.atRow = lo
	}
	slot := slotOf[V](cv)
	n := 0
	for i := lo; i < hi; i++ {
		if n > 0 && cv.entries >= maxEntries {
			break
		}
		k := int(b.lens.at(i))
		if k == 0 {
			cv.defs, cv.reps = append(cv.defs, 0), append(cv.reps, 0)
			cv.entries++
		} else {
			*slot = b.vals.appendTo(*slot, b.atVal, b.atVal+k)
			cv.reps = append(cv.reps, 0)
			for range k - 1 {
				cv.reps = append(cv.reps, 1)
			}
			for range k {
				cv.defs = append(cv.defs, 1)
			}
			cv.entries += k
			b.atVal += k
		}
		n++
	}
	b.atRow = lo + n
	return n
}

func (b *listBuffer[V]) uniform() (any, bool) { return nil, !b.spread }

func (b *listBuffer[V]) reset() {
	b.spread, b.atRow, b.atVal = false, 0, 0
	b.lens.reset()
	b.vals.reset()
	b.lens2.reset()
	b.vals2.reset()
}

// blockRows is how many rows a request buffer holds as rows before it
// pushes them into its columns: a block fits a core's cache, and each
// column takes a block's values in one call.
const blockRows = 256

// requestBuffer holds a partition's rows column by column, one
// bufferedColumn per leaf column in file order, and their arrival times
// for sorting. Rows come in through a block of whole rows.
type requestBuffer struct {
	cols     []bufferedColumn
	block    []Request
	ts, ts2  chunked[int64]
	n        int  // rows, those in the block included
	unsorted bool // a row came earlier than the one before it
	perm     []int32
}

func newRequestBuffer(l *requestLayout) *requestBuffer {
	b := &requestBuffer{block: make([]Request, 0, blockRows)}
	for _, c := range l.cols {
		b.cols = append(b.cols, c.spec.buffer())
	}
	return b
}

// add appends a shallow copy of r: its slices and pointed-to values are
// read when the block drains (at most blockRows rows later), and only its
// strings are kept after that.
func (b *requestBuffer) add(r *Request) {
	if b.n > 0 && r.TS < b.ts.at(b.n-1) {
		b.unsorted = true
	}
	b.ts.add(r.TS)
	b.block = append(b.block, *r)
	b.n++
	if len(b.block) == blockRows {
		b.drain()
	}
}

// drain pushes the block's rows into the columns.
func (b *requestBuffer) drain() {
	first := b.n - len(b.block)
	for _, c := range b.cols {
		c.push(b.block, first)
	}
	clear(b.block)
	b.block = b.block[:0]
}

// settle makes the buffer ready to encode: every row in its columns, in
// arrival order, ties in the order they came.
func (b *requestBuffer) settle() {
	b.drain()
	if !b.unsorted {
		return
	}
	b.perm = b.perm[:0]
	for i := range b.n {
		b.perm = append(b.perm, int32(i))
	}
	slices.SortStableFunc(b.perm, func(x, y int32) int { return cmp.Compare(b.ts.at(int(x)), b.ts.at(int(y))) })
	for _, c := range b.cols {
		c.permute(b.perm)
	}
	b.ts.permuted(&b.ts2, b.perm)
	b.ts, b.ts2 = b.ts2, b.ts
	b.unsorted = false
}

// span returns the earliest and latest arrival of a settled buffer.
func (b *requestBuffer) span() (first, last int64) { return b.ts.at(0), b.ts.at(b.n - 1) }

// reset empties the buffer for another partition, keeping its memory.
func (b *requestBuffer) reset() {
	for _, c := range b.cols {
		c.reset()
	}
	clear(b.block)
	b.block = b.block[:0]
	b.ts.reset()
	b.ts2.reset()
	b.n, b.unsorted = 0, false
}
