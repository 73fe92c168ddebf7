package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace"
)

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

// Scenario is one edge case layered on a generated workload: a registered
// kind (Name), its window (At, For) and the kind's own parameters. Each
// row a scenario touches gets its name in the phase column (ramp:
// "step-N"). In YAML and JSON it is one flat object, the window and the
// kind's keys side by side, as it always was.
type Scenario struct {
	Name string
	// At and For bound the scenario's window from the workload's start
	// (For 0: to the end).
	At  Duration
	For Duration
	// Params holds the parameters of the kind registered under Name (a
	// *FlashCrowd for flash-crowd, …); nil takes the kind's defaults, which
	// Check fills in.
	Params ScenarioParams
}

// ScenarioParams is one scenario kind: its parameters (a struct whose json
// tags are its keys) and the hooks the generator calls. The generator
// loops over the scenarios calling the hooks in order, so a kind changes
// generation only through them; the methods are unexported because the
// kinds are this package's own, one scenario_*.go file each.
type ScenarioParams interface {
	// check validates the parameters and fills their defaults; s is the
	// scenario holding them (its name and window).
	check(s *Scenario) error
	// length returns the workload length, in seconds, the scenario implies
	// when none is given (ok false: none; the first that gives one wins).
	length(s *Scenario) (seconds float64, ok bool)
	// bound adds the scenario's peak rate and expected arrivals to b, so
	// a workload past the ceilings is refused before its first row.
	bound(s *Scenario, b *rateBound)
	// arrivals shapes the arrival intensity before generation starts.
	arrivals(s *Scenario, g *generator, a *arrivalPlan)
	// prefix sets up the prefix generator (called only with one).
	prefix(s *Scenario, p *prefixGen)
	// input reshapes the input-length draw of a first turn at t.
	input(s *Scenario, t float64, d *inputDraw)
	// phase returns the label of a row at t, "" when the scenario leaves it
	// alone; apply is called only for a row so labelled.
	phase(s *Scenario, t float64) string
	// apply changes a row at t; draws come from g.scenRng, in scenario
	// order, so the same seed gives the same rows.
	apply(s *Scenario, g *generator, r *trace.Request, t float64)
	// tool returns the tool delay (tool_ms) ms of a row at t reshaped,
	// called for every row that carries one after the scenarios' apply,
	// an agent graph's rows included (at their head's t).
	tool(s *Scenario, t, ms float64) float64
}

// baseHooks gives a kind the hooks it does not need: no effect, and its
// name on the rows in its window. Kinds embed it and override the rest.
type baseHooks struct{}

func (baseHooks) check(*Scenario) error                                { return nil }
func (baseHooks) length(*Scenario) (float64, bool)                     { return 0, false }
func (baseHooks) bound(*Scenario, *rateBound)                          {}
func (baseHooks) arrivals(*Scenario, *generator, *arrivalPlan)         {}
func (baseHooks) prefix(*Scenario, *prefixGen)                         {}
func (baseHooks) input(*Scenario, float64, *inputDraw)                 {}
func (baseHooks) apply(*Scenario, *generator, *trace.Request, float64) {}
func (baseHooks) tool(_ *Scenario, _, ms float64) float64              { return ms }
func (baseHooks) phase(s *Scenario, t float64) string {
	if s.active(t) {
		return s.Name
	}
	return ""
}

// scenarioKinds maps each scenario name to a constructor of its zero
// parameters. Each scenario_*.go file registers its kind from init, as
// analyze/peer's format files do, so adding a scenario touches one file.
var scenarioKinds = map[string]func() ScenarioParams{}

// registerScenario adds a kind; a name registered twice is a programming
// error and panics at start-up.
func registerScenario(name string, zero func() ScenarioParams) {
	if _, dup := scenarioKinds[name]; dup {
		panic("synth: scenario " + name + " registered twice")
	}
	scenarioKinds[name] = zero
}

// ScenarioNames lists every registered scenario, sorted (the registry is a
// map, so sorting gives one stable order for messages and docs checks).
func ScenarioNames() []string { return slices.Sorted(maps.Keys(scenarioKinds)) }

func unknownScenario(name string) error {
	return fmt.Errorf("unknown scenario %q; known: %s", name, strings.Join(ScenarioNames(), ", "))
}

// windowKeys are the keys every scenario takes.
var windowKeys = []string{"name", "at", "for"}

// scenarioWindow is the part of a scenario's object every kind shares.
type scenarioWindow struct {
	Name string   `json:"name"`
	At   Duration `json:"at,omitempty"`
	For  Duration `json:"for,omitempty"`
}

// paramKeys returns the JSON keys of a kind's parameters, in field order.
func paramKeys(p ScenarioParams) []string {
	t := reflect.TypeOf(p).Elem()
	var keys []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			keys = append(keys, name)
		}
	}
	return keys
}

// hasKey reports whether keys holds k, ignoring case as encoding/json does.
func hasKey(keys []string, k string) bool {
	return slices.ContainsFunc(keys, func(x string) bool { return strings.EqualFold(x, k) })
}

// keyError says that scenario name has no key k and which scenarios do,
// since a key moved to the wrong scenario is the likely slip.
func keyError(name, k string, keys []string) error {
	takes := strings.Join(append(slices.Clone(windowKeys[1:]), keys...), ", ")
	var owners []string
	for _, other := range ScenarioNames() {
		if other != name && hasKey(paramKeys(scenarioKinds[other]()), k) {
			owners = append(owners, other)
		}
	}
	if len(owners) == 0 {
		return fmt.Errorf("%s: unknown field %q (%s takes %s)", name, k, name, takes)
	}
	return fmt.Errorf("%s: unknown field %q: a key of %s, not of %s (%s takes %s)", name, k, strings.Join(owners, ", "), name, name, takes)
}

// UnmarshalJSON reads the flat object strictly: the name picks the
// registered kind, and every key other than name, at and for must be one
// of that kind's (an error names the key and the scenarios that take it).
func (s *Scenario) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	var w scenarioWindow
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	zero, ok := scenarioKinds[w.Name]
	if !ok {
		return unknownScenario(w.Name)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	p := zero()
	keys := paramKeys(p)
	rest := map[string]json.RawMessage{}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		switch {
		case hasKey(windowKeys, k):
		case hasKey(keys, k):
			rest[k] = fields[k]
		default:
			return keyError(w.Name, k, keys)
		}
	}
	if len(rest) > 0 {
		rb, err := json.Marshal(rest)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
		dec := json.NewDecoder(bytes.NewReader(rb))
		dec.DisallowUnknownFields()
		if err := dec.Decode(p); err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
	}
	*s = Scenario{Name: w.Name, At: w.At, For: w.For, Params: p}
	return nil
}

// MarshalJSON writes the flat object: name, at and for, then the kind's
// keys in field order (the manifest's generator section records it).
func (s Scenario) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(scenarioWindow{Name: s.Name, At: s.At, For: s.For})
	if err != nil || s.Params == nil {
		return head, err
	}
	params, err := json.Marshal(s.Params)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	if string(params) == "{}" {
		return head, nil
	}
	return append(append(head[:len(head)-1], ','), params[1:]...), nil
}

// ScenarioFile is the YAML file of scenarios: `scenarios: [...]`.
type ScenarioFile struct {
	Scenarios []Scenario `json:"scenarios"`
}

// maxScenarioFileBytes bounds a scenario file: a list of scenarios and
// their keys is a few KiB, and a device or a huge file must not be read
// whole.
const maxScenarioFileBytes = 1 << 20

// ReadScenarioFile reads a YAML (or JSON) scenario file strictly: unknown
// fields are errors naming the field. Each scenario is decoded on its own
// so an error says which one. The file must be a regular file of at most
// maxScenarioFileBytes.
func ReadScenarioFile(path string) ([]Scenario, error) {
	b, err := regfile.ReadFile(path, maxScenarioFileBytes)
	if err != nil {
		return nil, fmt.Errorf("read scenarios: %w", err)
	}
	var f struct {
		Scenarios []json.RawMessage `json:"scenarios"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("read scenarios %s: %w", path, err)
	}
	if len(f.Scenarios) == 0 {
		return nil, fmt.Errorf("read scenarios %s: no scenarios (want a list under 'scenarios:')", path)
	}
	out := make([]Scenario, len(f.Scenarios))
	for i, raw := range f.Scenarios {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("read scenarios %s: scenario %d: %w", path, i+1, err)
		}
		if err := out[i].Check(); err != nil {
			return nil, fmt.Errorf("read scenarios %s: scenario %d: %w", path, i+1, err)
		}
	}
	return out, nil
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
	if err := json.Unmarshal(b, &sc); err != nil {
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

// Check validates the scenario and fills its defaults: the window here,
// the parameters in their kind's check. Params of another kind than Name's
// are refused, since the name labels the rows the parameters shape.
func (s *Scenario) Check() error {
	zero, ok := scenarioKinds[s.Name]
	if !ok {
		return unknownScenario(s.Name)
	}
	if s.At < 0 || s.For < 0 {
		return fmt.Errorf("%s: at and for must not be negative", s.Name)
	}
	if s.Params == nil {
		s.Params = zero()
	} else if want := reflect.TypeOf(zero()); reflect.TypeOf(s.Params) != want {
		return fmt.Errorf("%s: parameters are a %T, want a %v", s.Name, s.Params, want)
	}
	return s.Params.check(s)
}

// hooks returns the scenario's parameters, or its kind's zero ones before
// Check has filled them (EffectiveDuration may be asked first).
func (s *Scenario) hooks() ScenarioParams {
	if s.Params != nil {
		return s.Params
	}
	if zero, ok := scenarioKinds[s.Name]; ok {
		return zero()
	}
	return baseHooks{}
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

// started reports whether t is at or after the scenario's start: the
// window of a switch that, once made, stays (For is ignored).
func (s *Scenario) started(t float64) bool { return t >= s.At.Seconds() }

// orDefault sets *p to v when it is the zero value (the key was not given).
func orDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// checkShare refuses a share outside [0, 1] and fills its default: a
// share is a probability drawn per request.
func checkShare(s *Scenario, share *float64, def float64) error {
	if !(*share >= 0 && *share <= 1) {
		return fmt.Errorf("%s: share %v must be within [0, 1]", s.Name, *share)
	}
	orDefault(share, def)
	return nil
}

// checkFiniteKey refuses NaN and infinities, which pass every range check
// written as a comparison that fails.
func checkFiniteKey(s *Scenario, key string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%s: %s %v must be a finite number", s.Name, key, v)
	}
	return nil
}

// checkClientMs refuses a client-side delay outside [0, a week], the
// range a trace row may hold.
func checkClientMs(s *Scenario, key string, v float64) error {
	if err := checkFiniteKey(s, key, v); err != nil {
		return err
	}
	if v < 0 || v > trace.MaxClientMs {
		return fmt.Errorf("%s: %s must be within [0, %d] (a week)", s.Name, key, trace.MaxClientMs)
	}
	return nil
}

// checkTokens refuses a token count outside [0, MaxModelTokens].
func checkTokens(s *Scenario, key string, v int64) error {
	if v < 0 || v > MaxModelTokens {
		return fmt.Errorf("%s: %s must be within [0, %d]", s.Name, key, MaxModelTokens)
	}
	return nil
}

// checkLabel refuses a tenant or model name a trace row could not hold.
func checkLabel(s *Scenario, id trace.Identity) error {
	id.RequestID = "probe"
	if err := (&trace.Request{Identity: id}).Validate(); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}
