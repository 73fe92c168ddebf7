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
	"time"

	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace"
)

// ModelVersion is the model.json format version.
const ModelVersion = 2

// MaxModelBytes is the largest model.json WriteModel writes.
const MaxModelBytes = 512 << 10

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
	// Contract is nil when the trace's requests carried no images, audio,
	// tools, constrained decoding or sampling extras, and one adapter at
	// most.
	Contract *ContractModel `json:"contract,omitempty"`
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
// MaxModelBytes is an error: it would be a copy of the trace. So is a NaN
// or an infinity, which JSON cannot hold: the error names the field.
func WriteModel(path string, m *Model) error {
	if err := checkFinite(m); err != nil {
		return fmt.Errorf("encode model %s: %w", path, err)
	}
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("encode model: %w", err)
	}
	b = compactLeaves(b)
	if len(b) > MaxModelBytes {
		return fmt.Errorf("encode model: %d bytes, more than the %d a model may take", len(b), MaxModelBytes)
	}
	return trace.WriteFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// compactLeaves puts each innermost array or object of indented JSON (one
// that holds no other) on one line: quantile tables and atoms are most of
// a model, and one number per line made a one-class model with prefix laws
// pass MaxModelBytes. Strings are copied as they are.
func compactLeaves(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '"' {
			j := stringEnd(b, i)
			out = append(out, b[i:j]...)
			i = j - 1
			continue
		}
		end := -1
		if c == '[' || c == '{' {
			end = leafEnd(b, i)
		}
		if end < 0 {
			out = append(out, c)
			continue
		}
		for k := i; k <= end; k++ {
			switch x := b[k]; {
			case x == '"':
				j := stringEnd(b, k)
				out = append(out, b[k:j]...)
				k = j - 1
			case x == ' ' || x == '\n' || x == '\t':
			case x == ':':
				out = append(out, ':')
			default:
				out = append(out, x)
			}
		}
		i = end
	}
	return out
}

// stringEnd returns the index just past the JSON string starting at b[i].
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// leafEnd returns the index of the bracket closing the array or object at
// b[i] when it holds no other array or object, else −1.
func leafEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			j = stringEnd(b, j) - 1
		case '[', '{':
			return -1
		case ']', '}':
			return j
		}
	}
	return -1
}

// ReadModel reads and validates a model.json.
func ReadModel(path string) (*Model, error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxModelReadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	return decodeModel(b, path)
}

// decodeModel parses and validates model.json bytes; name labels errors.
func decodeModel(b []byte, name string) (*Model, error) {
	if len(b) > maxModelReadBytes {
		return nil, fmt.Errorf("read model %s: more than %d bytes, and a model.json is at most %d; write one with 'servetrace fit'", name, maxModelReadBytes, MaxModelBytes)
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read model %s: not a model.json (%v); write one with 'servetrace fit'", name, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("read model %s: %w", name, err)
	}
	return &m, nil
}
