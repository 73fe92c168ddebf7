// Package sweep drives a load sweep: one replay per step against one or
// more configurations, waiting for the server to drain between steps, and
// judging each step's SLO attainment by its exact binomial interval, so
// that the highest rate meeting the SLO is found (or bracketed) with a
// stated confidence rather than read off a single noisy run.
package sweep

import (
	"io"
	"math"
	"slices"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay"
)

// Mode is what a step's level sets in the replay.
type Mode string

// Modes: an arrival rate (requests per second, replacing the workload's
// timing), a speed (scaling the workload's own timing) or a closed-loop
// concurrency.
const (
	ModeRate        Mode = "rate"
	ModeSpeed       Mode = "speed"
	ModeConcurrency Mode = "concurrency"
)

// Config is one side of a comparison: a name, the endpoint and the
// workload it is measured with.
type Config struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Workload string `json:"workload"`
}

// Search finds the highest level meeting the SLO: it grows from Start by
// Growth until a level fails (or shrinks by Growth while the first fails),
// then bisects geometrically between the highest passing and lowest
// failing level until their ratio is within 1 + Resolution (BoundFor says
// how many steps that takes).
type Search struct {
	Start      float64 `json:"start"`
	Growth     float64 `json:"growth"`
	Resolution float64 `json:"resolution"`
	// Max and Min bound the levels tried.
	Max float64 `json:"max"`
	Min float64 `json:"min"`
}

// Options configures a sweep.
type Options struct {
	// Replay holds every replay setting a step does not set itself
	// (Target, Rate, Speed, Concurrency, Duration, warmup, RunID, WaitIdle).
	Replay  replay.Options
	Configs []Config
	Mode    Mode
	// Levels are fixed steps; Search, when set, replaces them.
	Levels []float64
	Search *Search
	// SLO and Attainment: a step passes when the exact binomial interval
	// (at Confidence) of the share of its requests meeting the SLO lies at
	// or above Attainment, fails when it lies below.
	SLO        analyze.SLO
	Attainment float64
	Confidence float64
	// MinAccuracy is the accuracy floor: a step whose probe answers
	// (Replay.Probes) are right less often fails whatever its latency, so
	// a server that goes fast by answering wrong never passes (0: off).
	MinAccuracy float64
	TTFTMode    analyze.TTFTMode
	// StepDuration is each step's measured time, after StepWarmup; 0
	// sizes each step from the level and the workload (stepLength).
	StepDuration time.Duration
	StepWarmup   time.Duration
	// Repeats runs every fixed level this many times per configuration,
	// alternating the configurations' order (A B, then B A); a search
	// takes none.
	Repeats int
	// MaxExtensions reruns an undecided level (searched, or fixed after
	// its repeats) at most this many times, pooling its requests; still
	// undecided, it stays so, and never counts as meeting the SLO.
	MaxExtensions int
	// Budget stops the sweep before a step that would end past it (0: none).
	Budget time.Duration
	// IdleTimeout bounds the wait for the server to report nothing running
	// or waiting before each step (needs an engine metrics endpoint).
	IdleTimeout time.Duration
	// Recovery adds, right after the first failing step, a step at the
	// highest level that passed below it, started without waiting for the
	// server to drain: how long the overload takes to clear.
	Recovery bool
	// CostPerHour is the deployment's price per hour (any currency), for
	// the cost per million tokens at the highest level meeting the SLO.
	CostPerHour float64
	// Resume finishes the sweep recorded in the output directory.
	Resume bool
	// Progress receives a line as each step starts and ends.
	Progress io.Writer `json:"-"`
}

// DefaultOptions returns a sweep a newcomer can live with.
func DefaultOptions() Options {
	return Options{Replay: replay.DefaultOptions(), Mode: ModeRate, Attainment: 0.99, Confidence: 0.95, TTFTMode: analyze.TTFTFirstContent,
		Repeats: 1, MaxExtensions: 2, IdleTimeout: 5 * time.Minute, Recovery: true}
}

// DefaultSearch returns the search used when only its start is given.
func DefaultSearch(start float64) *Search {
	return &Search{Start: start, Growth: 2, Resolution: 0.05, Max: start * math.Pow(2, 12), Min: start / 64}
}

// Bound is the most steps a search of a single configuration runs,
// wherever the limit lies in [Min, Max], the recovery step included.
func (s *Search) Bound(maxExtensions int) int {
	return max(s.BoundFor(s.Max, maxExtensions), s.BoundFor(s.Min, maxExtensions))
}

// BoundFor is the most steps the search runs when the limit is near
// limit: the ⌊log_Growth(limit/Start)⌋ + 2 levels from Start to one past
// it by Growth, the ⌈log2(ln Growth / ln(1 + Resolution))⌉ bisections, each run at most 1 + maxExtensions times, plus the
// recovery step.
func (s *Search) BoundFor(limit float64, maxExtensions int) int {
	ratio := max(limit/s.Start, s.Start/limit)
	walk := int(math.Floor(math.Log(ratio)/math.Log(s.Growth)+1e-9)) + 2
	bisect := int(math.Ceil(math.Log2(math.Log(s.Growth) / math.Log(1+s.Resolution))))
	return (walk+max(0, bisect))*(1+maxExtensions) + 1
}

// validate checks the options and fills unset ones.
func (o *Options) validate() error {
	def := DefaultOptions()
	if len(o.Configs) == 0 {
		return opterr.New("Configs", nil, "give a target and a workload")
	}
	names := map[string]bool{}
	for _, c := range o.Configs {
		if c.Name == "" || names[c.Name] {
			return opterr.New("Configs", c.Name, "every configuration needs its own name")
		}
		names[c.Name] = true
	}
	switch o.Mode {
	case "":
		o.Mode = def.Mode
	case ModeRate, ModeSpeed, ModeConcurrency:
	default:
		return opterr.New("Mode", string(o.Mode), "use rate, speed or concurrency")
	}
	if o.Search != nil {
		s := o.Search
		if len(o.Configs) > 1 {
			return opterr.New("Search", nil, "searches one configuration at a time; compare configurations over fixed Levels, interleaved")
		}
		if !(s.Start > 0) || !(s.Growth > 1) || !(s.Resolution > 0) || s.Max < s.Start || s.Min > s.Start || !(s.Min > 0) {
			return opterr.New("Search", nil, "needs Start > 0, Growth > 1, Resolution > 0 and Min ≤ Start ≤ Max")
		}
		if 1+s.Resolution >= s.Growth {
			return opterr.New("Search", s.Resolution, "Resolution must be finer than Growth")
		}
		if o.Repeats > 1 {
			return opterr.New("Repeats", o.Repeats, "a search runs each level once, and an undecided one again up to MaxExtensions times: repeats are for fixed Levels")
		}
	} else {
		if len(o.Levels) == 0 {
			return opterr.New("Levels", nil, "give the steps' levels, or Search")
		}
		for _, l := range o.Levels {
			if !(l > 0) || math.IsInf(l, 0) {
				return opterr.New("Levels", l, "every level must be a finite positive number")
			}
		}
		if o.Mode == ModeConcurrency && slices.ContainsFunc(o.Levels, func(l float64) bool { return l != math.Trunc(l) }) {
			return opterr.New("Levels", nil, "concurrencies are whole numbers")
		}
	}
	if !(o.MinAccuracy >= 0 && o.MinAccuracy <= 1) {
		return opterr.New("MinAccuracy", o.MinAccuracy, "must be within [0, 1]")
	}
	if o.MinAccuracy > 0 && o.Replay.Probes == 0 {
		return opterr.New("MinAccuracy", o.MinAccuracy, "needs probes to grade (Replay.Probes above 0)")
	}
	if o.Attainment == 0 {
		o.Attainment = def.Attainment
	}
	if !(o.Attainment > 0 && o.Attainment < 1) {
		return opterr.New("Attainment", o.Attainment, "use a share in (0, 1), e.g. 0.99: a level is judged by its interval, which never shows an attainment of 1")
	}
	if o.Confidence == 0 {
		o.Confidence = def.Confidence
	}
	if !(o.Confidence > 0.5 && o.Confidence < 1) {
		return opterr.New("Confidence", o.Confidence, "use a level between 0.5 and 1, e.g. 0.95")
	}
	if o.TTFTMode == "" {
		o.TTFTMode = def.TTFTMode
	}
	if o.StepDuration < 0 {
		return opterr.New("StepDuration", o.StepDuration, "must be positive (0: sized from each level and the workload)")
	}
	if o.StepWarmup < 0 || o.Budget < 0 || o.IdleTimeout < 0 || o.MaxExtensions < 0 || o.CostPerHour < 0 {
		return opterr.New("StepWarmup", nil, "StepWarmup, Budget, IdleTimeout, MaxExtensions and CostPerHour must not be negative")
	}
	if o.Repeats == 0 {
		o.Repeats = def.Repeats
	}
	if o.Repeats < 0 {
		return opterr.New("Repeats", o.Repeats, "must be positive")
	}
	return nil
}

// engineMetrics says whether the replay scrapes an engine endpoint, which
// can tell when the server is idle.
func (o *Options) engineMetrics() bool {
	return slices.ContainsFunc(o.Replay.Metrics, func(m replay.MetricsEndpoint) bool { return m.Role == replay.RoleEngine })
}
