package interop

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// fillRandom sets every field of v (through embedded structs) at random:
// pointers nil a third of the time, slices nil, empty or short, strings
// from a small alphabet so that dictionary columns repeat. It walks the
// struct, so a column added to the record is exercised here unchanged.
func fillRandom(v reflect.Value, rng *rand.Rand) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillRandom(v.Field(i), rng)
		}
	case reflect.Pointer:
		if rng.IntN(3) > 0 {
			p := reflect.New(v.Type().Elem())
			fillRandom(p.Elem(), rng)
			v.Set(p)
		}
	case reflect.Slice:
		if n := rng.IntN(4); n > 0 {
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range s.Len() {
				fillRandom(s.Index(i), rng)
			}
			v.Set(s)
		}
	case reflect.String:
		v.SetString(strings.Repeat(string(rune('a'+rng.IntN(4))), 1+rng.IntN(3)))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int32:
		v.SetInt(int64(rng.Int32N(1<<20) - 1<<19))
	case reflect.Int64:
		v.SetInt(rng.Int64N(1<<40) - 1<<39)
	case reflect.Float64:
		v.SetFloat(rng.NormFloat64())
	}
}

// columnsOf returns each Parquet column of r by name, as DuckDB's driver
// gives a row back: NULL as nil, a list as []any (empty, not nil), the
// arrival time as a time. It reads the struct tags, not servetrace's
// writer, so it is a second opinion on what each column must hold.
func columnsOf(v reflect.Value, out map[string]any) {
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		if f.Anonymous {
			columnsOf(fv, out)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		switch {
		case name == "ts":
			out[name] = time.UnixMicro(fv.Int()).UTC()
		case fv.Kind() == reflect.Pointer && fv.IsNil():
			out[name] = nil
		case fv.Kind() == reflect.Pointer:
			out[name] = fv.Elem().Interface()
		case fv.Kind() == reflect.Slice:
			l := []any{}
			for j := range fv.Len() {
				l = append(l, fv.Index(j).Interface())
			}
			out[name] = l
		default:
			out[name] = fv.Interface()
		}
	}
}

// TestDuckDBReadsEveryColumn writes 20,000 random requests, every column
// exercised, out of time order and over two hours, through servetrace's
// bucket writer, and reads the bucket back with DuckDB: every column of
// every row must be what was written.
func TestDuckDBReadsEveryColumn(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	start := time.Date(2025, 3, 1, 10, 30, 0, 0, time.UTC).UnixMicro()
	rows := make([]trace.Request, 20_000)
	for i, k := range rng.Perm(len(rows)) {
		fillRandom(reflect.ValueOf(&rows[i]).Elem(), rng)
		rows[i].RequestID = fmt.Sprintf("r%05d", k)
		rows[i].TS = start + int64(k)*300_000 // 0.3 s apart: 100 minutes
	}
	out := filepath.Join(t.TempDir(), "bucket")
	w, err := trace.NewBucketWriter(out, trace.WriterOptions{RowGroupRows: 3000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "trace"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{}
	for _, r := range rows {
		m := map[string]any{}
		columnsOf(reflect.ValueOf(r), m)
		want[r.RequestID] = m
	}

	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Query(`SELECT * FROM read_parquet(?, hive_partitioning = false) ORDER BY ts`, out+"/**/*.parquet")
	if err != nil {
		t.Fatalf("DuckDB: %v", err)
	}
	defer res.Close()
	names, err := res.Columns()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(want["r00000"]) {
		t.Fatalf("DuckDB reads %d columns, the record has %d", len(names), len(want["r00000"]))
	}
	n := 0
	for ; res.Next(); n++ {
		got := make([]any, len(names))
		ptrs := make([]any, len(names))
		for i := range got {
			ptrs[i] = &got[i]
		}
		if err := res.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		id, _ := got[0].(string)
		if want := fmt.Sprintf("r%05d", n); id != want {
			t.Fatalf("row %d: request %q, want %q (rows out of time order)", n, id, want)
		}
		for i, name := range names {
			w := want[id][name]
			if g, ok := got[i].(time.Time); ok {
				got[i] = g.UTC()
			}
			if !reflect.DeepEqual(got[i], w) {
				t.Fatalf("request %s column %s: DuckDB reads %#v, written %#v", id, name, got[i], w)
			}
		}
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(rows) {
		t.Fatalf("DuckDB reads %d rows, written %d", n, len(rows))
	}
}
