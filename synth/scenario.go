package synth

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/servetrace/servetrace/trace"
)

// Scenario names.
const (
	ScenarioFlashCrowd       = "flash-crowd"
	ScenarioRamp             = "ramp"
	ScenarioLongContextStorm = "long-context-storm"
	ScenarioHotPrefixShift   = "hot-prefix-shift"
	ScenarioColdCache        = "cold-cache"
	ScenarioCancelStorm      = "cancel-storm"
	ScenarioSlowConsumer     = "slow-consumer"
	ScenarioMixedSampling    = "mixed-sampling"
	ScenarioVersionSwitch    = "version-switch"
	ScenarioTenantSkew       = "tenant-skew"
	ScenarioAdapterChurn     = "adapter-churn"
	ScenarioImageStorm       = "image-storm"
	ScenarioSchemaStorm      = "schema-storm"
)

// ScenarioNames lists every scenario.
var ScenarioNames = []string{ScenarioFlashCrowd, ScenarioRamp, ScenarioLongContextStorm, ScenarioHotPrefixShift, ScenarioColdCache,
	ScenarioCancelStorm, ScenarioSlowConsumer, ScenarioMixedSampling, ScenarioVersionSwitch, ScenarioTenantSkew,
	ScenarioAdapterChurn, ScenarioImageStorm, ScenarioSchemaStorm}

// Duration is a time.Duration written as "90s" or "10m" in YAML and JSON.
type Duration time.Duration

// UnmarshalJSON reads a Go duration string (or a number of seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err2 := json.Unmarshal(b, &secs); err2 != nil {
			return fmt.Errorf("duration %s: want a string such as \"90s\" or a number of seconds", b)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Seconds returns d in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

// Scenario is one edge case layered on a generated workload. Fields that a
// scenario does not use are ignored; each row a scenario touches gets its
// name in the phase column (ramp: "step-N").
type Scenario struct {
	Name string `json:"name"`
	// At and For bound the scenario's window from the workload's start
	// (For 0: to the end).
	At  Duration `json:"at,omitempty"`
	For Duration `json:"for,omitempty"`
	// Factor: flash-crowd rate multiplier (default 5); long-context-storm
	// input multiplier (default 1).
	Factor float64 `json:"factor,omitempty"`
	// Quantile: long-context-storm draws inputs from above this quantile of
	// the fitted input distribution (default 0.9).
	Quantile float64 `json:"quantile,omitempty"`
	// MaxInputTokens caps inflated inputs (default: the fitted maximum).
	MaxInputTokens int64 `json:"max_input_tokens,omitempty"`
	// Ramp: Rates (requests/s) or Factors (of the model's mean rate,
	// default 0.5, 1, 2, 4, 8) held for Step each (default 60s), with Gap
	// (default 20s) of silence between steps for recovery. Bursty keeps the
	// fitted burstiness; by default steps are Poisson.
	Rates   []float64 `json:"rates,omitempty"`
	Factors []float64 `json:"factors,omitempty"`
	Step    Duration  `json:"step,omitempty"`
	Gap     Duration  `json:"gap,omitempty"`
	Bursty  bool      `json:"bursty,omitempty"`
	// Share of the window's requests affected (cancel-storm default 0.5,
	// slow-consumer 0.2, tenant-skew 0.8).
	Share float64 `json:"share,omitempty"`
	// AfterTokens and AfterMs: cancel-storm cancels after that many tokens
	// or milliseconds (default 16 tokens).
	AfterTokens int64   `json:"after_tokens,omitempty"`
	AfterMs     float64 `json:"after_ms,omitempty"`
	// ReadDelayMs: slow-consumer delay between reads (default 200).
	ReadDelayMs float64 `json:"read_delay_ms,omitempty"`
	// From and To: version-switch model names (From empty: every model).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Tenant: tenant-skew's hot tenant (default "tenant-hot").
	Tenant string `json:"tenant,omitempty"`
	// Sampling: mixed-sampling shares of greedy, sampling, json_schema and
	// logprobs requests (default equal).
	Sampling map[string]float64 `json:"sampling,omitempty"`
	// Adapters: adapter-churn's distinct adapters (default 16), drawn by a
	// Zipf law of Exponent (default 1) whose ranking rotates by a quarter
	// of the adapters every Rotate (default 60s), so the hot set moves.
	Adapters int      `json:"adapters,omitempty"`
	Exponent float64  `json:"exponent,omitempty"`
	Rotate   Duration `json:"rotate,omitempty"`
	// Images, Width and Height: image-storm's images per request (default
	// 4) and their size (default 1536×1536), each image new.
	Images int   `json:"images,omitempty"`
	Width  int32 `json:"width,omitempty"`
	Height int32 `json:"height,omitempty"`
	// Schemas and SchemaTokens: schema-storm's distinct schemas (default
	// 0: every request a new one) of that size (default 400 tokens).
	Schemas      int   `json:"schemas,omitempty"`
	SchemaTokens int64 `json:"schema_tokens,omitempty"`
}

// ScenarioFile is the YAML file of scenarios: `scenarios: [...]`.
type ScenarioFile struct {
	Scenarios []Scenario `json:"scenarios"`
}

// ReadScenarioFile reads a YAML (or JSON) scenario file strictly: unknown
// fields are errors naming the field.
func ReadScenarioFile(path string) ([]Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenarios: %w", err)
	}
	var f ScenarioFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("read scenarios %s: %w", path, err)
	}
	if len(f.Scenarios) == 0 {
		return nil, fmt.Errorf("read scenarios %s: no scenarios (want a list under 'scenarios:')", path)
	}
	for i := range f.Scenarios {
		if err := f.Scenarios[i].Check(); err != nil {
			return nil, fmt.Errorf("read scenarios %s: scenario %d: %w", path, i+1, err)
		}
	}
	return f.Scenarios, nil
}

// ParseScenario reads a scenario given on the command line as
// "name" or "name:key=value,key=value" (keys as in the YAML file; lists
// separated by "/", e.g. "ramp:rates=5/10/20,step=30s").
func ParseScenario(s string) (Scenario, error) {
	name, params, _ := strings.Cut(s, ":")
	obj := map[string]any{"name": strings.TrimSpace(name)}
	if params != "" {
		for _, kv := range strings.Split(params, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return Scenario{}, fmt.Errorf("scenario %q: %q is not key=value", s, kv)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch {
			case strings.Contains(v, "/"):
				var list []any
				for _, x := range strings.Split(v, "/") {
					list = append(list, scalar(x))
				}
				obj[k] = list
			case k == "sampling":
				return Scenario{}, fmt.Errorf("scenario %q: give sampling shares in a scenario file", s)
			default:
				obj[k] = scalar(v)
			}
		}
	}
	b, _ := json.Marshal(obj)
	var sc Scenario
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return Scenario{}, fmt.Errorf("scenario %q: %w", s, err)
	}
	if err := sc.Check(); err != nil {
		return Scenario{}, fmt.Errorf("scenario %q: %w", s, err)
	}
	return sc, nil
}

func scalar(v string) any {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return v
}

// Check validates the scenario and fills its defaults.
func (s *Scenario) Check() error {
	if !slices.Contains(ScenarioNames, s.Name) {
		return fmt.Errorf("unknown scenario %q; known: %s", s.Name, strings.Join(ScenarioNames, ", "))
	}
	if s.At < 0 || s.For < 0 {
		return fmt.Errorf("%s: at and for must not be negative", s.Name)
	}
	if !(s.Share >= 0 && s.Share <= 1) {
		return fmt.Errorf("%s: share %v must be within [0, 1]", s.Name, s.Share)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"factor", s.Factor}, {"quantile", s.Quantile}, {"after_ms", s.AfterMs}, {"read_delay_ms", s.ReadDelayMs}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s: %s %v must be a finite number", s.Name, f.name, f.v)
		}
	}
	if s.AfterTokens < 0 || s.AfterTokens > MaxModelTokens || s.MaxInputTokens < 0 || s.MaxInputTokens > MaxModelTokens {
		return fmt.Errorf("%s: after_tokens and max_input_tokens must be within [0, %d]", s.Name, MaxModelTokens)
	}
	if s.AfterMs < 0 || s.AfterMs > trace.MaxClientMs || s.ReadDelayMs < 0 || s.ReadDelayMs > trace.MaxClientMs {
		return fmt.Errorf("%s: after_ms and read_delay_ms must be within [0, %d] (a week)", s.Name, trace.MaxClientMs)
	}
	if err := (&trace.Request{Identity: trace.Identity{RequestID: "probe", Tenant: s.Tenant, Model: s.To}}).Validate(); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	def := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	switch s.Name {
	case ScenarioFlashCrowd:
		def(&s.Factor, 5)
		if s.Factor <= 0 || s.Factor > MaxRatePerS {
			return fmt.Errorf("%s: factor %v must be positive and at most %g", s.Name, s.Factor, float64(MaxRatePerS))
		}
	case ScenarioLongContextStorm:
		def(&s.Factor, 1)
		def(&s.Quantile, 0.9)
		if s.Quantile <= 0 || s.Quantile >= 1 || s.Factor <= 0 || s.Factor > MaxModelTokens {
			return fmt.Errorf("%s: quantile must be within (0, 1) and factor positive (at most %d)", s.Name, MaxModelTokens)
		}
	case ScenarioRamp:
		if len(s.Rates) == 0 && len(s.Factors) == 0 {
			s.Factors = []float64{0.5, 1, 2, 4, 8}
		}
		for _, r := range append(slices.Clone(s.Rates), s.Factors...) {
			if !(r > 0 && r <= MaxRatePerS) {
				return fmt.Errorf("%s: rate or factor %v: every rate and factor must be positive and at most %g (MaxRatePerS)", s.Name, r, float64(MaxRatePerS))
			}
		}
		if s.Step == 0 {
			s.Step = Duration(time.Minute)
		}
		if s.Gap == 0 {
			s.Gap = Duration(20 * time.Second)
		}
		if s.Step < 0 || s.Gap < 0 {
			return fmt.Errorf("%s: step %v and gap %v must not be negative", s.Name, time.Duration(s.Step), time.Duration(s.Gap))
		}
	case ScenarioCancelStorm:
		def(&s.Share, 0.5)
		if s.AfterTokens == 0 && s.AfterMs == 0 {
			s.AfterTokens = 16
		}
	case ScenarioSlowConsumer:
		def(&s.Share, 0.2)
		def(&s.ReadDelayMs, 200)
	case ScenarioTenantSkew:
		def(&s.Share, 0.8)
		if s.Tenant == "" {
			s.Tenant = "tenant-hot"
		}
	case ScenarioVersionSwitch:
		if s.To == "" {
			return fmt.Errorf("%s: needs to=MODEL (the model requests switch to)", s.Name)
		}
		if s.At == 0 {
			return fmt.Errorf("%s: needs at=DURATION (when the switch happens)", s.Name)
		}
	case ScenarioHotPrefixShift:
		if s.At == 0 {
			return fmt.Errorf("%s: needs at=DURATION (when the hot prefixes rotate)", s.Name)
		}
	case ScenarioAdapterChurn:
		def(&s.Share, 1)
		def(&s.Exponent, 1)
		if s.Adapters == 0 {
			s.Adapters = 16
		}
		if s.Rotate == 0 {
			s.Rotate = Duration(time.Minute)
		}
		if s.Adapters < 1 || s.Adapters > MaxZipfN || !(s.Exponent >= 0 && s.Exponent <= 20) || s.Rotate < 0 {
			return fmt.Errorf("%s: adapters must be 1 to %d, exponent 0 to 20 and rotate not negative", s.Name, MaxZipfN)
		}
	case ScenarioImageStorm:
		def(&s.Share, 0.5)
		if s.Images == 0 {
			s.Images = 4
		}
		if s.Width == 0 {
			s.Width = 1536
		}
		if s.Height == 0 {
			s.Height = 1536
		}
		if s.Images < 1 || s.Images > trace.MaxMediaParts || s.Width < 1 || s.Width > trace.MaxImageSidePx || s.Height < 1 || s.Height > trace.MaxImageSidePx {
			return fmt.Errorf("%s: images must be 1 to %d and width and height 1 to %d pixels", s.Name, trace.MaxMediaParts, trace.MaxImageSidePx)
		}
	case ScenarioSchemaStorm:
		def(&s.Share, 0.5)
		if s.SchemaTokens == 0 {
			s.SchemaTokens = 400
		}
		if s.Schemas < 0 || s.Schemas > MaxZipfN || s.SchemaTokens < 1 || s.SchemaTokens > MaxModelTokens {
			return fmt.Errorf("%s: schemas must be 0 to %d and schema_tokens 1 to %d", s.Name, MaxZipfN, MaxModelTokens)
		}
	case ScenarioMixedSampling:
		if len(s.Sampling) == 0 {
			s.Sampling = map[string]float64{"greedy": 1, "sampling": 1, "json_schema": 1, "logprobs": 1}
		}
		for k, v := range s.Sampling {
			if !slices.Contains([]string{"greedy", "sampling", "json_schema", "logprobs"}, k) || !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("%s: sampling %q=%v: keys are greedy, sampling, json_schema, logprobs with shares ≥ 0", s.Name, k, v)
			}
		}
	}
	return nil
}

// active reports whether t (seconds from the workload's start) is inside
// the scenario's window.
func (s *Scenario) active(t float64) bool {
	at := s.At.Seconds()
	if t < at {
		return false
	}
	return s.For == 0 || t < at+s.For.Seconds()
}

// rampLength returns the ramp's total length in seconds.
func (s *Scenario) rampLength() float64 {
	n := max(len(s.Rates), len(s.Factors))
	return float64(n)*s.Step.Seconds() + float64(max(n-1, 0))*s.Gap.Seconds()
}

// rampRate returns the ramp's rate at t (seconds since the ramp began) and
// its step number (1-based), or 0 in a gap or after the ramp.
func (s *Scenario) rampRate(t, meanRate float64) (float64, int) {
	period := s.Step.Seconds() + s.Gap.Seconds()
	if t < 0 {
		return 0, 0
	}
	k := int(t / period)
	n := max(len(s.Rates), len(s.Factors))
	if k >= n || t-float64(k)*period >= s.Step.Seconds() {
		return 0, 0
	}
	if len(s.Rates) > 0 {
		return s.Rates[k], k + 1
	}
	return s.Factors[k] * meanRate, k + 1
}
