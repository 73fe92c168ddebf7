package trace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/delta"
	"github.com/parquet-go/parquet-go/encoding/rle"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// Data pages end on a row once they hold pageRows rows or, for a list
// column, pageEntries level entries: about parquet-go's page size, so a
// reader holds as much of a part at a time as before.
const (
	pageRows    = 32 << 10
	pageEntries = 64 << 10
)

// requestPartWriter writes request parts from a requestBuffer column by
// column: each leaf column's pages are taken from its buffer as a typed
// slice, encoded as the record's struct tags ask, compressed with zstd and
// written as version-2 data pages. parquet-go's generic writer spent most
// of a conversion walking each row's ~50 mostly empty fields. Its buffers
// are reused from part to part.
type requestPartWriter struct {
	rowGroupRows int
	layout       *requestLayout
	codec        zstd.Codec

	out  *bufio.Writer
	off  int64
	cv   columnValues
	dict map[string]int32
	// words holds a dictionary column's entries in index order.
	words           []string
	idx             []int32
	reps, defs, raw []byte
	comp            []byte
	hdrBuf          bytes.Buffer
	enc             *thrift.Encoder
	// page is the last page written, header and sections, and
	// pageUncompressed its size uncompressed.
	page             []byte
	pageUncompressed int64
	// same keeps, by column, pages of a uniform column (one value in
	// every row) to write again for each later page of as many rows of the
	// same value, in this part or the next, most pages of most columns: a
	// full page, and the last shorter one.
	same [][2]samePage
	// zeros are a page's worth of zero levels and dictionary indices.
	zeroLevels  []uint8
	zeroIndices []int32
}

// samePage is a written data page of a uniform column.
type samePage struct {
	rows, entries int
	value         any // the column's one value (nil: all null, all empty)
	stats         columnStats
	uncompressed  int64
	bytes         []byte
}

func newRequestPartWriter(rowGroupRows int) (*requestPartWriter, error) {
	layout, err := requestLayoutOf()
	if err != nil {
		return nil, err
	}
	if rowGroupRows <= 0 {
		rowGroupRows = DefaultRowGroupRows
	}
	pw := &requestPartWriter{rowGroupRows: rowGroupRows, layout: layout, codec: zstd.Codec{Level: zstd.SpeedFastest},
		dict: map[string]int32{}, same: make([][2]samePage, len(layout.cols)),
		zeroLevels: make([]uint8, pageRows), zeroIndices: make([]int32, pageRows)}
	pw.enc = thrift.NewEncoder(new(thrift.CompactProtocol).NewWriter(&pw.hdrBuf))
	return pw, nil
}

// writeBuffer writes the rows of buf, in arrival order, as the part at
// path, stopping with ctx's error between row groups once ctx ends.
func (pw *requestPartWriter) writeBuffer(ctx context.Context, path string, buf *requestBuffer) error {
	buf.settle()
	return createPart(path, func(f io.Writer) error {
		if pw.out == nil {
			pw.out = bufio.NewWriterSize(f, 1<<20)
		} else {
			pw.out.Reset(f)
		}
		defer pw.out.Reset(nil) // drop the file
		return pw.writeFile(ctx, buf)
	})
}

// writeFile writes the whole Parquet file to pw.out.
func (pw *requestPartWriter) writeFile(ctx context.Context, buf *requestBuffer) error {
	pw.off = 0
	if err := pw.write([]byte("PAR1")); err != nil {
		return err
	}
	md := format.FileMetaData{Version: pw.layout.version, Schema: pw.layout.schema,
		CreatedBy: pw.layout.createdBy, ColumnOrders: pw.layout.columnOrders}
	for lo := 0; lo < buf.n; lo += pw.rowGroupRows {
		if err := ctx.Err(); err != nil {
			return err
		}
		rg, err := pw.writeRowGroup(buf, lo, min(lo+pw.rowGroupRows, buf.n), len(md.RowGroups))
		if err != nil {
			return err
		}
		md.NumRows += rg.NumRows
		md.RowGroups = append(md.RowGroups, rg)
	}
	pw.hdrBuf.Reset()
	if err := pw.enc.Encode(&md); err != nil {
		return fmt.Errorf("encode the footer: %w", err)
	}
	footer := binary.LittleEndian.AppendUint32(pw.hdrBuf.Bytes(), uint32(pw.hdrBuf.Len()))
	if err := pw.write(append(footer, "PAR1"...)); err != nil {
		return err
	}
	return pw.out.Flush()
}

func (pw *requestPartWriter) write(b []byte) error {
	n, err := pw.out.Write(b)
	pw.off += int64(n)
	return err
}

// writeRowGroup writes every column chunk of rows lo to hi of buf.
func (pw *requestPartWriter) writeRowGroup(buf *requestBuffer, lo, hi, ordinal int) (format.RowGroup, error) {
	rg := format.RowGroup{FileOffset: pw.off, Ordinal: int16(ordinal), NumRows: int64(hi - lo)}
	for i := range pw.layout.cols {
		cc, err := pw.writeColumn(&pw.layout.cols[i], buf.cols[i], lo, hi)
		if err != nil {
			return rg, fmt.Errorf("column %s: %w", pw.layout.cols[i].spec.path, err)
		}
		rg.Columns = append(rg.Columns, cc)
		rg.TotalByteSize += cc.MetaData.TotalUncompressedSize
		rg.TotalCompressedSize += cc.MetaData.TotalCompressedSize
	}
	return rg, nil
}

// columnChunk is the bookkeeping of one column chunk being written.
type columnChunk struct {
	meta  format.ColumnMetaData
	stats columnStats
	pages int32
	// start is where the chunk's first page begins, dataStart its first
	// data page (after the dictionary page, if any).
	start, dataStart int64
}

// writeColumn writes the column chunk of col, buffered in bc, for rows lo
// to hi.
func (pw *requestPartWriter) writeColumn(col *layoutColumn, bc bufferedColumn, lo, hi int) (format.ColumnChunk, error) {
	cc := columnChunk{start: pw.off, meta: format.ColumnMetaData{Type: format.Type(col.kind), PathInSchema: col.path, Codec: format.Zstd}}
	var err error
	if col.dict {
		err = pw.writeDictColumn(col, bc, lo, hi, &cc)
	} else {
		err = pw.writePlainColumn(col, bc, lo, hi, &cc)
	}
	if err != nil {
		return format.ColumnChunk{}, err
	}
	m := &cc.meta
	if col.maxDef > 0 || col.maxRep > 0 {
		m.Encoding = append(m.Encoding, format.RLE)
	}
	dataEnc := format.Plain
	switch {
	case col.dict:
		m.Encoding = append(m.Encoding, format.Plain)
		dataEnc = format.RLEDictionary
	case col.delta:
		dataEnc = format.DeltaBinaryPacked
	}
	m.Encoding = append(m.Encoding, dataEnc)
	slices.Sort(m.Encoding)
	m.Encoding = slices.Compact(m.Encoding)
	m.EncodingStats = append(m.EncodingStats, format.PageEncodingStats{PageType: format.DataPageV2, Encoding: dataEnc, Count: cc.pages})
	m.DataPageOffset = cc.dataStart
	if col.dict {
		m.EncodingStats = append([]format.PageEncodingStats{{PageType: format.DictionaryPage, Encoding: format.Plain, Count: 1}}, m.EncodingStats...)
		m.DictionaryPageOffset = cc.start
	}
	m.Statistics = cc.stats.format(col)
	return format.ColumnChunk{MetaData: cc.meta}, nil
}

// writePlainColumn writes a column without a dictionary, a page at a time.
func (pw *requestPartWriter) writePlainColumn(col *layoutColumn, bc bufferedColumn, lo, hi int, cc *columnChunk) error {
	maxEntries := pageRows
	if col.maxRep > 0 {
		maxEntries = pageEntries
	}
	value, uniform := bc.uniform()
	for lo < hi {
		if uniform {
			ok, err := pw.writeSame(col, cc, min(hi-lo, pageRows), value)
			if err != nil {
				return err
			}
			if ok {
				lo += min(hi-lo, pageRows)
				continue
			}
		}
		pw.cv.reset()
		rows := bc.page(lo, min(hi, lo+pageRows), &pw.cv, maxEntries)
		lo += rows
		var stats columnStats
		stats.add(col, &pw.cv)
		cc.stats.merge(&stats)
		raw, enc, err := pw.encodeValues(col, &pw.cv)
		if err != nil {
			return err
		}
		if err := pw.writeDataPage(col, cc, rows, pw.cv.entries, pw.cv.values(), pw.cv.defs, pw.cv.reps, raw, enc); err != nil {
			return err
		}
		if uniform {
			pw.keepSame(col, rows, pw.cv.entries, stats, value)
		}
	}
	return nil
}

// writeSame writes again the kept page of col if it has rows rows of
// value, and reports whether it did.
func (pw *requestPartWriter) writeSame(col *layoutColumn, cc *columnChunk, rows int, value any) (bool, error) {
	s := pw.samePage(col, rows)
	if s.rows != rows || s.value != value {
		return false, nil
	}
	if cc.pages == 0 {
		cc.dataStart = pw.off
	}
	cc.pages++
	cc.meta.NumValues += int64(s.entries)
	cc.meta.TotalUncompressedSize += s.uncompressed
	cc.meta.TotalCompressedSize += int64(len(s.bytes))
	cc.stats.merge(&s.stats)
	return true, pw.write(s.bytes)
}

// samePage is where col's kept page of rows rows is or would be.
func (pw *requestPartWriter) samePage(col *layoutColumn, rows int) *samePage {
	if rows == pageRows {
		return &pw.same[col.index][0]
	}
	return &pw.same[col.index][1]
}

// keepSame keeps the page just written as col's page of rows rows.
func (pw *requestPartWriter) keepSame(col *layoutColumn, rows, entries int, stats columnStats, value any) {
	s := pw.samePage(col, rows)
	s.rows, s.entries, s.stats, s.uncompressed, s.value = rows, entries, stats, pw.pageUncompressed, value
	s.bytes = append(s.bytes[:0], pw.page...)
}

// writeDictColumn writes a string column as a dictionary of the row
// group's distinct values, then pages of indices into it.
func (pw *requestPartWriter) writeDictColumn(col *layoutColumn, bc bufferedColumn, lo, hi int, cc *columnChunk) error {
	pw.cv.reset()
	_, uniform := bc.uniform()
	if uniform {
		bc.page(lo, lo+1, &pw.cv, 1) // the one value, or a null
	} else {
		bc.page(lo, hi, &pw.cv, math.MaxInt)
	}
	clear(pw.dict)
	pw.words, pw.idx = pw.words[:0], pw.idx[:0]
	last, lastIdx := "", int32(-1)
	for _, s := range pw.cv.strs {
		if lastIdx < 0 || s != last {
			i, ok := pw.dict[s]
			if !ok {
				i = int32(len(pw.words))
				pw.dict[s] = i
				pw.words = append(pw.words, s)
			}
			last, lastIdx = s, i
		}
		pw.idx = append(pw.idx, lastIdx)
	}
	pw.raw = pw.raw[:0]
	for _, w := range pw.words {
		pw.raw = binary.LittleEndian.AppendUint32(pw.raw, uint32(len(w)))
		pw.raw = append(pw.raw, w...)
	}
	if err := pw.writeDictPage(cc, len(pw.words), pw.raw); err != nil {
		return err
	}
	cc.stats.strings(pw.words)
	clear(pw.words)
	if uniform {
		return pw.writeUniformDictPages(col, cc, hi-lo, len(pw.cv.strs) == 1)
	}
	cc.stats.nulls += int64(pw.cv.entries - len(pw.cv.strs))
	var dictEnc rle.DictionaryEncoding
	rows, vals := len(pw.cv.strs), 0
	if col.maxDef > 0 {
		rows = len(pw.cv.defs)
	}
	for lo := 0; lo < rows; lo += pageRows {
		hi := min(lo+pageRows, rows)
		var defs []uint8
		n := hi - lo
		if col.maxDef > 0 {
			defs = pw.cv.defs[lo:hi]
			n = 0
			for _, d := range defs {
				n += int(d)
			}
		}
		var err error
		if pw.raw, err = dictEnc.EncodeInt32(pw.raw, pw.idx[vals:vals+n]); err != nil {
			return err
		}
		if err := pw.writeDataPage(col, cc, hi-lo, hi-lo, n, defs, nil, pw.raw, format.RLEDictionary); err != nil {
			return err
		}
		vals += n
	}
	return nil
}

// writeUniformDictPages writes the data pages of rows rows of a
// dictionary column of one value: every index 0 where present, else every
// row null.
func (pw *requestPartWriter) writeUniformDictPages(col *layoutColumn, cc *columnChunk, rows int, present bool) error {
	var dictEnc rle.DictionaryEncoding
	for rows > 0 {
		n := min(rows, pageRows)
		rows -= n
		ok, err := pw.writeSame(col, cc, n, present) // the value is in the dictionary page
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		var defs []uint8
		var idx []int32
		if present {
			idx = pw.zeroIndices[:n]
		} else {
			defs = pw.zeroLevels[:n]
		}
		if pw.raw, err = dictEnc.EncodeInt32(pw.raw, idx); err != nil {
			return err
		}
		if err := pw.writeDataPage(col, cc, n, n, len(idx), defs, nil, pw.raw, format.RLEDictionary); err != nil {
			return err
		}
		stats := columnStats{nulls: int64(n - len(idx))}
		cc.stats.merge(&stats)
		pw.keepSame(col, n, n, stats, present)
	}
	return nil
}

// encodeValues encodes the present values of cv as col's data pages hold
// them, into pw.raw.
func (pw *requestPartWriter) encodeValues(col *layoutColumn, cv *columnValues) ([]byte, format.Encoding, error) {
	b := pw.raw[:0]
	switch col.kind {
	case parquet.Int64:
		if col.delta {
			return pw.deltaPacked(new(delta.BinaryPackedEncoding).EncodeInt64(b, cv.i64))
		}
		for _, v := range cv.i64 {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	case parquet.Int32:
		if col.delta {
			return pw.deltaPacked(new(delta.BinaryPackedEncoding).EncodeInt32(b, cv.i32))
		}
		for _, v := range cv.i32 {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
	case parquet.Double:
		for _, v := range cv.f64 {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	case parquet.Boolean:
		b = slices.Grow(b, (len(cv.bools)+7)/8)[:(len(cv.bools)+7)/8]
		clear(b)
		for i, v := range cv.bools {
			if v {
				b[i/8] |= 1 << (i % 8)
			}
		}
	case parquet.ByteArray:
		for _, s := range cv.strs {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
	}
	pw.raw = b
	return b, format.Plain, nil
}

// deltaPacked keeps a DELTA_BINARY_PACKED encoding's output as pw.raw.
func (pw *requestPartWriter) deltaPacked(b []byte, err error) ([]byte, format.Encoding, error) {
	pw.raw = b
	return b, format.DeltaBinaryPacked, err
}

// writeDictPage writes a dictionary page of n PLAIN-encoded values.
func (pw *requestPartWriter) writeDictPage(cc *columnChunk, n int, raw []byte) error {
	var err error
	if pw.comp, err = pw.codec.Encode(pw.comp, raw); err != nil {
		return fmt.Errorf("compress: %w", err)
	}
	h := format.PageHeader{Type: format.DictionaryPage, UncompressedPageSize: int32(len(raw)), CompressedPageSize: int32(len(pw.comp)),
		CRC:                  int32(crc32.ChecksumIEEE(pw.comp)),
		DictionaryPageHeader: thrift.New(format.DictionaryPageHeader{NumValues: int32(n), Encoding: format.Plain})}
	return pw.writePage(cc, &h, len(raw), nil, nil, pw.comp)
}

// writeDataPage writes a version-2 data page: levels as they are, the
// values compressed.
func (pw *requestPartWriter) writeDataPage(col *layoutColumn, cc *columnChunk, rows, entries, values int, defs, reps []uint8, raw []byte, enc format.Encoding) error {
	var err error
	pw.reps, pw.defs = pw.reps[:0], pw.defs[:0]
	if col.maxRep > 0 {
		e := rle.Encoding{BitWidth: bits.Len(uint(col.maxRep))}
		if pw.reps, err = e.EncodeLevels(pw.reps, reps); err != nil {
			return err
		}
	}
	if col.maxDef > 0 {
		e := rle.Encoding{BitWidth: bits.Len(uint(col.maxDef))}
		if pw.defs, err = e.EncodeLevels(pw.defs, defs); err != nil {
			return err
		}
	}
	if pw.comp, err = pw.codec.Encode(pw.comp, raw); err != nil {
		return fmt.Errorf("compress: %w", err)
	}
	crc := crc32.Update(crc32.Update(crc32.ChecksumIEEE(pw.reps), crc32.IEEETable, pw.defs), crc32.IEEETable, pw.comp)
	levels := len(pw.reps) + len(pw.defs)
	nulls := entries - values
	h := format.PageHeader{Type: format.DataPageV2, UncompressedPageSize: int32(levels + len(raw)), CompressedPageSize: int32(levels + len(pw.comp)),
		CRC: int32(crc),
		DataPageHeaderV2: thrift.New(format.DataPageHeaderV2{NumValues: int32(entries), NumNulls: int32(nulls), NumRows: int32(rows),
			Encoding: enc, DefinitionLevelsByteLength: int32(len(pw.defs)), RepetitionLevelsByteLength: int32(len(pw.reps)),
			IsCompressed: thrift.New(true), Statistics: format.Statistics{NullCount: int64(nulls)}})}
	cc.meta.NumValues += int64(entries)
	if cc.pages == 0 {
		cc.dataStart = pw.off
	}
	cc.pages++
	return pw.writePage(cc, &h, levels+len(raw), pw.reps, pw.defs, pw.comp)
}

// writePage writes a page header and its sections, counting its sizes
// into the chunk's.
func (pw *requestPartWriter) writePage(cc *columnChunk, h *format.PageHeader, uncompressed int, sections ...[]byte) error {
	pw.hdrBuf.Reset()
	if err := pw.enc.Encode(h); err != nil {
		return fmt.Errorf("encode a page header: %w", err)
	}
	pw.page = append(pw.page[:0], pw.hdrBuf.Bytes()...)
	pw.pageUncompressed = int64(len(pw.page) + uncompressed)
	for _, s := range sections {
		pw.page = append(pw.page, s...)
	}
	cc.meta.TotalUncompressedSize += pw.pageUncompressed
	cc.meta.TotalCompressedSize += int64(len(pw.page))
	return pw.write(pw.page)
}
