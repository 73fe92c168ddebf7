package trace

import (
	"context"
	"testing"
)

func BenchmarkBucketWrite(b *testing.B) {
	rows := sampleRequests(100_000)
	b.ReportAllocs()
	for b.Loop() {
		w, err := NewBucketWriter(b.TempDir(), WriterOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows {
			w.Write(r)
		}
		if err := w.Close(&Manifest{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rows)*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkBucketScan scans a 100k-row bucket with the column decoder and
// with parquet-go's generic reader.
func BenchmarkBucketScan(b *testing.B) {
	dir := b.TempDir()
	w, _ := NewBucketWriter(dir, WriterOptions{})
	rows := sampleRequests(100_000)
	for _, r := range rows {
		w.Write(r)
	}
	if err := w.Close(&Manifest{}); err != nil {
		b.Fatal(err)
	}
	bk, err := OpenBucket(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, byColumns := range []bool{true, false} {
		name := "columns"
		if !byColumns {
			name = "generic"
		}
		b.Run(name, func(b *testing.B) {
			defer func(was bool) { decodeByColumns = was }(decodeByColumns)
			decodeByColumns = byColumns
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				if err := bk.Scan(context.Background(), func(*Request) error { n++; return nil }); err != nil || n != len(rows) {
					b.Fatal(n, err)
				}
			}
			b.ReportMetric(float64(len(rows)*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
