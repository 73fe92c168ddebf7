package synth

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
)

// writeBucket writes rows to a new bucket under a temp dir.
func writeBucket(t *testing.T, rows []trace.Request, sources ...trace.Source) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bucket")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Sources: sources}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// poissonRows draws n arrivals of a Poisson process with the given rate and
// uniform lengths in [1, 1000].
func poissonRows(n int, rate float64, seed uint64) []trace.Request {
	rng := rand.New(rand.NewPCG(seed, 9))
	rows := make([]trace.Request, n)
	t := 0.0
	for i := range rows {
		t += rng.ExpFloat64() / rate
		rows[i] = trace.Request{TS: int64(t * 1e6), Shape: trace.Shape{InputTokens: 1 + rng.Int64N(1000), OutputTokens: 1 + rng.Int64N(1000), API: trace.APIChat, Stream: true}}
	}
	return rows
}

func TestFitRecoversKnownPoissonRate(t *testing.T) {
	const rate = 5.0
	m, err := Fit(context.Background(), writeBucket(t, poissonRows(10000, rate, 1)), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := m.Arrivals
	if a.RateCI95[0] > rate || a.RateCI95[1] < rate {
		t.Errorf("rate CI %v misses the true rate %v (estimate %v)", a.RateCI95, rate, a.RatePerS)
	}
	// The CI's half-width for 10,000 events is about 1.96/sqrt(n) relative.
	if w := (a.RateCI95[1] - a.RateCI95[0]) / 2 / rate; math.Abs(w-1.96/100) > 0.002 {
		t.Errorf("CI relative half-width %.4f, want about 0.0196", w)
	}
	if math.Abs(a.InterArrivalCV-1) > 0.05 || a.Note != "" {
		t.Errorf("Poisson CV %.3f (want about 1), note %q", a.InterArrivalCV, a.Note)
	}
	// Uniform [1,1000]: the median knot sits near 500.5, the extremes at 1 and 1000.
	in := m.Lengths.Input
	if med := in.Quantile(0.5); math.Abs(med-500) > 15 {
		t.Errorf("input median %v, want about 500", med)
	}
	if in.Knots[0] != 1 || in.Knots[len(in.Knots)-1] != 1000 {
		t.Errorf("input knots span %v..%v, want 1..1000", in.Knots[0], in.Knots[len(in.Knots)-1])
	}
	if math.Abs(m.Lengths.Spearman) > 0.05 {
		t.Errorf("independent lengths show Spearman %.3f", m.Lengths.Spearman)
	}
	if m.Mix.API[trace.APIChat] != 1 || m.Mix.StreamShare != 1 {
		t.Errorf("mix %+v", m.Mix)
	}
}

func TestGenerateThenFitRoundTrip(t *testing.T) {
	src, err := Fit(context.Background(), writeBucket(t, poissonRows(2000, 3, 2)), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []trace.Request
	n, err := Generate(context.Background(), src, GenerateOptions{Duration: 2000 * time.Second, Seed: 7}, func(r trace.Request) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil || int(n) != len(rows) {
		t.Fatal(n, err)
	}
	// Count over 2000 s at the fitted rate: Poisson, sd = sqrt(mean).
	mean := src.Arrivals.RatePerS * 2000
	if math.Abs(float64(n)-mean) > 4*math.Sqrt(mean) {
		t.Errorf("generated %d requests, want %.0f ± %.0f", n, mean, 4*math.Sqrt(mean))
	}
	if !slices.IsSortedFunc(rows, func(a, b trace.Request) int { return int(a.TS - b.TS) }) {
		t.Error("generated arrivals are not in time order")
	}
	refit, err := Fit(context.Background(), writeBucket(t, rows), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := refit.Arrivals; r.RateCI95[0] > src.Arrivals.RatePerS || r.RateCI95[1] < src.Arrivals.RatePerS {
		t.Errorf("refit rate CI %v misses the generating rate %v", r.RateCI95, src.Arrivals.RatePerS)
	}
	for _, p := range []float64{0.1, 0.5, 0.9} {
		want, got := src.Lengths.Output.Quantile(p), refit.Lengths.Output.Quantile(p)
		if math.Abs(got-want) > 40 {
			t.Errorf("output p%.0f: generated %v, model %v", p*100, got, want)
		}
	}
	// Same seed, same workload; another seed, another.
	again := 0
	Generate(context.Background(), src, GenerateOptions{Duration: 10 * time.Second, Seed: 7}, func(r trace.Request) error {
		if rows[again].TS != r.TS || rows[again].InputTokens != r.InputTokens {
			t.Fatalf("seed 7 is not reproducible at row %d", again)
		}
		again++
		return nil
	})
}

func TestFitAzureSampleMatchesPublishedFigures(t *testing.T) {
	d, _ := datasets.Lookup("azure-code-2023")
	var rows []trace.Request
	sink := sinkFunc(func(r trace.Request) error { rows = append(rows, r); return nil })
	if _, err := datasets.Read(context.Background(), d.Open(), datasets.Options{Name: d.File}, sink); err != nil {
		t.Fatal(err)
	}
	m, err := Fit(context.Background(), writeBucket(t, rows), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// shared/datasets/README.md and ENGINEERING-NOTES.md: 2.57 req/s, CV about 13,
	// input p50 1469, output p50 13, Spearman about 0.
	if math.Abs(m.Arrivals.RatePerS-2.57) > 0.01 {
		t.Errorf("rate %.3f, want 2.57", m.Arrivals.RatePerS)
	}
	if m.Arrivals.InterArrivalCV < 12 || m.Arrivals.InterArrivalCV > 14 || m.Arrivals.Note == "" {
		t.Errorf("CV %.2f (want about 13) with note %q", m.Arrivals.InterArrivalCV, m.Arrivals.Note)
	}
	if got := m.Lengths.Input.Quantile(0.5); math.Abs(got-1469) > 15 {
		t.Errorf("input p50 %v, want about 1469", got)
	}
	if got := m.Lengths.Output.Quantile(0.5); math.Abs(got-13) > 1 {
		t.Errorf("output p50 %v, want 13", got)
	}
	if math.Abs(m.Lengths.Spearman) > 0.15 {
		t.Errorf("Spearman %.3f, want about 0", m.Lengths.Spearman)
	}
}

func TestReadModelRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	bad := &Model{Version: ModelVersion, Arrivals: ArrivalModel{Kind: "poisson", RatePerS: -1}}
	path := filepath.Join(dir, "m.json")
	if err := WriteModel(path, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadModel(path); err == nil {
		t.Error("a negative rate passed validation")
	}
	if _, err := ReadModel(filepath.Join(dir, "none.json")); err == nil {
		t.Error("a missing model read without error")
	}
}

type sinkFunc func(trace.Request) error

func (f sinkFunc) Write(r trace.Request) error { return f(r) }
func (sinkFunc) Reject(trace.Reject) error     { return nil }
