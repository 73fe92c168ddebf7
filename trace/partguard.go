package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// Bounds on what a part's Parquet metadata may make parquet-go allocate.
// parquet-go trusts the footer and each page header: the footer's length,
// each list's count and byte string's length, and a page's sizes and value
// count are allocated as read. A part's footer is checked before it is
// opened, and a row group's page headers before it is read.
const (
	// maxFooterBytes bounds a part's footer: its row groups' column chunk
	// metadata, some hundreds of bytes a column chunk.
	maxFooterBytes = 16 << 20
	// maxFooterDecoded bounds what the footer decodes into (every list at
	// its elements' Go size, every byte string at its length).
	maxFooterDecoded = 64 << 20
	// maxPageHeaderBytes bounds a page header, statistics included.
	maxPageHeaderBytes = 1 << 20
	// maxPageBytes bounds a page, compressed or not. servetrace's pages
	// end on a row once they hold 64k entries, so its largest is one row
	// of MaxTokens prefix blocks, 8 bytes each.
	maxPageBytes = 128 << 20
	// maxPageValues bounds a page's values and levels, one such row and
	// the 64k entries before it.
	maxPageValues = 1 << 24
)

// checkFooter reads the footer of the Parquet file f of size bytes and
// refuses one whose length is past the file or maxFooterBytes, whose
// structure runs past its bytes, or which decodes past maxFooterDecoded. A
// file too short for a footer, or not Parquet, is left to parquet-go to
// refuse.
func checkFooter(f io.ReaderAt, size int64) error {
	if size < 12 {
		return nil
	}
	var tail [8]byte
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return err
	}
	if string(tail[4:]) != "PAR1" {
		return nil
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 || n > maxFooterBytes {
		return fmt.Errorf("a footer of %d bytes in a file of %d (at most %d)", n, size, min(size-12, maxFooterBytes))
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, size-8-n); err != nil {
		return err
	}
	used, cost, err := thriftCost(b, reflect.TypeFor[format.FileMetaData]())
	switch {
	case err != nil:
		return fmt.Errorf("footer: %w", err)
	case cost > maxFooterDecoded:
		return fmt.Errorf("a footer of %d bytes that decodes into %d, more than %d", n, cost, maxFooterDecoded)
	case used > len(b):
		return errThriftTruncated
	}
	return nil
}

// checkPages walks the page headers of column chunk cc of the file f and
// refuses a header that decodes past maxPageHeaderBytes, a page that runs
// past its chunk, one past maxPageBytes or maxPageValues, and pages whose
// values together pass the chunk's count in the footer, which the row
// group's bounds are checked against.
func checkPages(f io.ReaderAt, cc *format.ColumnChunk) error {
	md := &cc.MetaData
	start := md.DataPageOffset
	if md.DictionaryPageOffset != 0 {
		start = md.DictionaryPageOffset
	}
	end := start + md.TotalCompressedSize
	if start < 0 || md.TotalCompressedSize < 0 || end < start {
		return fmt.Errorf("a column chunk at offset %d of %d bytes", start, md.TotalCompressedSize)
	}
	var values int64
	buf := make([]byte, 0, 256)
	for pos := start; pos < end; {
		h, n, err := readPageHeader(f, pos, end, &buf)
		if err != nil {
			return fmt.Errorf("page at offset %d: %w", pos, err)
		}
		var num int64
		switch {
		case h.DataPageHeader.Valid:
			num = int64(h.DataPageHeader.V.NumValues)
		case h.DataPageHeaderV2.Valid:
			v := &h.DataPageHeaderV2.V
			num = int64(v.NumValues)
			if int64(v.RepetitionLevelsByteLength)+int64(v.DefinitionLevelsByteLength) > int64(h.CompressedPageSize) {
				return fmt.Errorf("page at offset %d: levels of %d bytes in a page of %d", pos, int64(v.RepetitionLevelsByteLength)+int64(v.DefinitionLevelsByteLength), h.CompressedPageSize)
			}
		case h.DictionaryPageHeader.Valid:
			num = int64(h.DictionaryPageHeader.V.NumValues)
		}
		page := pos + int64(n) + int64(h.CompressedPageSize)
		switch {
		case h.CompressedPageSize < 0 || h.UncompressedPageSize < 0 || num < 0:
			return fmt.Errorf("page at offset %d: a negative size or count", pos)
		case page > end:
			return fmt.Errorf("page at offset %d: %d bytes that run past the column chunk's end at %d", pos, h.CompressedPageSize, end)
		case int64(h.UncompressedPageSize) > maxPageBytes || int64(h.CompressedPageSize) > maxPageBytes:
			return fmt.Errorf("page at offset %d: %d bytes uncompressed, %d compressed, at most %d", pos, h.UncompressedPageSize, h.CompressedPageSize, maxPageBytes)
		case num > maxPageValues:
			return fmt.Errorf("page at offset %d: %d values, at most %d", pos, num, maxPageValues)
		}
		if !h.DictionaryPageHeader.Valid {
			if values += num; values > md.NumValues {
				return fmt.Errorf("page at offset %d: the pages hold more values than the %d the footer says", pos, md.NumValues)
			}
		}
		pos = page
	}
	return nil
}

// readPageHeader reads and checks the page header at pos, before end,
// into a buffer grown as needed up to maxPageHeaderBytes; it returns the
// header and its length.
func readPageHeader(f io.ReaderAt, pos, end int64, buf *[]byte) (*format.PageHeader, int, error) {
	for size := int64(256); ; size *= 4 {
		size = min(size, maxPageHeaderBytes, end-pos)
		if int64(cap(*buf)) < size {
			*buf = make([]byte, size)
		}
		b := (*buf)[:size]
		if _, err := f.ReadAt(b, pos); err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		n, cost, err := thriftCost(b, reflect.TypeFor[format.PageHeader]())
		if errors.Is(err, errThriftTruncated) && size < min(maxPageHeaderBytes, end-pos) {
			continue // read more of it
		}
		switch {
		case errors.Is(err, errThriftTruncated) && size == maxPageHeaderBytes:
			return nil, 0, fmt.Errorf("a page header longer than %d bytes (%w)", size, err)
		case err != nil:
			return nil, 0, fmt.Errorf("page header: %w", err)
		case cost > maxPageHeaderBytes:
			return nil, 0, fmt.Errorf("a page header that decodes into %d bytes, more than %d", cost, maxPageHeaderBytes)
		}
		h := new(format.PageHeader)
		if err := thrift.Unmarshal(new(thrift.CompactProtocol), b[:n], h); err != nil {
			return nil, 0, fmt.Errorf("page header: %w", err)
		}
		return h, n, nil
	}
}
