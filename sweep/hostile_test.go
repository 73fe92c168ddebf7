package sweep

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

// TestHostileSweepRecords: each row is a sweep.json edited by hand or by
// an attacker (issue 42, 1 and 6). Resuming it must be refused with an
// error naming the fault, and must leave every directory where it was,
// outside the sweep's directory above all; analyze must refuse it too.
func TestHostileSweepRecords(t *testing.T) {
	o := baseOptions(Config{Name: "A", Target: "http://127.0.0.1:1", Workload: "wl"})
	o.Levels, o.Recovery = []float64{10, 20}, false
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// edit changes the record of a sweep interrupted in its second
		// step (its first done), whose directory is sweep/ beside victim/.
		edit func(r *Record)
		// resume is the plan of the resume (nil: the recorded one).
		resume func(o *Options)
		want   string
		// analyzeWant is what analyze's error must say ("": analyze
		// reads the record).
		analyzeWant string
	}{
		{"a running step's run_dir outside the sweep", func(r *Record) { r.Steps[1].RunDir = "../victim" },
			nil, `step 2's run_dir names "../victim"`, ""},
		{"a done step's run_dir outside the sweep", func(r *Record) { r.Steps[0].RunDir = "../victim" },
			nil, `step 1's run_dir names "../victim"`, `run_dir names "../victim"`},
		{"an absolute run_dir", func(r *Record) { r.Steps[0].RunDir = "/tmp" },
			nil, `step 1's run_dir names "/tmp"`, `run_dir names "/tmp"`},
		{"an overload_run_dir outside the sweep", func(r *Record) {
			r.Steps[1].Purpose, r.Steps[1].OverloadRunDir = "recovery", "../victim"
		}, nil, `step 2's overload_run_dir names "../victim"`, ""},
		{"a run_dir through a link out of the sweep", func(r *Record) { r.Steps[1].RunDir = "out" },
			nil, `resolves to`, ""},
		{"a plan of 20 MB resumed with another", func(r *Record) {
			r.Plan.Levels = make([]float64, 2_000_000)
			for i := range r.Plan.Levels {
				r.Plan.Levels[i] = 1e6 + float64(i)
			}
		}, nil, "levels: recorded [1000000,1000001,", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir, victim := filepath.Join(root, "sweep"), filepath.Join(root, "victim")
			for _, d := range []string{filepath.Join(dir, "step-001-A-rate-10"), filepath.Join(dir, "step-002-A-rate-20"), victim} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			os.WriteFile(filepath.Join(victim, trace.RunInfoName), []byte("{}"), 0o644)
			os.Symlink(victim, filepath.Join(dir, "out"))
			rec := &Record{SchemaVersion: schemaVersion, SweepID: "s", Status: "interrupted", Plan: o.plan(), Steps: []Step{
				{Index: 1, Config: "A", Level: 10, Purpose: "level", RunDir: "step-001-A-rate-10", Status: "done"},
				{Index: 2, Config: "A", Level: 20, Purpose: "level", RunDir: "step-002-A-rate-20", Status: "interrupted"},
			}}
			c.edit(rec)
			if err := writeRecord(dir, rec); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(filepath.Join(dir, FileName))
			ro := o
			ro.Resume = true
			_, err := Run(context.Background(), dir, ro)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("resume: %.300v; want an error saying %q", err, c.want)
			}
			if n := len(err.Error()); n > 4096 {
				t.Errorf("the error is %d bytes long; a terminal gets a few lines", n)
			}
			if _, serr := os.Stat(filepath.Join(victim, trace.RunInfoName)); serr != nil {
				t.Errorf("the directory outside the sweep was moved: %v", serr)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, FileName)); string(after) != string(before) {
				t.Error("the refused resume rewrote sweep.json")
			}
			if c.analyzeWant == "" {
				return
			}
			if _, err := analyze.ExpandRunDirs(dir); !errors.Is(err, trace.ErrTampered) || !strings.Contains(err.Error(), c.analyzeWant) {
				t.Errorf("analyze: %v; want ErrTampered saying %q", err, c.analyzeWant)
			}
		})
	}
}
