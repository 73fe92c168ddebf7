// Package synth fits workload models to trace buckets, generates workloads
// and edge-case scenarios from them, and validates a generated workload
// against a real trace.
//
// A model (model.json) has five parts, each documented in docs/model.md:
// arrivals (a deterministic intensity, a renewal process in the time it
// rescales, and a latent rate that wanders), lengths (a Gaussian copula over
// empirical marginals per class, or output quantiles per input bin), prefix
// heat (reuse share, depth and age, which a generator copying from its own
// recent past turns back into an LRU hit-rate curve), sessions and the
// attribute mix. It is a model, not a copy of the trace: at most a few
// hundred kilobytes whatever the trace's size.
package synth

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// ModelVersion is the model.json format version.
const ModelVersion = 2

// MaxModelBytes is the largest model.json WriteModel writes.
const MaxModelBytes = 256 << 10

// Model is model.json.
type Model struct {
	Version int `json:"version"`
	// CreatedAt is when the fit ran; it never reaches a generated workload.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Source names the trace the model was fitted to.
	Source   SourceInfo   `json:"source"`
	Arrivals ArrivalModel `json:"arrivals"`
	// Lengths holds one joint length model per class (model, api), the
	// largest first.
	Lengths []LengthClass `json:"lengths"`
	// Prefix is nil when the trace carried no prefix blocks.
	Prefix *PrefixModel `json:"prefix,omitempty"`
	// Sessions is nil when the trace had no multi-turn sessions.
	Sessions *SessionModel `json:"sessions,omitempty"`
	Mix      Mix           `json:"mix"`
}

// SourceInfo describes the trace a model was fitted to.
type SourceInfo struct {
	Dir string `json:"dir"`
	// Rows is the number of requests fitted; FirstTurns those that start a
	// session (all of them without sessions).
	Rows       int64 `json:"rows"`
	FirstTurns int64 `json:"first_turns"`
	// Start and End bound the fitted span (a part of the trace when the fit
	// was given a span).
	Start            time.Time  `json:"start"`
	End              time.Time  `json:"end"`
	SpanFraction     [2]float64 `json:"span_fraction"`
	TimeResolutionUs int64      `json:"time_resolution_us"`
	BlockSize        int        `json:"block_size"`
}

// SpanS returns the fitted span in seconds.
func (s SourceInfo) SpanS() float64 { return s.End.Sub(s.Start).Seconds() }

// MeanRatePerS returns the model's mean arrival rate (first turns per second).
func (m *Model) MeanRatePerS() float64 { return m.Arrivals.Intensity.MeanRatePerS }

// MainLengths returns the largest length class.
func (m *Model) MainLengths() *LengthClass {
	if len(m.Lengths) == 0 {
		return &LengthClass{}
	}
	return &m.Lengths[0]
}

// WriteModel writes m as JSON to path (atomically). A model larger than
// MaxModelBytes is an error: it would be a copy of the trace.
func WriteModel(path string, m *Model) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("encode model: %w", err)
	}
	if len(b) > MaxModelBytes {
		return fmt.Errorf("encode model: %d bytes, more than the %d a model may take", len(b), MaxModelBytes)
	}
	return trace.WriteFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// ReadModel reads and validates a model.json.
func ReadModel(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read model %s: not a model.json (%v); write one with 'servetrace fit'", path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("read model %s: %w", path, err)
	}
	return &m, nil
}

// Validate checks that m can generate a workload.
func (m *Model) Validate() error {
	in := &m.Arrivals.Intensity
	switch {
	case m.Version != ModelVersion:
		return fmt.Errorf("model version %d, this servetrace reads version %d; refit with 'servetrace fit'", m.Version, ModelVersion)
	case in.Kind != "fourier" && in.Kind != "piecewise":
		return fmt.Errorf("arrival intensity %q is not supported (want fourier or piecewise)", in.Kind)
	case !(in.MeanRatePerS > 0) || math.IsInf(in.MeanRatePerS, 0):
		return fmt.Errorf("mean arrival rate %v must be positive and finite", in.MeanRatePerS)
	case in.Kind == "fourier" && len(in.Coef) != 1+2*in.DailyHarmonics+2*in.WeeklyHarmonics:
		return fmt.Errorf("fourier intensity has %d coefficients for %d daily and %d weekly harmonics", len(in.Coef), in.DailyHarmonics, in.WeeklyHarmonics)
	case m.Arrivals.Renewal.Dist != "exponential" && !(m.Arrivals.Renewal.Shape > 0):
		return fmt.Errorf("renewal %s shape %v must be positive", m.Arrivals.Renewal.Dist, m.Arrivals.Renewal.Shape)

	case len(m.Arrivals.Latent.Sigma) != len(m.Arrivals.Latent.TauS):
		return fmt.Errorf("latent layer has %d sigmas and %d correlation times", len(m.Arrivals.Latent.Sigma), len(m.Arrivals.Latent.TauS))
	case len(m.Lengths) == 0:
		return fmt.Errorf("no length classes")
	}
	for i, c := range m.Lengths {
		if len(c.Input.Knots) < 2 || len(c.Output.Knots) < 2 {
			return fmt.Errorf("length class %d: marginals need at least 2 knots", i)
		}
	}
	for _, tau := range m.Arrivals.Latent.TauS {
		if !(tau > 0) {
			return fmt.Errorf("latent correlation time %v must be positive", tau)
		}
	}
	if c := m.Arrivals.Renewal.Chain; c != nil {
		if err := c.validate(); err != nil {
			return err
		}
	}
	if p := m.Prefix; p != nil && (p.BlockSize <= 0 || len(p.AgeS.Knots) < 2 || len(p.Depth.Knots) < 2) && p.ReuseShare > 0 {
		return fmt.Errorf("prefix model needs a block size and age and depth tables")
	}
	if p := m.Prefix; p != nil {
		for i, b := range p.ByInputBin {
			if !(b.InputHigh > 0) || len(b.Depth.Knots) < 2 || len(b.AgeS.Knots) < 2 || b.Depth.Knots[0] <= 0 || b.Depth.Knots[len(b.Depth.Knots)-1] > 1 {
				return fmt.Errorf("prefix laws_by_input_bin[%d]: want a positive input_high, a depth table within (0, 1] and an age table", i)
			}
		}
	}
	return nil
}
