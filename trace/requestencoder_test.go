package trace

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// writeEncoded writes rows as a part through the column encoder, pushed
// into a request buffer the way a bucket writer does.
func writeEncoded(t *testing.T, path string, rows []Request, rowGroupRows int) {
	t.Helper()
	l, err := requestLayoutOf()
	if err != nil {
		t.Fatal(err)
	}
	b := newRequestBuffer(l)
	for i := range rows {
		b.add(&rows[i])
	}
	b.settle()
	pw, err := newRequestPartWriter(rowGroupRows)
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.writeBuffer(context.Background(), path, b); err != nil {
		t.Fatal(err)
	}
}

// encoderCase is rows to write and the row-group size to write them in.
type encoderCase struct {
	rows         []Request
	rowGroupRows int
}

// encoderCases exercise every column: random values with nulls, empty
// and long lists (pages that end on the entry bound) and runs of one row
// (pages of one value); 40k small rows in one row group of more than
// one page of each column; and 90k rows of a few varying columns, the
// rest one value (a model, a null, an empty list) in every row, whose
// alike pages the encoder writes once and copies.
func encoderCases() map[string]encoderCase {
	rng := rand.New(rand.NewPCG(5, 6))
	mixed := make([]Request, 5000)
	for i := range mixed {
		randomFill(reflect.ValueOf(&mixed[i]).Elem(), rng, 400)
	}
	var full Request
	randomFill(reflect.ValueOf(&full).Elem(), rng, 3)
	for i := range mixed {
		id, ts := mixed[i].RequestID, mixed[i].TS
		switch {
		case i >= 300 && i < 2100:
			mixed[i] = Request{}
		case i >= 2600 && i < 3900:
			mixed[i] = full
		}
		mixed[i].RequestID, mixed[i].TS = id, ts
	}
	many := make([]Request, 40_000)
	for i := range many {
		randomFill(reflect.ValueOf(&many[i]).Elem(), rng, 3)
	}
	sparse := make([]Request, 90_000)
	for i := range sparse {
		sparse[i] = Request{Identity: Identity{RequestID: fmt.Sprint(i), Model: "m"}, TS: int64(i / 3),
			Shape: Shape{InputTokens: rng.Int64N(9000), OutputTokens: 1 + rng.Int64N(900), API: APIChat, N: 1, Stream: true}}
	}
	return map[string]encoderCase{"mixed": {mixed, 1500}, "many": {many, 0}, "sparse": {sparse, 40_000}}
}

// TestRequestEncoderReadsLikeParquetGo writes the same rows through the
// column encoder and through parquet-go's generic writer, and reads each
// part by columns and with parquet-go's generic reader: all four readings
// must equal the rows sorted by arrival, ties in order, as parquet-go
// gives them back. The mixed case; TestLongRequestEncoderReadsLikeParquetGo
// reads the larger ones.
func TestRequestEncoderReadsLikeParquetGo(t *testing.T) {
	testEncoderReads(t, "mixed")
}

// TestLongRequestEncoderReadsLikeParquetGo is the check above on the
// cases of many rows, which -race slows to a minute.
func TestLongRequestEncoderReadsLikeParquetGo(t *testing.T) {
	if raceEnabled {
		t.Skip("a long check: make test-timing runs it without -race")
	}
	testEncoderReads(t, "many", "sparse")
}

func testEncoderReads(t *testing.T, names ...string) {
	cases := encoderCases()
	for _, name := range names {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			ref, enc := writeBothWays(t, c)
			want := readPartWith(t, ref, false)
			for _, read := range []struct {
				name      string
				byColumns bool
			}{{"by columns", true}, {"generically", false}} {
				got := readPartWith(t, enc, read.byColumns)
				if len(got) != len(want) {
					t.Fatalf("%s: read %d rows, want %d", read.name, len(got), len(want))
				}
				for i := range want {
					if d := firstDifference(reflect.ValueOf(got[i]), reflect.ValueOf(want[i]), "Request"); d != "" {
						t.Fatalf("%s: row %d: %s (by columns = encoder's part, generic = parquet-go's)", read.name, i, d)
					}
				}
			}
		})
	}
}

// TestRequestEncoderStatisticsMatchParquetGo compares every column
// chunk's null count and bounds with those parquet-go's own writer
// computes for the same rows (list columns: the null count alone, which
// is what the encoder writes for them).
func TestRequestEncoderStatisticsMatchParquetGo(t *testing.T) {
	for name, c := range encoderCases() {
		t.Run(name, func(t *testing.T) {
			ref, enc := writeBothWays(t, c)
			compareStatistics(t, footerOf(t, ref), footerOf(t, enc))
		})
	}
}

// writeBothWays writes c's rows as a part with parquet-go's generic
// writer, sorted by arrival (ties in order) as a bucket writes them, and
// as they come through the column encoder, and returns the two paths.
func writeBothWays(t *testing.T, c encoderCase) (ref, enc string) {
	t.Helper()
	sorted := slices.Clone(c.rows)
	slices.SortStableFunc(sorted, func(a, b Request) int { return cmp.Compare(a.TS, b.TS) })
	dir := t.TempDir()
	ref, enc = filepath.Join(dir, "ref.parquet"), filepath.Join(dir, "enc.parquet")
	if err := writePartFile(ref, sorted, c.rowGroupRows); err != nil {
		t.Fatal(err)
	}
	writeEncoded(t, enc, c.rows, c.rowGroupRows)
	return ref, enc
}

// compareStatistics holds the encoder's footer b to parquet-go's a.
func compareStatistics(t *testing.T, a, b *format.FileMetaData) {
	t.Helper()
	if len(a.RowGroups) != len(b.RowGroups) || a.NumRows != b.NumRows {
		t.Fatalf("encoder: %d row groups, %d rows; parquet-go: %d, %d", len(b.RowGroups), b.NumRows, len(a.RowGroups), a.NumRows)
	}
	if !reflect.DeepEqual(a.Schema, b.Schema) {
		t.Fatal("the encoder's schema differs from parquet-go's")
	}
	for g := range a.RowGroups {
		if a.RowGroups[g].NumRows != b.RowGroups[g].NumRows {
			t.Errorf("group %d: %d rows; parquet-go %d", g, b.RowGroups[g].NumRows, a.RowGroups[g].NumRows)
		}
		for c := range a.RowGroups[g].Columns {
			ma, mb := a.RowGroups[g].Columns[c].MetaData, b.RowGroups[g].Columns[c].MetaData
			path := strings.Join(requestSchema.Columns()[c], ".")
			if ma.NumValues != mb.NumValues || ma.Statistics.NullCount != mb.Statistics.NullCount {
				t.Errorf("group %d %s: %d values, %d nulls; parquet-go %d, %d", g, path, mb.NumValues, mb.Statistics.NullCount, ma.NumValues, ma.Statistics.NullCount)
			}
			if strings.HasSuffix(path, ".list.element") {
				continue
			}
			if !bytes.Equal(ma.Statistics.MinValue, mb.Statistics.MinValue) || !bytes.Equal(ma.Statistics.MaxValue, mb.Statistics.MaxValue) {
				t.Errorf("group %d %s: bounds %x..%x; parquet-go %x..%x", g, path, mb.Statistics.MinValue, mb.Statistics.MaxValue, ma.Statistics.MinValue, ma.Statistics.MaxValue)
			}
		}
	}
}

func footerOf(t *testing.T, path string) *format.FileMetaData {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pf.Metadata()
}

// TestRequestEncoderKeepsOddFloats: a -0 among zeros and a NaN among
// halves read back bit for bit, and the bounds skip the NaN and give the
// zero its sign as the format asks (-0 least, +0 greatest).
func TestRequestEncoderKeepsOddFloats(t *testing.T) {
	in := oddFloatRows()
	path := filepath.Join(t.TempDir(), "part.parquet")
	writeEncoded(t, path, in, 1000)
	checkOddFloats(t, in, readPartWith(t, path, true))
	checkOddFloats(t, in, readPartWith(t, path, false))
	md := footerOf(t, path)
	for c, path := range requestSchema.Columns() {
		st := md.RowGroups[0].Columns[c].MetaData.Statistics
		var lo, hi float64
		switch path[0] {
		case "temperature":
			lo, hi = math.Copysign(0, -1), 0
		case "top_p":
			lo, hi = 0.5, 0.5
		default:
			continue
		}
		if !bytes.Equal(st.MinValue, binary.LittleEndian.AppendUint64(nil, math.Float64bits(lo))) || !bytes.Equal(st.MaxValue, binary.LittleEndian.AppendUint64(nil, math.Float64bits(hi))) {
			t.Errorf("%s: bounds %x..%x, want %v..%v", path[0], st.MinValue, st.MaxValue, lo, hi)
		}
	}
}

// TestRequestBufferSortsStably: rows pushed out of order come out of the
// buffer in arrival order, ties in the order they came, every column
// moved with its row (lists of different lengths included).
func TestRequestBufferSortsStably(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	in := make([]Request, 3000)
	for i := range in {
		randomFill(reflect.ValueOf(&in[i]).Elem(), rng, 5)
		in[i].TS = int64(rng.IntN(50)) // many ties
		in[i].RequestID = fmt.Sprint(i)
	}
	want := slices.Clone(in)
	slices.SortStableFunc(want, func(a, b Request) int { return cmp.Compare(a.TS, b.TS) })
	ref := filepath.Join(t.TempDir(), "ref.parquet")
	if err := writePartFile(ref, want, 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "part.parquet")
	writeEncoded(t, path, in, 0)
	got, exp := readPartWith(t, path, true), readPartWith(t, ref, true)
	for i := range exp {
		if d := firstDifference(reflect.ValueOf(got[i]), reflect.ValueOf(exp[i]), "Request"); d != "" {
			t.Fatalf("row %d: %s", i, d)
		}
	}
}

// TestRequestPartWriterForgetsLastPartsPages: one writer writes two
// parts whose uniform columns hold different values; the second part
// reads back with its own values, not pages kept from the first (a kept
// page is written again only for the same value).
func TestRequestPartWriterForgetsLastPartsPages(t *testing.T) {
	l, err := requestLayoutOf()
	if err != nil {
		t.Fatal(err)
	}
	pw, err := newRequestPartWriter(0)
	if err != nil {
		t.Fatal(err)
	}
	b := newRequestBuffer(l)
	dir := t.TempDir()
	for i, model := range []string{"a", "b"} {
		b.reset()
		for j := range 40_000 {
			r := Request{Identity: Identity{RequestID: fmt.Sprint(j), Model: model}, TS: int64(j), Shape: Shape{N: int32(i + 1)}}
			if i == 1 {
				r.Temperature = Ptr(0.5) // a null column in the first part, not in the second
			}
			b.add(&r)
		}
		b.settle()
		path := filepath.Join(dir, model+".parquet")
		if err := pw.writeBuffer(context.Background(), path, b); err != nil {
			t.Fatal(err)
		}
		for k, r := range readPartWith(t, path, true) {
			if r.Model != model || r.N != int32(i+1) || (i == 1) != (r.Temperature != nil) {
				t.Fatalf("part %s row %d: model %q, n %d, temperature %v", model, k, r.Model, r.N, r.Temperature)
			}
		}
	}
}

// TestFieldOffsetRefusesAForeignPointer: an accessor that gives anything
// but a field of its request is refused at once, not read past.
func TestFieldOffsetRefusesAForeignPointer(t *testing.T) {
	if off := fieldOffset(func(r *Request) *int64 { return &r.TS }); off != unsafe.Offsetof(Request{}.TS) {
		t.Errorf("offset of ts %d, want %d", off, unsafe.Offsetof(Request{}.TS))
	}
	defer func() {
		if recover() == nil {
			t.Error("an accessor of a pointer outside the request was taken")
		}
	}()
	outside := new(int64)
	fieldOffset(func(*Request) *int64 { return outside })
}
