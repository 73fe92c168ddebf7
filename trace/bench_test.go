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
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := bk.Scan(context.Background(), func(*Request) error { n++; return nil }); err != nil || n != len(rows) {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(len(rows)*b.N)/b.Elapsed().Seconds(), "rows/s")
}
