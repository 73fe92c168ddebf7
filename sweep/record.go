package sweep

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace"
)

// FileName is the sweep's record in its directory.
const FileName = "sweep.json"

// Record is sweep.json: the plan, every step with its verdict and why the
// next one was chosen, and the result. It is rewritten after every step,
// so an interrupted sweep can be resumed from it.
type Record struct {
	SchemaVersion int    `json:"schema_version"`
	ToolVersion   string `json:"tool_version"`
	SweepID       string `json:"sweep_id"`
	// Status is running, complete, interrupted, budget (stopped before a
	// step that would pass the budget) or failed.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Plan   Plan   `json:"plan"`
	Steps  []Step `json:"steps"`
	// Decisions say, in order, why each step was run and what was
	// concluded from it.
	Decisions []string `json:"decisions"`
	// Notes say, before the first step, where the plan's steps are too
	// short to pass (shortStepNotes).
	Notes     []string `json:"notes,omitempty"`
	Results   []Result `json:"results,omitempty"`
	StartedAt string   `json:"started_at"`
	WallS     float64  `json:"wall_s"`
}

// Plan is what the sweep was asked to do; a resume must ask the same.
type Plan struct {
	Configs       []Config    `json:"configs"`
	Mode          Mode        `json:"mode"`
	Levels        []float64   `json:"levels,omitempty"`
	Search        *Search     `json:"search,omitempty"`
	SearchBound   int         `json:"search_bound_steps,omitempty"`
	SLO           analyze.SLO `json:"slo"`
	Attainment    float64     `json:"attainment"`
	Confidence    float64     `json:"confidence"`
	TTFTMode      string      `json:"ttft_mode"`
	StepDurationS float64     `json:"step_duration_s"` // 0: automatic, per step
	StepWarmupS   float64     `json:"step_warmup_s"`
	Repeats       int         `json:"repeats"`
	MaxExtensions int         `json:"max_extensions"`
	BudgetS       float64     `json:"budget_s,omitempty"`
	IdleTimeoutS  float64     `json:"idle_timeout_s"`
	Recovery      bool        `json:"recovery"`
	CostPerHour   float64     `json:"cost_per_hour,omitempty"`
}

// Step is one replay of the sweep.
type Step struct {
	Index  int     `json:"index"`
	Config string  `json:"config"`
	Level  float64 `json:"level"`
	// Purpose: level (a fixed step), grow, shrink, bisect, extend (an
	// undecided level run again) or recovery.
	Purpose string `json:"purpose"`
	Repeat  int    `json:"repeat"`
	RunDir  string `json:"run_dir"` // relative to the sweep directory
	// OverloadRunDir is a recovery step's overload replay, its schedule
	// ending as the step's begins (run at OverloadLevel, not judged).
	OverloadRunDir string  `json:"overload_run_dir,omitempty"`
	OverloadLevel  float64 `json:"overload_level,omitempty"`
	RunID          string  `json:"run_id"`
	// Status is done, interrupted or failed.
	Status    string  `json:"status"`
	Error     string  `json:"error,omitempty"`
	StartedAt string  `json:"started_at"`
	WallS     float64 `json:"wall_s"`
	// IdleWaitS is how long the step waited for the server to report
	// nothing running or waiting; absent when it did not wait (no engine
	// metrics endpoint; a recovery step's wait is its overload's).
	IdleWaitS *float64 `json:"idle_wait_s,omitempty"`
	// Counted and Good: requests past the warmup, and those meeting the
	// SLO; Attainment and its exact interval; Verdict of this step alone
	// (pass, fail or undecided).
	Counted      int        `json:"counted"`
	Good         int        `json:"good"`
	Attainment   float64    `json:"attainment"`
	AttainmentCI [2]float64 `json:"attainment_ci"`
	Verdict      string     `json:"verdict"`
	OfferedRate  float64    `json:"offered_rps"`
	GoodputRate  float64    `json:"goodput_rps"`
	TTFTP99Ms    float64    `json:"ttft_p99_ms"`
	E2EP99Ms     float64    `json:"e2e_p99_ms"`
	Complete     bool       `json:"complete"`
	// DurationS is the step's measured time as planned: StepDuration, or
	// the automatic length (StepDuration 0) and why, in DurationWhy.
	DurationS   float64 `json:"step_duration_s"`
	DurationWhy string  `json:"step_duration_why,omitempty"`
	// Steadiness says whether the step's queue held still; a step that
	// is not steady fails whatever its attainment.
	Steadiness *analyze.Steadiness `json:"steadiness,omitempty"`
	// Accuracy is the step's probe answers graded right (replay's
	// Probes), where it sent any; Inaccurate says why the step failed
	// MinAccuracy ("" when it did not).
	Accuracy   *analyze.Accuracy `json:"accuracy,omitempty"`
	Inaccurate string            `json:"inaccurate,omitempty"`
	// Cold is the step's warmup (StepWarmup), apart from the verdict.
	Cold  *ColdStart `json:"cold_start,omitempty"`
	Notes []string   `json:"notes,omitempty"`
}

// length is the step's measured time.
func (s *Step) length() time.Duration { return time.Duration(s.DurationS * float64(time.Second)) }

// writeRecord writes sweep.json atomically.
func writeRecord(dir string, r *Record) error {
	return trace.WriteJSONAtomic(filepath.Join(dir, FileName), r)
}

// maxRecordBytes bounds sweep.json: a record of thousands of steps is a
// few MB.
const maxRecordBytes = 256 << 20

// ReadRecord reads a sweep directory's sweep.json. Every step's run
// directory must lie inside dir (trace.InsideDir): a record naming one
// elsewhere was edited, and is refused as tampered before anything it
// names is read or renamed.
func ReadRecord(dir string) (*Record, error) {
	path := filepath.Join(dir, FileName)
	b, err := regfile.ReadFile(path, maxRecordBytes)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.SchemaVersion > schemaVersion {
		return nil, fmt.Errorf("%s: schema_version %d is newer than this servetrace reads (%d); upgrade servetrace", path, r.SchemaVersion, schemaVersion)
	}
	for _, st := range r.Steps {
		for _, rd := range []struct{ field, rel string }{{"run_dir", st.RunDir}, {"overload_run_dir", st.OverloadRunDir}} {
			if rd.rel == "" && rd.field == "overload_run_dir" {
				continue
			}
			if _, err := trace.InsideDir(dir, rd.rel, fmt.Sprintf("%s step %d's %s", path, st.Index, rd.field)); err != nil {
				return nil, err
			}
		}
	}
	return &r, nil
}

// schemaVersion is sweep.json's.
const schemaVersion = 1

// planDiffValueBytes bounds each value a plan difference shows: a plan
// read from a file can be any size, and the terminal gets a line each.
const planDiffValueBytes = 200

// planDiff names the fields of sweep.json's plan that differ between the
// recorded plan and the one asked for now, a line each with both values
// (each cut to planDiffValueBytes); empty when the plans are the same.
func planDiff(recorded, now Plan) string {
	var a, b map[string]json.RawMessage
	ra, _ := json.Marshal(recorded)
	rb, _ := json.Marshal(now)
	json.Unmarshal(ra, &a)
	json.Unmarshal(rb, &b)
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if string(a[k]) == string(b[k]) {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: recorded %s, now %s", k, cutValue(a[k]), cutValue(b[k])))
	}
	return strings.Join(lines, "\n")
}

// cutValue is a JSON value for a message: "none" when absent, cut to
// planDiffValueBytes with the length it had.
func cutValue(v json.RawMessage) string {
	switch {
	case v == nil:
		return "none"
	case len(v) > planDiffValueBytes:
		return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(string(v[:planDiffValueBytes]), ""), len(v))
	}
	return string(v)
}
