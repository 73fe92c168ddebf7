package trace

import (
	"cmp"
	"slices"
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
// value; it is spread into a slice at its first differing row. So a
// buffered row costs the bytes of its varying columns, not the ~600 of a
// Request, and the encoder reads each column as a slice.
type bufferedColumn interface {
	// push appends the column's value of r, the buffer's row number row.
	push(r *Request, row int)
	// permute reorders the rows: row i becomes what was row perm[i].
	permute(perm []int32)
	// page appends to cv the levels and values of rows lo, lo+1, ... up to
	// hi, stopping after a row once cv holds maxEntries level entries (a
	// list's row is taken whole, and the first always), and returns the
	// rows taken.
	page(lo, hi int, cv *columnValues, maxEntries int) int
	// uniform reports whether every row holds one value (all null, all
	// empty lists), so pages of as many rows are alike byte for byte.
	uniform() bool
	// reset empties the column for the next partition.
	reset()
}

// scalarBuffer buffers a required column.
type scalarBuffer[V comparable] struct {
	get func(*Request) *V
	// exact turns off the one-value form (floating point: -0 equals 0).
	exact   bool
	spread  bool // vals holds every row; else every row holds first
	first   V
	vals    []V
	scratch []V
}

func newScalarBuffer[V comparable](get func(*Request) *V) bufferedColumn {
	_, float := any(*new(V)).(float64)
	return &scalarBuffer[V]{get: get, exact: float}
}

func (b *scalarBuffer[V]) push(r *Request, row int) {
	v := *b.get(r)
	if !b.spread {
		if row == 0 {
			b.first = v
			if !b.exact {
				return
			}
		} else if v == b.first {
			return
		}
		b.spread = true
		b.vals = b.vals[:0]
		for range row {
			b.vals = append(b.vals, b.first)
		}
	}
	b.vals = append(b.vals, v)
}

func (b *scalarBuffer[V]) permute(perm []int32) {
	if !b.spread {
		return
	}
	b.scratch = permuted(b.scratch[:0], b.vals, perm)
	b.vals, b.scratch = b.scratch, b.vals
}

func (b *scalarBuffer[V]) page(lo, hi int, cv *columnValues, maxEntries int) int {
	n := min(hi-lo, max(maxEntries-cv.entries, 1))
	slot := slotOf[V](cv)
	if b.spread {
		*slot = append(*slot, b.vals[lo:lo+n]...)
	} else {
		for range n {
			*slot = append(*slot, b.first)
		}
	}
	cv.entries += n
	return n
}

func (b *scalarBuffer[V]) uniform() bool { return !b.spread }

func (b *scalarBuffer[V]) reset() {
	var zero V
	b.spread, b.first = false, zero
	clear(b.vals)
	b.vals = b.vals[:0]
}

// optionalBuffer buffers a nullable column; its one-value form is all
// null.
type optionalBuffer[V any] struct {
	get     func(*Request) **V
	spread  bool
	present []bool
	vals    []V // one per row, zero where null
	scratch struct {
		present []bool
		vals    []V
	}
}

func newOptionalBuffer[V any](get func(*Request) **V) bufferedColumn {
	return &optionalBuffer[V]{get: get}
}

func (b *optionalBuffer[V]) push(r *Request, row int) {
	p := *b.get(r)
	var zero V
	if !b.spread {
		if p == nil {
			return
		}
		b.spread = true
		b.present, b.vals = b.present[:0], b.vals[:0]
		for range row {
			b.present, b.vals = append(b.present, false), append(b.vals, zero)
		}
	}
	if p == nil {
		b.present, b.vals = append(b.present, false), append(b.vals, zero)
	} else {
		b.present, b.vals = append(b.present, true), append(b.vals, *p)
	}
}

func (b *optionalBuffer[V]) permute(perm []int32) {
	if !b.spread {
		return
	}
	b.scratch.present = permuted(b.scratch.present[:0], b.present, perm)
	b.scratch.vals = permuted(b.scratch.vals[:0], b.vals, perm)
	b.present, b.scratch.present = b.scratch.present, b.present
	b.vals, b.scratch.vals = b.scratch.vals, b.vals
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
			if b.present[i] {
				cv.defs, *slot = append(cv.defs, 1), append(*slot, b.vals[i])
			} else {
				cv.defs = append(cv.defs, 0)
			}
		}
	}
	cv.entries += n
	return n
}

func (b *optionalBuffer[V]) uniform() bool { return !b.spread }

func (b *optionalBuffer[V]) reset() {
	b.spread = false
	clear(b.vals)
	b.present, b.vals = b.present[:0], b.vals[:0]
}

// listBuffer buffers a list column (a required LIST of required
// elements); its one-value form is all empty. In a page an element's
// entry has definition level 1 and repetition level 1 but for the first
// of its row; an empty (or nil) list is one entry of levels 0.
type listBuffer[V any] struct {
	get    func(*Request) *[]V
	spread bool
	lens   []int32 // one per row
	vals   []V     // the rows' elements, one after another
	// at is the row and element where the last page ended, so that the
	// next page of a row group starts without a scan.
	atRow, atVal int
	scratch      struct {
		lens []int32
		vals []V
	}
}

func newListBuffer[V any](get func(*Request) *[]V) bufferedColumn {
	return &listBuffer[V]{get: get}
}

func (b *listBuffer[V]) push(r *Request, row int) {
	l := *b.get(r)
	if !b.spread {
		if len(l) == 0 {
			return
		}
		b.spread = true
		b.lens, b.vals = b.lens[:0], b.vals[:0]
		for range row {
			b.lens = append(b.lens, 0)
		}
	}
	b.lens, b.vals = append(b.lens, int32(len(l))), append(b.vals, l...)
}

func (b *listBuffer[V]) permute(perm []int32) {
	if !b.spread {
		return
	}
	starts := make([]int, len(b.lens)+1)
	for i, n := range b.lens {
		starts[i+1] = starts[i] + int(n)
	}
	b.scratch.lens, b.scratch.vals = b.scratch.lens[:0], b.scratch.vals[:0]
	for _, p := range perm {
		b.scratch.lens = append(b.scratch.lens, b.lens[p])
		b.scratch.vals = append(b.scratch.vals, b.vals[starts[p]:starts[p+1]]...)
	}
	b.lens, b.scratch.lens = b.scratch.lens, b.lens
	b.vals, b.scratch.vals = b.scratch.vals, b.vals
	clear(b.scratch.vals)
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
		b.atRow, b.atVal = 0, 0
		for _, n := range b.lens[:lo] {
			b.atVal += int(n)
		}
		b.atRow = lo
	}
	slot := slotOf[V](cv)
	n := 0
	for i := lo; i < hi; i++ {
		if n > 0 && cv.entries >= maxEntries {
			break
		}
		k := int(b.lens[i])
		if k == 0 {
			cv.defs, cv.reps = append(cv.defs, 0), append(cv.reps, 0)
			cv.entries++
		} else {
			*slot = append(*slot, b.vals[b.atVal:b.atVal+k]...)
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

func (b *listBuffer[V]) uniform() bool { return !b.spread }

func (b *listBuffer[V]) reset() {
	b.spread, b.atRow, b.atVal = false, 0, 0
	clear(b.vals)
	b.lens, b.vals = b.lens[:0], b.vals[:0]
}

// permuted appends to dst the values of src in the order of perm.
func permuted[V any](dst, src []V, perm []int32) []V {
	for _, p := range perm {
		dst = append(dst, src[p])
	}
	return dst
}

// requestBuffer holds a partition's rows column by column, one
// bufferedColumn per leaf column in file order, and their arrival times
// for sorting.
type requestBuffer struct {
	cols         []bufferedColumn
	ts           []int64
	n            int
	unsorted     bool // a row came earlier than the one before it
	minTS, maxTS int64
	perm         []int32
}

func newRequestBuffer(l *requestLayout) *requestBuffer {
	b := &requestBuffer{}
	for _, c := range l.cols {
		b.cols = append(b.cols, c.spec.buffer())
	}
	return b
}

// add appends r's columns. Nothing of r is kept but its strings.
func (b *requestBuffer) add(r *Request) {
	for _, c := range b.cols {
		c.push(r, b.n)
	}
	if b.n > 0 && r.TS < b.ts[b.n-1] {
		b.unsorted = true
	}
	if b.n == 0 {
		b.minTS, b.maxTS = r.TS, r.TS
	}
	b.minTS, b.maxTS = min(b.minTS, r.TS), max(b.maxTS, r.TS)
	b.ts = append(b.ts, r.TS)
	b.n++
}

// sort puts the rows in arrival order, ties in the order they came.
func (b *requestBuffer) sort() {
	if !b.unsorted {
		return
	}
	b.perm = b.perm[:0]
	for i := range b.n {
		b.perm = append(b.perm, int32(i))
	}
	slices.SortStableFunc(b.perm, func(x, y int32) int { return cmp.Compare(b.ts[x], b.ts[y]) })
	for _, c := range b.cols {
		c.permute(b.perm)
	}
	sorted := make([]int64, 0, b.n)
	b.ts = permuted(sorted, b.ts, b.perm)
	b.unsorted = false
}

// reset empties the buffer for another partition, keeping its memory.
func (b *requestBuffer) reset() {
	for _, c := range b.cols {
		c.reset()
	}
	b.ts, b.n, b.unsorted = b.ts[:0], 0, false
}
