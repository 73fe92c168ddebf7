// Package synth fits workload models to trace buckets and generates
// workloads from them.
//
// This first model is deliberately plain: a constant-rate Poisson arrival
// process and independent empirical marginals of input and output length.
// It records the statistics (inter-arrival CV, rank correlation) that say how
// far the trace is from those assumptions, so nobody mistakes it for more.
package synth

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// ModelVersion is the model.json format version.
const ModelVersion = 1

// Model is model.json: a compact description of a workload, never a copy of
// the trace.
type Model struct {
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	// Source names the bucket the model was fitted to.
	Source   SourceInfo   `json:"source"`
	Arrivals ArrivalModel `json:"arrivals"`
	Lengths  LengthModel  `json:"lengths"`
	// Mix holds the shares of request attributes seen in the trace.
	Mix Mix `json:"mix"`
}

// SourceInfo describes the trace a model was fitted to.
type SourceInfo struct {
	Dir              string    `json:"dir"`
	Rows             int64     `json:"rows"`
	Start            time.Time `json:"start"`
	End              time.Time `json:"end"`
	TimeResolutionUs int64     `json:"time_resolution_us"`
}

// ArrivalModel is a constant-rate Poisson process.
type ArrivalModel struct {
	Kind string `json:"kind"` // "poisson"
	// RatePerS is the maximum-likelihood rate, requests per second.
	RatePerS float64 `json:"rate_per_s"`
	// RateCI95 is the exact (chi-square) 95% interval for the rate.
	RateCI95  [2]float64 `json:"rate_ci95"`
	DurationS float64    `json:"duration_s"`
	// InterArrivalCV is the coefficient of variation of inter-arrival gaps;
	// a Poisson process has 1. Far above 1 means bursts this model omits.
	InterArrivalCV float64 `json:"inter_arrival_cv"`
	Note           string  `json:"note,omitempty"`
}

// LengthModel holds the token-length distributions.
type LengthModel struct {
	Input  Marginal `json:"input_tokens"`
	Output Marginal `json:"output_tokens"`
	// Spearman is the rank correlation of input and output length in the
	// trace; the generator samples them independently.
	Spearman float64 `json:"spearman_input_output"`
}

// Marginal is an empirical distribution as a quantile table: Knots[i] is the
// Hyndman–Fan type-1 quantile at p = i/(len(Knots)-1), so Knots[0] is the
// minimum and the last knot the maximum.
type Marginal struct {
	N     int64     `json:"n"`
	Mean  float64   `json:"mean"`
	Knots []float64 `json:"knots"`
}

// Mix records attribute shares to reproduce in generated workloads.
type Mix struct {
	API         map[string]float64 `json:"api"`
	StreamShare float64            `json:"stream_share"`
	Models      map[string]float64 `json:"models,omitempty"`
}

// Quantile returns the marginal's value at probability p by linear
// interpolation between knots.
func (m *Marginal) Quantile(p float64) float64 {
	k := len(m.Knots)
	if k == 0 {
		return 0
	}
	if k == 1 || p <= 0 {
		return m.Knots[0]
	}
	if p >= 1 {
		return m.Knots[k-1]
	}
	pos := p * float64(k-1)
	i := int(pos)
	frac := pos - float64(i)
	return m.Knots[i] + frac*(m.Knots[i+1]-m.Knots[i])
}

// WriteModel writes m as JSON to path (atomically).
func WriteModel(path string, m *Model) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode model: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write model: %w", err)
	}
	return nil
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
	switch {
	case m.Version != ModelVersion:
		return fmt.Errorf("model version %d, this servetrace reads version %d; refit with 'servetrace fit'", m.Version, ModelVersion)
	case m.Arrivals.Kind != "poisson":
		return fmt.Errorf("arrival model %q is not supported (want poisson)", m.Arrivals.Kind)
	case !(m.Arrivals.RatePerS > 0) || math.IsInf(m.Arrivals.RatePerS, 0):
		return fmt.Errorf("arrival rate %v must be positive and finite", m.Arrivals.RatePerS)
	case len(m.Lengths.Input.Knots) < 2 || len(m.Lengths.Output.Knots) < 2:
		return fmt.Errorf("length marginals need at least 2 knots")
	}
	return nil
}
