package synth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
