package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/trace"
)

// GenerateOptions controls Generate.
type GenerateOptions struct {
	// Duration of the workload; arrivals after it are not generated.
	Duration time.Duration
	// Seed makes the workload reproducible.
	Seed uint64
	// Start anchors the first arrival time (default 2024-01-01T00:00:00Z).
	Start time.Time
	// API, Stream and Model override the model's mix when set.
	API    string
	Stream *bool
	Model  string
	// MaxInputTokens caps sampled input lengths (0 = no cap).
	MaxInputTokens int64
}

// Generate draws a workload from m: Poisson arrivals at m's rate over
// opts.Duration, each with input and output lengths drawn from the
// marginals. It calls emit for every request in arrival order.
func Generate(ctx context.Context, m *Model, opts GenerateOptions, emit func(trace.Request) error) (int64, error) {
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if opts.Duration <= 0 {
		return 0, fmt.Errorf("duration must be positive, got %v", opts.Duration)
	}
	if opts.Start.IsZero() {
		opts.Start = trace.DefaultStart
	}
	// Separate streams for arrivals, lengths and attributes, so changing one
	// model part does not reshuffle the others.
	gaps := distuv.Exponential{Rate: m.Arrivals.RatePerS, Src: rand.NewPCG(opts.Seed, 1)}
	lengths := rand.New(rand.NewPCG(opts.Seed, 2))
	attrs := rand.New(rand.NewPCG(opts.Seed, 3))
	apiKeys, apiCum := cumulative(m.Mix.API)
	modelKeys, modelCum := cumulative(m.Mix.Models)

	start := opts.Start.UnixMicro()
	limit := opts.Duration.Seconds()
	var n int64
	for t := gaps.Rand(); t < limit; t += gaps.Rand() {
		if n&1023 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		in := sampleLength(&m.Lengths.Input, lengths)
		out := sampleLength(&m.Lengths.Output, lengths)
		if opts.MaxInputTokens > 0 {
			in = min(in, opts.MaxInputTokens)
		}
		r := trace.Request{
			Identity: trace.Identity{RequestID: fmt.Sprintf("gen-%d-%d", opts.Seed, n)},
			TS:       start + int64(math.Round(t*1e6)),
			Shape:    trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, N: 1},
		}
		r.API = pick(apiKeys, apiCum, attrs.Float64(), trace.APIChat)
		r.Stream = attrs.Float64() < m.Mix.StreamShare
		r.Model = pick(modelKeys, modelCum, attrs.Float64(), "")
		if opts.API != "" {
			r.API = opts.API
		}
		if opts.Stream != nil {
			r.Stream = *opts.Stream
		}
		if opts.Model != "" {
			r.Model = opts.Model
		}
		if err := emit(r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// sampleLength draws a length by inverse transform of the quantile table;
// every request asks for at least one token.
func sampleLength(m *Marginal, rng *rand.Rand) int64 {
	return max(1, int64(math.Round(m.Quantile(rng.Float64()))))
}

// cumulative returns the keys of shares in a stable order with their
// cumulative probabilities.
func cumulative(shares map[string]float64) ([]string, []float64) {
	keys := make([]string, 0, len(shares))
	for k := range shares {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cum := make([]float64, len(keys))
	total := 0.0
	for i, k := range keys {
		total += shares[k]
		cum[i] = total
	}
	for i := range cum {
		cum[i] /= total
	}
	return keys, cum
}

func pick(keys []string, cum []float64, u float64, def string) string {
	for i, c := range cum {
		if u < c {
			return keys[i]
		}
	}
	if len(keys) > 0 {
		return keys[len(keys)-1]
	}
	return def
}

// GenerateToBucket generates a workload from the model at modelPath into a
// new bucket at outDir. On error nothing that could pass for a bucket is left.
func GenerateToBucket(ctx context.Context, modelPath, outDir string, opts GenerateOptions, force bool) (*trace.Manifest, error) {
	m, err := ReadModel(modelPath)
	if err != nil {
		return nil, err
	}
	w, err := trace.NewBucketWriter(outDir, trace.WriterOptions{Force: force})
	if err != nil {
		return nil, err
	}
	n, err := Generate(ctx, m, opts, w.Write)
	if err != nil {
		w.Abort()
		return nil, err
	}
	if n == 0 {
		w.Abort()
		return nil, fmt.Errorf("no requests generated: at %.3g req/s, %v holds no arrival; give a longer --duration", m.Arrivals.RatePerS, opts.Duration)
	}
	start := opts.Start
	if start.IsZero() {
		start = trace.DefaultStart
	}
	man := &trace.Manifest{Kind: "workload", TimesRelative: true, Anchor: start, PrefixIDs: trace.PrefixIDsNone,
		Generator: map[string]any{"model": modelPath, "seed": opts.Seed, "duration_s": opts.Duration.Seconds(), "arrivals": m.Arrivals.Kind, "rate_per_s": m.Arrivals.RatePerS}}
	if err := w.Close(man); err != nil {
		return nil, err
	}
	return man, nil
}
