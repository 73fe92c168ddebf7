package trace

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// randomFill sets every field of v (a struct, through embedded structs) to a
// random value: strings from a small alphabet (so dict columns repeat),
// numbers, pointers nil a third of the time, slices nil, empty or up to
// maxList long. It walks the struct by reflection, so a column added to
// Request is exercised without this test changing.
func randomFill(v reflect.Value, rng *rand.Rand, maxList int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			randomFill(v.Field(i), rng, maxList)
		}
	case reflect.Pointer:
		if rng.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		randomFill(p.Elem(), rng, maxList)
		v.Set(p)
	case reflect.Slice:
		switch rng.IntN(4) {
		case 0:
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1+rng.IntN(maxList), maxList)
		for i := range s.Len() {
			randomFill(s.Index(i), rng, maxList)
		}
		v.Set(s)
	case reflect.String:
		v.SetString(strings.Repeat(string(rune('a'+rng.IntN(5))), 1+rng.IntN(3)))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int32, reflect.Int64:
		v.SetInt(rng.Int64N(1<<40) - 1<<39)
		if v.Kind() == reflect.Int32 {
			v.SetInt(int64(rng.Int32()))
		}
	case reflect.Float64:
		v.SetFloat(rng.NormFloat64() * 1e3)
	default:
		panic("randomFill: no case for " + v.Kind().String())
	}
}

// readPartWith reads every row of the part at path, by columns or with
// parquet-go's generic reader.
func readPartWith(t *testing.T, path string, byColumns bool) []Request {
	t.Helper()
	p, err := openPartFile[Request](path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if byColumns != (p.columns != nil) {
		if byColumns {
			t.Fatal("the column decoder refused a part servetrace wrote")
		}
		p.columns = nil
	}
	var rows []Request
	for {
		r, err := p.next()
		if err == io.EOF {
			return rows
		}
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, *r)
	}
}

// TestRequestColumnsMatchGenericReader writes random requests, every column
// exercised with nulls, empty and long lists, over several row groups and
// pages, and reads them back by columns and with parquet-go's generic
// reader: the rows must be equal.
func TestRequestColumnsMatchGenericReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([]Request, 7000)
	for i := range in {
		randomFill(reflect.ValueOf(&in[i]).Elem(), rng, MaxFeatures) // lists as long as the reader takes
	}
	// Runs of one row repeated (its request id apart) make pages of one
	// value, nulls and empty lists, which the decoder sets without
	// decoding: one null-heavy, one with every optional column set. The
	// runs do not line up with the row groups of 1500.
	var empty, full Request
	randomFill(reflect.ValueOf(&full).Elem(), rand.New(rand.NewPCG(9, 9)), 3)
	for full.Temperature == nil || full.Status == nil || full.FinishReason == nil || full.ImageIDs == nil {
		randomFill(reflect.ValueOf(&full).Elem(), rng, 3)
	}
	for i := range in {
		id := in[i].RequestID
		switch {
		case i >= 500 && i < 3700:
			in[i] = empty
		case i >= 4200 && i < 6100:
			in[i] = full
		}
		in[i].RequestID = id
	}
	path := filepath.Join(t.TempDir(), "part.parquet")
	if err := writePartFile(path, in, 1500); err != nil {
		t.Fatal(err)
	}
	byColumns := readPartWith(t, path, true)
	generic := readPartWith(t, path, false)
	if len(byColumns) != len(in) || len(generic) != len(in) {
		t.Fatalf("read %d rows by columns and %d generically of %d written", len(byColumns), len(generic), len(in))
	}
	for i := range in {
		if d := firstDifference(reflect.ValueOf(byColumns[i]), reflect.ValueOf(generic[i]), "Request"); d != "" {
			t.Fatalf("row %d: %s", i, d)
		}
	}
}

// firstDifference names the first field where a and b differ, with both
// values (a slice's length and first elements), or returns "".
func firstDifference(a, b reflect.Value, path string) string {
	switch {
	case a.Kind() == reflect.Struct:
		for i := range a.NumField() {
			if d := firstDifference(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.DeepEqual(a.Interface(), b.Interface()):
		return ""
	case a.Kind() == reflect.Slice:
		return fmt.Sprintf("%s: by columns %d elements (nil %v), generic %d (nil %v)", path, a.Len(), a.IsNil(), b.Len(), b.IsNil())
	case a.Kind() == reflect.Pointer && !a.IsNil() && !b.IsNil():
		return fmt.Sprintf("%s: by columns %v, generic %v", path, a.Elem(), b.Elem())
	}
	return fmt.Sprintf("%s: by columns %v, generic %v", path, a, b)
}

// TestRequestColumnsKeepOddFloats: a page of one float but for a NaN or a
// -0 (which a page's bounds do not show) reads back value for value.
func TestRequestColumnsKeepOddFloats(t *testing.T) {
	in := oddFloatRows()
	path := filepath.Join(t.TempDir(), "part.parquet")
	if err := writePartFile(path, in, 1000); err != nil {
		t.Fatal(err)
	}
	checkOddFloats(t, in, readPartWith(t, path, true))
}

// oddFloatRows are 600 requests of temperature 0 but for one -0, and of
// top_p 0.5 but for one NaN.
func oddFloatRows() []Request {
	in := make([]Request, 600)
	for i := range in {
		in[i] = Request{Identity: Identity{RequestID: strconv.Itoa(i)}, Temperature: Ptr(0.0), TopP: Ptr(0.5)}
	}
	in[7].Temperature = Ptr(math.Copysign(0, -1))
	in[9].TopP = Ptr(math.NaN())
	return in
}

// checkOddFloats holds got's temperatures and top_p to in's, bit for bit.
func checkOddFloats(t *testing.T, in, got []Request) {
	t.Helper()
	if len(got) != len(in) {
		t.Fatalf("read %d rows, wrote %d", len(got), len(in))
	}
	for i, r := range got {
		if math.Float64bits(*r.Temperature) != math.Float64bits(*in[i].Temperature) || math.Float64bits(*r.TopP) != math.Float64bits(*in[i].TopP) {
			t.Fatalf("row %d: temperature %v top_p %v, wrote %v and %v", i, *r.Temperature, *r.TopP, *in[i].Temperature, *in[i].TopP)
		}
	}
}

// TestRequestColumnsCoverTheSchema holds the column table to the record's
// struct tags: every leaf column, with its type and nesting, and nothing else.
func TestRequestColumnsCoverTheSchema(t *testing.T) {
	schema := parquet.SchemaOf(Request{})
	d := newRequestDecoder(schema)
	if d == nil {
		t.Fatal("the column decoder refuses the request record's own schema: requestColumns is out of step with the struct tags")
	}
	if len(d.cols) != len(schema.Columns()) || len(requestColumns) != len(schema.Columns()) {
		t.Fatalf("%d columns decoded, %d in the table, %d in the schema", len(d.cols), len(requestColumns), len(schema.Columns()))
	}
	for _, c := range requestColumns {
		if _, ok := schema.Lookup(strings.Split(c.path, ".")...); !ok {
			t.Errorf("%s: not a column of the record", c.path)
		}
	}
}

// TestRequestColumnsRefuseOtherLayouts: a file with a column the table does
// not know, or knows with another type, falls back to the generic reader.
func TestRequestColumnsRefuseOtherLayouts(t *testing.T) {
	type extra struct {
		TS    int64  `parquet:"ts"`
		Other string `parquet:"other"`
	}
	type narrowTS struct {
		TS int32 `parquet:"ts"`
	}
	type optionalTurn struct {
		Turn *int32 `parquet:"turn,optional"`
	}
	// The record without its media and calls columns (schema 1's lists):
	// the generic reader gives their lists as empty, not nil.
	type withoutMedia struct {
		Identity
		TS int64 `parquet:"ts,timestamp(microsecond),delta"`
		Shape
	}
	// Every column, but ts in milliseconds: the generic reader converts.
	millisecondTS := parquet.Group{}
	for _, f := range requestSchema.Fields() {
		millisecondTS[f.Name()] = f
	}
	millisecondTS["ts"] = parquet.Timestamp(parquet.Millisecond)
	for name, schema := range map[string]*parquet.Schema{
		"unknown column": parquet.SchemaOf(extra{}),
		"ts as int32":    parquet.SchemaOf(narrowTS{}),
		"turn optional":  parquet.SchemaOf(optionalTurn{}),
		"missing lists":  parquet.SchemaOf(withoutMedia{}),
		"ts in ms":       parquet.NewSchema("request", millisecondTS),
	} {
		if newRequestDecoder(schema) != nil {
			t.Errorf("%s: the column decoder took a schema it does not know", name)
		}
	}
}

// TestScanRefusesCorruptPages overwrites a stretch of a part's bytes at
// offsets across the file: the scan, by columns and generically, either
// names the part in an error or passes on only rows that validate, and
// never panics or hangs.
func TestScanRefusesCorruptPages(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	rows := make([]Request, 3000)
	for i := range rows {
		rows[i] = Request{Identity: Identity{RequestID: "r" + strconv.Itoa(i), Model: "m" + strconv.Itoa(i%3)}, TS: t0 + int64(i),
			Shape: Shape{InputTokens: int64(1 + i%900), OutputTokens: 5, API: APIChat, PrefixBlocks: []int64{int64(i), int64(i % 7)}}}
	}
	dir := t.TempDir()
	writeRawBucket(t, dir, rows)
	part := filepath.Join(dir, "date=2024-01-01/hour=00/part-raw-00000.parquet")
	clean, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for k := 1; k < 20; k++ {
		corrupt := slices.Clone(clean)
		at := len(corrupt) * k / 20
		for i := at; i < min(at+48, len(corrupt)); i++ {
			corrupt[i] ^= 0x5a
		}
		if err := os.WriteFile(part, corrupt, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, byColumns := range []bool{true, false} {
			decodeByColumns = byColumns
			got, _, err := ReadAll(context.Background(), dir)
			decodeByColumns = true
			if err != nil {
				failed++
				if !strings.Contains(err.Error(), "part-raw-00000.parquet") {
					t.Errorf("bytes %d.. flipped, by columns %v: %v does not name the part", at, byColumns, err)
				}
				continue
			}
			for i := range got {
				if err := got[i].Validate(); err != nil {
					t.Fatalf("bytes %d.. flipped, by columns %v: row %d passed on with %v", at, byColumns, i, err)
				}
			}
		}
	}
	t.Logf("%d of 38 reads of a corrupt part failed with an error naming it", failed)
	if failed == 0 {
		t.Fatal("no corruption was noticed: the test does not reach the pages")
	}
}
