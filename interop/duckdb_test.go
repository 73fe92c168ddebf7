// Package interop checks servetrace's files with other tools' readers:
// DuckDB, through its Go driver, reads the trace buckets. It is a separate
// module so that the main module builds without cgo and DuckDB's library.
package interop

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"io"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/servetrace/servetrace/datasets"
)

// sourceTruth is what the source file itself says, computed here from its
// text without servetrace.
type sourceTruth struct {
	rows            int64
	first, last     time.Time
	inputs, outputs int64
}

func azureTruth(t *testing.T) sourceTruth {
	d, _ := datasets.Lookup("azure-code-2023")
	r := csv.NewReader(d.Open())
	if _, err := r.Read(); err != nil { // header
		t.Fatal(err)
	}
	var st sourceTruth
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ts, err := time.Parse("2006-01-02 15:04:05.9999999", rec[0])
		if err != nil {
			t.Fatal(err)
		}
		in, _ := strconv.ParseInt(rec[1], 10, 64)
		out, _ := strconv.ParseInt(rec[2], 10, 64)
		if st.rows == 0 || ts.Before(st.first) {
			st.first = ts
		}
		if ts.After(st.last) {
			st.last = ts
		}
		st.rows, st.inputs, st.outputs = st.rows+1, st.inputs+in, st.outputs+out
	}
	return st
}

func mooncakeTruth(t *testing.T, anchor time.Time) sourceTruth {
	d, _ := datasets.Lookup("mooncake-synthetic")
	sc := bufio.NewScanner(d.Open())
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var st sourceTruth
	for sc.Scan() {
		var rec struct {
			Timestamp    float64 `json:"timestamp"`
			InputLength  int64   `json:"input_length"`
			OutputLength int64   `json:"output_length"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		ts := anchor.Add(time.Duration(rec.Timestamp * float64(time.Millisecond)))
		if st.rows == 0 || ts.Before(st.first) {
			st.first = ts
		}
		if ts.After(st.last) {
			st.last = ts
		}
		st.rows, st.inputs, st.outputs = st.rows+1, st.inputs+rec.InputLength, st.outputs+rec.OutputLength
	}
	return st
}

// TestDuckDBReadsBuckets converts both bundled traces and asks DuckDB for
// the row count, time range and token sums with read_parquet and Hive
// partitioning: they must equal what the sources say.
func TestDuckDBReadsBuckets(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	anchor := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		truth sourceTruth
	}{{"azure-code-2023", azureTruth(t)}, {"mooncake-synthetic", mooncakeTruth(t, anchor)}} {
		out := filepath.Join(t.TempDir(), c.name)
		if _, err := datasets.Convert(context.Background(), []string{c.name}, out, datasets.ConvertOptions{Options: datasets.Options{Start: anchor}}); err != nil {
			t.Fatal(err)
		}
		var got sourceTruth
		var hours int64
		row := db.QueryRow(`SELECT count(*), min(ts), max(ts), sum(input_tokens)::BIGINT, sum(output_tokens)::BIGINT, count(DISTINCT (date, hour))
			FROM read_parquet(?, hive_partitioning = true)`, out+"/**/*.parquet")
		if err := row.Scan(&got.rows, &got.first, &got.last, &got.inputs, &got.outputs, &hours); err != nil {
			t.Fatalf("%s: DuckDB: %v", c.name, err)
		}
		w := c.truth
		if got.rows != w.rows || got.inputs != w.inputs || got.outputs != w.outputs {
			t.Errorf("%s: DuckDB reads %d rows, %d input and %d output tokens; the source has %d, %d, %d", c.name, got.rows, got.inputs, got.outputs, w.rows, w.inputs, w.outputs)
		}
		// The bucket keeps microseconds; the Azure source has 100 ns ticks.
		if d := got.first.Sub(w.first).Abs(); d >= time.Microsecond {
			t.Errorf("%s: first arrival %v, source %v", c.name, got.first, w.first)
		}
		if d := got.last.Sub(w.last).Abs(); d >= time.Microsecond {
			t.Errorf("%s: last arrival %v, source %v", c.name, got.last, w.last)
		}
		if hours < 1 {
			t.Errorf("%s: no hive partitions seen", c.name)
		}
		t.Logf("%s: %d rows in %d hour partitions, %v to %v, %d/%d tokens: as the source", c.name, got.rows, hours, got.first, got.last, got.inputs, got.outputs)
	}
}
