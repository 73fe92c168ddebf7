package datasets

import (
	"context"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

type discard struct{}

func (discard) Write(trace.Request) error { return nil }
func (discard) Reject(trace.Reject) error { return nil }

func BenchmarkReadAzure(b *testing.B) {
	d, _ := Lookup("azure-code-2023")
	b.SetBytes(int64(len(d.Bytes())))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(context.Background(), d.Open(), Options{Name: d.File}, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8819*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkReadMooncake(b *testing.B) {
	d, _ := Lookup("mooncake-synthetic")
	b.SetBytes(int64(len(d.Bytes())))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(context.Background(), d.Open(), Options{Name: d.File}, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(3993*b.N)/b.Elapsed().Seconds(), "rows/s")
}
