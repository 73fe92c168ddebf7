package synth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// errEnough ends a fuzzed generation once it has shown enough rows.
var errEnough = errors.New("enough rows")

// FuzzReadModel feeds arbitrary bytes to the model loader ReadModel uses;
// a model it accepts must generate 2 s of valid rows (at most 2,000 are
// looked at) without a panic, in well under the 10 s it is given.
func FuzzReadModel(f *testing.F) {
	for _, name := range []string{"azure", "mooncake", "sessions"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+"-model.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A Fourier intensity with a latent layer and sessions: no bundled fit
	// has one.
	m := testModel(f, "sessions")
	m.Arrivals.Intensity = Intensity{Kind: "fourier", DailyHarmonics: 1, WeeklyHarmonics: 1, Coef: []float64{math.Log(50), 0.5, -0.2, 0.1, 0.1},
		MeanRatePerS: 50, SpanS: 8 * daySeconds, BinSeconds: 300, Overdispersion: 1}
	b, err := json.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(tinyModel(f))
	f.Add([]byte(`{"version": 2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeModel(b, "fuzz.json")
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rows := 0
		_, err = Generate(ctx, m, GenerateOptions{Duration: 2 * time.Second, MaxInputTokens: 4096, Seed: 1}, func(r trace.Request) error {
			if err := r.Validate(); err != nil {
				return fmt.Errorf("row %d is not a valid trace row: %w", rows, err)
			}
			if rows++; rows >= 2000 {
				return errEnough
			}
			return nil
		})
		switch {
		case err == nil, errors.Is(err, errEnough):
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("2 s of workload took more than 10 s (%d rows)", rows)
		default:
			t.Fatalf("a model that loads does not generate: %v", err)
		}
	})
}

// tinyModel is a valid model with every part and two-knot tables: small
// enough for the fuzzer's mutations to reach its numbers.
func tinyModel(t testing.TB) []byte {
	t.Helper()
	tab := func(lo, hi float64) Marginal { return Marginal{N: 10, Mean: (lo + hi) / 2, Knots: []float64{lo, hi}} }
	cat := func(v ...string) Categorical {
		c := Categorical{Values: v}
		for range v {
			c.Shares = append(c.Shares, 1/float64(len(v)))
		}
		return c
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &Model{Version: ModelVersion,
		Source: SourceInfo{Rows: 10, FirstTurns: 10, Start: start, End: start.Add(time.Hour), SpanFraction: [2]float64{0, 1}, BlockSize: 16},
		Arrivals: ArrivalModel{
			Intensity: Intensity{Kind: "piecewise", PieceRates: []float64{2, 5}, SpanS: 3600, MeanRatePerS: 3.5, BinSeconds: 60, Overdispersion: 1},
			Renewal: Renewal{Dist: "gamma", Shape: 0.5, KS: 0.1, Chain: &GapChain{Order: 1, Edges: []float64{0.5}, Quantiles: [][]float64{{0, 0.4}, {0.6, 3}},
				Transition: [][]float64{{0.7, 0.3}, {0.4, 0.6}}, Scale: 1}},
			Latent: Latent{Kind: "lgcp", Sigma: []float64{0.5}, TauS: []float64{2}, Floor: 0.3}},
		Lengths: []LengthClass{{Model: "m", API: trace.APIChat, Share: 1, Input: tab(1, 500), Output: tab(1, 50), Sampler: "copula", Rho: 0.2,
			Bins: []LengthBin{{InputLow: 0, InputHigh: 501, Output: tab(2, 40)}}}},
		Prefix: &PrefixModel{BlockSize: 16, ReuseShare: 0.5, Depth: tab(0.1, 1), AgeS: tab(0, 30),
			ByInputBin: []ReuseBin{{InputHigh: binHigh(inputBin(100)), Depth: tab(0.5, 1), AgeS: tab(0, 5)}}},
		Sessions: &SessionModel{Sessions: 5, MultiTurnShare: 0.5, Turns: tab(1, 4), ThinkS: tab(0, 20), NewTokens: tab(1, 100)},
		Mix:      Mix{Model: cat("m"), Tenant: cat("a", "b"), Stream: cat("true", "false"), Temperature: cat("0.7"), Features: cat("", "json_schema+logprobs")},
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzReadPartial feeds arbitrary bytes, as the decompressed stream of a
// fit partial, to the reader fit --merge uses: it must refuse them naming
// the file, or accept a partial that merges with a copy of itself
// without a panic. (Finishing a fit takes 0.1 s, too long to fuzz; the
// shard tests finish merged partials.)
func FuzzReadPartial(f *testing.F) {
	dir := f.TempDir()
	rows := make([]trace.Request, 0, 120)
	for i := range 120 {
		rows = append(rows, trace.Request{Identity: trace.Identity{RequestID: fmt.Sprint(i), SessionID: fmt.Sprint(i % 7)}, TS: 1_700_000_000_000_000 + int64(i)*1_500_000,
			Shape: trace.Shape{InputTokens: 300 + int64(i%9)*40, OutputTokens: 5 + int64(i%13), API: trace.APIChat, PrefixBlocks: []int64{int64(1 + i%4)}}})
	}
	bucket := writeBucket(f, rows, &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	p, err := FitPartial(context.Background(), bucket, FitOptions{}, 0, 1)
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "seed.fitpart.gz")
	if err := WritePartial(path, p); err != nil {
		f.Fatal(err)
	}
	var seed []byte
	if err := withPartial(path, func(gz io.Reader) error { seed, err = io.ReadAll(gz); return err }); err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte(`{"format":"servetrace-fit-partial","version":1}` + "\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := readPartialStream("fuzz.fitpart.gz", bytes.NewReader(b))
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.fitpart.gz") {
				t.Fatalf("an error that does not name the file: %v", err)
			}
			return
		}
		q, err := readPartialStream("fuzz.fitpart.gz", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("read twice: %v", err)
		}
		p.state.merge(q.state, rand.New(rand.NewPCG(mergeSeed, 0)))
		if want := 2 * q.Rows; p.state.rows != want {
			t.Fatalf("merged %d rows, want %d", p.state.rows, want)
		}
	})
}
