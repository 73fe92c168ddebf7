package interop

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/servetrace/servetrace/datasets"
)

// writeAzureCSV writes n rows in the Azure LLM inference trace's columns
// (TIMESTAMP with seven fractional digits, ContextTokens,
// GeneratedTokens), 20 a second.
func writeAzureCSV(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		fmt.Fprintf(w, "%s,%d,%d\n", t0.Add(time.Duration(i)*50*time.Millisecond).Format("2006-01-02 15:04:05.0000000"), 100+i%4000, 1+i%300)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkConvertVsDuckDB converts the same 2M-row Azure CSV to zstd
// Parquet with servetrace (GOMAXPROCS 1) and with DuckDB on one thread
// (read_csv, the columns typed and sorted by time, COPY … FORMAT parquet,
// COMPRESSION zstd), in one run, and reports both times and their ratio
// (make bench-convert). CONVERT_ROWS changes the row count.
func BenchmarkConvertVsDuckDB(b *testing.B) {
	rows := 2_000_000
	if v, err := strconv.Atoi(os.Getenv("CONVERT_ROWS")); err == nil && v > 0 {
		rows = v
	}
	dir := b.TempDir()
	in := filepath.Join(dir, "azure.csv")
	writeAzureCSV(b, in, rows)
	db, err := sql.Open("duckdb", "")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("SET threads = 1"); err != nil {
		b.Fatal(err)
	}
	var ours, theirs time.Duration
	for i := range b.N {
		procs := runtime.GOMAXPROCS(1)
		start := time.Now()
		if _, err := datasets.Convert(context.Background(), []string{in}, filepath.Join(dir, fmt.Sprintf("st-%d", i)), datasets.ConvertOptions{}); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		runtime.GOMAXPROCS(procs)

		out := filepath.Join(dir, fmt.Sprintf("duck-%d.parquet", i))
		start = time.Now()
		q := fmt.Sprintf(`COPY (SELECT "TIMESTAMP"::TIMESTAMP AS ts, ContextTokens::BIGINT AS input_tokens, GeneratedTokens::BIGINT AS output_tokens
			FROM read_csv('%s', header = true, columns = {'TIMESTAMP': 'VARCHAR', 'ContextTokens': 'BIGINT', 'GeneratedTokens': 'BIGINT'}) ORDER BY ts)
			TO '%s' (FORMAT parquet, COMPRESSION zstd)`, in, out)
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
		theirs += time.Since(start)
		var got int
		if err := db.QueryRow(fmt.Sprintf("SELECT count(*) FROM '%s' WHERE ts IS NOT NULL", out)).Scan(&got); err != nil || got != rows {
			b.Fatalf("DuckDB wrote %d rows with a time (%v), want %d", got, err, rows)
		}
	}
	n := float64(b.N)
	b.ReportMetric(ours.Seconds()/n, "servetrace-s")
	b.ReportMetric(theirs.Seconds()/n, "duckdb-s")
	b.ReportMetric(ours.Seconds()/theirs.Seconds(), "ratio")
	b.ReportMetric(float64(rows)*n/ours.Seconds(), "servetrace-rows/s")
}
