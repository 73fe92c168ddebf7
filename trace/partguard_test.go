package trace

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/servetrace/servetrace/internal/memcap"
)

// parquetFile is the bytes of a Parquet file whose footer is footer.
func parquetFile(body, footer []byte) []byte {
	b := append([]byte("PAR1"), body...)
	b = append(b, footer...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(footer)))
	return append(b, "PAR1"...)
}

// minimalPart is a Parquet file of rows rows of the three columns a
// request part must have (ts, input_tokens, output_tokens: required
// int64) and an optional one (max_tokens), each PLAIN in one zstd v1 data
// page, written by hand so that edit and patch can make each page header
// say what a hostile file would: edit changes a column's header, patch
// every header's bytes.
func minimalPart(t *testing.T, rows int, edit func(column string, h *format.PageHeader), patch func([]byte) []byte) []byte {
	t.Helper()
	return minimalPartClaiming(t, rows, int64(rows), edit, patch)
}

// minimalPartClaiming is minimalPart whose footer says it holds claimed
// rows.
func minimalPartClaiming(t *testing.T, rows int, claimed int64, edit func(column string, h *format.PageHeader), patch func([]byte) []byte) []byte {
	t.Helper()
	names := []string{"ts", "input_tokens", "output_tokens", "max_tokens"}
	var body bytes.Buffer
	schema := []format.SchemaElement{{Name: "schema", NumChildren: thrift.New(int32(len(names)))}}
	var chunks []format.ColumnChunk
	for _, name := range names {
		rep := format.Required
		var raw []byte
		if name == "max_tokens" { // every row present: one RLE run of 1s
			rep = format.Optional
			raw = append(binary.LittleEndian.AppendUint32(nil, 2), byte(rows<<1), 1)
		}
		schema = append(schema, format.SchemaElement{Name: name, Type: thrift.New(format.Int64), RepetitionType: thrift.New(rep)})
		for i := range rows {
			v := int64(1)
			if name == "ts" {
				v = 1_704_067_200_000_000 + int64(i)
			}
			raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
		}
		comp, err := new(zstd.Codec).Encode(nil, raw)
		if err != nil {
			t.Fatal(err)
		}
		h := format.PageHeader{Type: format.DataPage, UncompressedPageSize: int32(len(raw)), CompressedPageSize: int32(len(comp)),
			DataPageHeader: thrift.New(format.DataPageHeader{NumValues: int32(rows), Encoding: format.Plain, DefinitionLevelEncoding: format.RLE, RepetitionLevelEncoding: format.RLE,
				Statistics: format.Statistics{MaxValue: []byte("ZZZZZZZZ")}})}
		if edit != nil {
			edit(name, &h)
		}
		hb, err := thrift.Marshal(new(thrift.CompactProtocol), &h)
		if err != nil {
			t.Fatal(err)
		}
		if patch != nil {
			hb = patch(hb)
		}
		offset := int64(4 + body.Len())
		body.Write(hb)
		body.Write(comp)
		chunks = append(chunks, format.ColumnChunk{FileOffset: offset, MetaData: format.ColumnMetaData{Type: format.Int64, Encoding: []format.Encoding{format.Plain},
			PathInSchema: []string{name}, Codec: format.Zstd, NumValues: int64(rows), TotalUncompressedSize: int64(len(hb) + len(raw)),
			TotalCompressedSize: int64(len(hb) + len(comp)), DataPageOffset: offset}})
	}
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), &format.FileMetaData{Version: 1, Schema: schema, NumRows: claimed,
		RowGroups: []format.RowGroup{{Columns: chunks, NumRows: int64(rows), TotalByteSize: int64(body.Len())}}})
	if err != nil {
		t.Fatal(err)
	}
	return parquetFile(body.Bytes(), footer)
}

// longStatistic makes a page header's statistic, 8 bytes long, say it is
// 2 GB long.
func longStatistic(hb []byte) []byte {
	return bytes.Replace(hb, []byte("\x08ZZZZZZZZ"), []byte("\xff\xff\xff\xff\x07"), 1)
}

// readHostilePart writes b as a part and reads it whole.
func readHostilePart(t *testing.T, b []byte) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "part-x-00000.parquet")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := readPartFile[Request](path)
	if err != nil && !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the part", err)
	}
	return err
}

// TestLongHostileParquetMetadataIsRefusedBeforeItAllocates (issue 46): a
// Parquet footer or page header of a few bytes that says a length, count
// or size in the gigabytes is refused before parquet-go allocates it,
// within 256 MiB. Before, parquet-go allocated what each said (4 GB for
// the footer's length, 24 GB for a list of 2^28 schema elements, a stack
// a million calls deep, 2 GB for a page, its levels or a statistic) and
// the process died of it.
func TestLongHostileParquetMetadataIsRefusedBeforeItAllocates(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		nested := bytes.Repeat([]byte{0x1c}, 1<<20) // field 1, a struct, within each one
		for _, c := range []struct {
			name, want string
			file       []byte
		}{
			{"a footer longer than the file", "a footer of 4294967280 bytes in a file of 12", []byte("PAR1\xf0\xff\xff\xffPAR1")},
			{"a list of 2^28 schema elements", "a list of 268435455 entries where 1 bytes are left", parquetFile(nil, []byte{0x15, 0x02, 0x19, 0xfc, 0xff, 0xff, 0xff, 0x7f, 0x00})},
			{"structs nested a million deep", "nested deeper than 32", parquetFile(nil, append(nested, make([]byte, len(nested)+1)...))},
			{"a page that decompresses into 2 GB", "2147483647 bytes uncompressed", minimalPart(t, 10, func(_ string, h *format.PageHeader) { h.UncompressedPageSize = 1<<31 - 1 }, nil)},
			{"a page longer than its column chunk", "run past the column chunk's end", minimalPart(t, 10, func(_ string, h *format.PageHeader) { h.CompressedPageSize = 1<<31 - 1 }, nil)},
			{"a page of 2^31 levels", "2147483647 values, at most 16777216", minimalPart(t, 10, func(column string, h *format.PageHeader) {
				if column == "max_tokens" {
					h.DataPageHeader.V.NumValues = 1<<31 - 1
				}
			}, nil)},
			{"a page statistic of 2 GB", "a byte string of 2147483647 bytes", minimalPart(t, 10, nil, longStatistic)},
		} {
			t.Run(c.name, func(t *testing.T) {
				if err := readHostilePart(t, c.file); err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("read = %v; want a refusal saying %q", err, c.want)
				}
			})
		}
	})
}

// TestPartPagesAreHeldToTheFooter: page headers that say more values than
// their column chunk in the footer are refused by offset (before, the
// part read as if the footer were right); a part that keeps to its footer
// reads.
func TestPartPagesAreHeldToTheFooter(t *testing.T) {
	if err := readHostilePart(t, minimalPart(t, 10, nil, nil)); err != nil {
		t.Fatalf("a well-formed part: %v", err)
	}
	// parquet-go's writer puts a page's least and greatest value in its
	// header: ids of 1,000 bytes make headers of some 2,000.
	long := []Request{plainRequest(strings.Repeat("a", 1000), 1_704_067_200_000_000), plainRequest(strings.Repeat("b", 1000), 1_704_067_200_000_001)}
	path := filepath.Join(t.TempDir(), "part-x-00000.parquet")
	if err := writePartFile(path, long, 100); err != nil {
		t.Fatal(err)
	}
	if got, err := readPartFile[Request](path); err != nil || len(got) != 2 {
		t.Fatalf("a part of long page headers: %d rows, %v; want 2", len(got), err)
	}
	for _, c := range []struct {
		name, want string
		edit       func(column string, h *format.PageHeader)
	}{
		{"more values than the footer says", "more values than the 10 the footer says", func(_ string, h *format.PageHeader) { h.DataPageHeader.V.NumValues = 11 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := readHostilePart(t, minimalPart(t, 10, c.edit, nil)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "page at offset") {
				t.Errorf("read = %v; want a refusal naming the page and saying %q", err, c.want)
			}
		})
	}
}

// TestLongRowCountsInTheFooterOnlyPresize (issue 46): a part whose footer
// says it holds 2^34 rows, or a server phases file claiming 2^26, holds
// 10: reading it presizes for a bounded number of rows and reads the 10,
// within 256 MiB. Before, the footer's count was allocated as said, terabytes
// for the part, gigabytes for the phases, and the process died of it.
func TestLongRowCountsInTheFooterOnlyPresize(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "part-x-00000.parquet")
		if err := os.WriteFile(path, minimalPartClaiming(t, 10, 1<<34, nil, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		if rows, err := readPartFile[Request](path); err != nil || len(rows) != 10 {
			t.Errorf("read %d rows, %v; want the 10 it holds", len(rows), err)
		}
		run := t.TempDir()
		if err := os.WriteFile(filepath.Join(run, ServerPhasesName), minimalPartClaiming(t, 10, 1<<26-1, nil, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		// Its rows are read and checked (they are no server phases) as if
		// the footer had said 10.
		if _, _, err := ReadServerPhases(run); err == nil || !strings.Contains(err.Error(), "row 1: trace_id") {
			t.Errorf("ReadServerPhases = %v; want its first row refused as the phases of no request", err)
		}
	})
}
