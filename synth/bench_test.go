package synth

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/procstat"
	"github.com/servetrace/servetrace/trace"
)

// BenchmarkFit fits a generated trace of SERVETRACE_FIT_ROWS rows (default
// 1,000,000; make bench-fit uses 10,000,000) and reports rows/s and the
// process's peak resident memory during the fit (VmHWM, reset before each
// fit). "no-latent" is everything but the latent layer's simulation, whose
// cost is bounded by its simulated span and not by the rows; "whole" is the
// default fit, latent layer included.
func BenchmarkFit(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SERVETRACE_FIT_ROWS")); err == nil && v > 0 {
		rows = v
	}
	ctx := context.Background()
	// A day of the Azure code sample's fitted workload, scaled to the row
	// count: the diurnal, burst, length and prefix layers all have work.
	base, err := Fit(ctx, sampleBucket(b, "azure-code-2023"), FitOptions{NoLatent: true})
	if err != nil {
		b.Fatal(err)
	}
	day := 24 * time.Hour
	scale := float64(rows) / (base.MeanRatePerS() * day.Seconds())
	dir := generateBucket(b, base, GenerateOptions{Seed: 1, Duration: day, RateScale: scale})
	man, err := trace.ReadManifest(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts FitOptions
	}{{"no-latent", FitOptions{NoLatent: true}}, {"whole", FitOptions{}}} {
		b.Run(c.name, func(b *testing.B) {
			var peak int64
			for b.Loop() {
				procstat.ResetPeakRSS()
				if _, err := Fit(ctx, dir, c.opts); err != nil {
					b.Fatal(err)
				}
				peak = max(peak, procstat.PeakRSS())
			}
			b.ReportMetric(float64(man.Rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
		})
	}
}
