package sweep

import (
	"strings"
	"testing"
	"time"
)

// TestShortStepsAreNotedBeforeTheSweep: at 99% attainment and 95%
// confidence a pass needs 368 requests, all good (0.99^368 < 0.025 <
// 0.99^367). In 60-second steps with 2 extensions, 1 and 2 req/s send 60
// and 120 requests a step, 180 and 360 pooled: they cannot pass; 4 req/s,
// 240 a step, passes only pooled; 8 req/s needs nothing. A search whose
// minimum lies below 368/60 = 6.133 req/s says so, and a closed-loop sweep in
// fixed steps says what rate a pass needs (before, nothing was said).
func TestShortStepsAreNotedBeforeTheSweep(t *testing.T) {
	o := DefaultOptions()
	o.Configs = []Config{{Name: "A"}}
	o.Levels, o.StepDuration = []float64{1, 2, 4, 8}, time.Minute
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	notes := (&sweeper{o: &o}).shortStepNotes()
	want := []string{
		"at 1 req/s a 1m0s step sends about 60 requests, 180 over its 3 runs pooled, fewer than the 368 a pass needs (99% attainment at 95% confidence): it cannot pass; a step of at least 6m8s could pass alone",
		"at 2 req/s a 1m0s step sends about 120 requests, 360 over its 3 runs pooled, fewer than the 368 a pass needs (99% attainment at 95% confidence): it cannot pass; a step of at least 3m4s could pass alone",
		"at 4 req/s a 1m0s step sends about 240 requests, fewer than the 368 a pass needs (99% attainment at 95% confidence): it can pass only pooled over its extensions",
	}
	if strings.Join(notes, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(want, "\n"))
	}

	o = searchOptions(2)
	o.StepDuration = time.Minute
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	notes = (&sweeper{o: &o}).shortStepNotes()
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "below 6.133 req/s a 1m0s step sends fewer than the 368 requests a pass needs") {
		t.Errorf("search notes %q", notes)
	}

	o = DefaultOptions()
	o.Configs, o.Mode = []Config{{Name: "A"}}, ModeConcurrency
	o.Levels, o.StepDuration = []float64{4, 8}, time.Minute
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	notes = (&sweeper{o: &o}).shortStepNotes()
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "in closed loop a level's rate is known only once measured: a 1m0s step passes only if it counts at least 368 requests (6.133 req/s)") {
		t.Errorf("closed-loop notes %q", notes)
	}
}

// TestClosedLoopStepsSizedFromMeasuredThroughput: a closed-loop step's
// automatic length comes from the throughput measured at its level or
// the levels below it: after 500 requests counted in 10 s at 4 in
// flight (50 req/s), the step at 8 lasts 2 × 368 / 50 = 14.7 s, rounded
// to 15 s (before, the rate was unknown and every closed-loop step lasted
// the 10-second floor: 500 requests, not the twice 368 asked of a step).
func TestClosedLoopStepsSizedFromMeasuredThroughput(t *testing.T) {
	o := DefaultOptions()
	o.Configs, o.Mode, o.Levels = []Config{{Name: "A"}}, ModeConcurrency, []float64{4, 8}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	s := &sweeper{o: &o, rec: &Record{}}
	if d, _ := s.stepLength(next{Config: "A", Level: 4}); d != 10*time.Second {
		t.Errorf("the first closed-loop step lasts %s; want the 10 s floor", d)
	}
	s.rec.Steps = []Step{{Index: 1, Config: "A", Level: 4, Status: "done", Counted: 500, DurationS: 10}}
	d, why := s.stepLength(next{Config: "A", Level: 8})
	if d != 15*time.Second || !strings.Contains(why, "736 requests at 50 req/s (measured at 4 in flight)") {
		t.Errorf("the step at 8 lasts %s (%s); want 15 s from 50 req/s measured at 4", d, why)
	}
	s.rec.Steps = append(s.rec.Steps, Step{Index: 2, Config: "B", Level: 4, Status: "done", Counted: 5000, DurationS: 10})
	if d, _ := s.stepLength(next{Config: "A", Level: 2}); d != 10*time.Second {
		t.Errorf("a level below every measured one lasts %s; want the 10 s floor", d)
	}
}
