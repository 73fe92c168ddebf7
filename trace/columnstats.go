package trace

import (
	"cmp"
	"encoding/binary"
	"math"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// columnStats are a column chunk's statistics: its nulls (empty lists
// count as nulls, as parquet-go counts them) and, outside lists, its least
// and greatest value, NaNs left out.
type columnStats struct {
	nulls      int64
	has        bool
	minI, maxI int64
	minF, maxF float64
	minS, maxS string
}

// add counts the nulls of cv and, outside lists, takes in its values'
// bounds.
func (st *columnStats) add(col *layoutColumn, cv *columnValues) {
	st.nulls += int64(cv.entries - cv.values())
	if col.maxRep > 0 {
		return
	}
	switch col.kind {
	case parquet.Int64:
		lo, hi, ok := boundsOf(cv.i64, every)
		widen(st, &st.minI, &st.maxI, lo, hi, ok)
	case parquet.Int32:
		lo, hi, ok := boundsOf(cv.i32, every)
		widen(st, &st.minI, &st.maxI, int64(lo), int64(hi), ok)
	case parquet.Boolean:
		lo, hi, ok := true, false, false
		for _, v := range cv.bools {
			lo, hi, ok = lo && v, hi || v, true
		}
		widen(st, &st.minI, &st.maxI, int64(boolByte(lo)), int64(boolByte(hi)), ok)
	case parquet.Double:
		lo, hi, ok := boundsOf(cv.f64, func(v float64) bool { return !math.IsNaN(v) })
		widen(st, &st.minF, &st.maxF, lo, hi, ok)
	case parquet.ByteArray:
		st.strings(cv.strs)
	}
}

// merge takes in o's nulls and bounds.
func (st *columnStats) merge(o *columnStats) {
	st.nulls += o.nulls
	if !o.has {
		return
	}
	if !st.has {
		nulls := st.nulls
		*st = *o
		st.nulls = nulls
		return
	}
	st.minI, st.maxI = min(st.minI, o.minI), max(st.maxI, o.maxI)
	st.minF, st.maxF = math.Min(st.minF, o.minF), math.Max(st.maxF, o.maxF)
	st.minS, st.maxS = min(st.minS, o.minS), max(st.maxS, o.maxS)
}

// strings takes in the bounds of a string column's values.
func (st *columnStats) strings(vals []string) {
	lo, hi, ok := boundsOf(vals, every)
	widen(st, &st.minS, &st.maxS, lo, hi, ok)
}

// widen takes lo..hi, when ok, into the bounds *least..*greatest of st,
// which hold nothing until st.has.
func widen[T cmp.Ordered](st *columnStats, least, greatest *T, lo, hi T, ok bool) {
	switch {
	case !ok:
	case !st.has:
		*least, *greatest, st.has = lo, hi, true
	default:
		*least, *greatest = min(*least, lo), max(*greatest, hi)
	}
}

// every keeps every value for boundsOf.
func every[T any](T) bool { return true }

// boundsOf returns the least and greatest of the values keep accepts.
func boundsOf[T cmp.Ordered](vals []T, keep func(T) bool) (lo, hi T, ok bool) {
	for _, v := range vals {
		switch {
		case !keep(v):
		case !ok:
			lo, hi, ok = v, v, true
		case v < lo:
			lo = v
		case v > hi:
			hi = v
		}
	}
	return lo, hi, ok
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// format returns the statistics as the column metadata holds them; a zero
// bound is written as -0 for the least and +0 for the greatest, as the
// format asks of floating-point columns.
func (st *columnStats) format(col *layoutColumn) format.Statistics {
	s := format.Statistics{NullCount: st.nulls}
	if !st.has {
		return s
	}
	switch col.kind {
	case parquet.Int64:
		s.MinValue, s.MaxValue = binary.LittleEndian.AppendUint64(nil, uint64(st.minI)), binary.LittleEndian.AppendUint64(nil, uint64(st.maxI))
	case parquet.Int32:
		s.MinValue, s.MaxValue = binary.LittleEndian.AppendUint32(nil, uint32(st.minI)), binary.LittleEndian.AppendUint32(nil, uint32(st.maxI))
	case parquet.Boolean:
		s.MinValue, s.MaxValue = []byte{byte(st.minI)}, []byte{byte(st.maxI)}
	case parquet.Double:
		lo, hi := st.minF, st.maxF
		if lo == 0 {
			lo = math.Copysign(0, -1)
		}
		if hi == 0 {
			hi = 0
		}
		s.MinValue, s.MaxValue = binary.LittleEndian.AppendUint64(nil, math.Float64bits(lo)), binary.LittleEndian.AppendUint64(nil, math.Float64bits(hi))
	case parquet.ByteArray:
		s.MinValue, s.MaxValue = []byte(st.minS), []byte(st.maxS)
	}
	return s
}
