package sweep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/trace"
)

// ErrInterrupted is returned when the sweep stopped because its context
// ended; sweep.json says where, and Resume finishes it.
var ErrInterrupted = errors.New("sweep interrupted")

// configName is what a configuration's name may hold: it names run
// directories.
var configName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Run runs a sweep into dir (created; with Resume, the sweep recorded
// there is finished) and returns its record, also written as
// dir/sweep.json after every step.
func Run(ctx context.Context, dir string, o Options) (*Record, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	for _, c := range o.Configs {
		if !configName.MatchString(c.Name) {
			return nil, opterr.New("Configs", c.Name, "a configuration's name names its run directories: letters, digits, '.', '_' and '-'")
		}
	}
	rec, err := openRecord(dir, &o)
	if err != nil {
		return nil, err
	}
	s := &sweeper{o: &o, dir: dir, rec: rec, start: time.Now(), prevWall: rec.WallS}
	return s.run(ctx)
}

// sweeper is one sweep in progress.
type sweeper struct {
	o        *Options
	dir      string
	rec      *Record
	start    time.Time
	prevWall float64 // wall time of the runs before a resume
}

// openRecord starts a new record in dir or, with Resume, reads the one
// there, checks that the plan is the same, and sets aside the run dirs of
// steps that did not finish.
func openRecord(dir string, o *Options) (*Record, error) {
	plan := o.plan()
	old, err := ReadRecord(dir)
	switch {
	case err == nil && !o.Resume:
		return nil, opterr.New("Resume", nil, "%s already holds a sweep (%s, %s): set Resume to finish it, or give a new directory", dir, FileName, old.Status)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, err
	case err != nil && o.Resume:
		return nil, opterr.New("Resume", nil, "%s holds no %s: there is no sweep to resume", dir, FileName)
	case err != nil:
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return nil, fmt.Errorf("%s exists and is not empty: a sweep writes a new directory", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		return &Record{SchemaVersion: schemaVersion, ToolVersion: trace.ToolVersion, SweepID: newSweepID(), Status: "running",
			Plan: plan, StartedAt: time.Now().UTC().Format(time.RFC3339)}, nil
	}
	if diff := planDiff(old.Plan, plan); diff != "" {
		return nil, opterr.New("Resume", nil, "the sweep in %s was planned differently; resume it with the same settings.\n%s", dir, diff)
	}
	for i := range old.Steps {
		st := &old.Steps[i]
		if st.Status == "done" || st.Status == "set-aside" {
			continue
		}
		// What an unfinished step wrote stays, under another name.
		for _, rd := range []*string{&st.RunDir, &st.OverloadRunDir} {
			if *rd == "" {
				continue
			}
			from := filepath.Join(dir, *rd)
			if _, err := os.Stat(from); err == nil {
				aside := *rd + ".interrupted"
				if err := os.Rename(from, filepath.Join(dir, aside)); err != nil {
					return nil, fmt.Errorf("setting aside the interrupted step's %s: %w", from, err)
				}
				*rd = aside
			}
		}
		st.Status = "set-aside"
	}
	old.Status, old.Reason = "running", ""
	old.Decisions = append(old.Decisions, fmt.Sprintf("resumed at %s: %d steps done", time.Now().UTC().Format(time.RFC3339), len(doneSteps(old.Steps))))
	return old, nil
}

// plan is what sweep.json records of the options.
func (o *Options) plan() Plan {
	p := Plan{Configs: o.Configs, Mode: o.Mode, Levels: o.Levels, Search: o.Search, SLO: o.SLO, Attainment: o.Attainment, Confidence: o.Confidence,
		TTFTMode: string(o.TTFTMode), StepDurationS: o.StepDuration.Seconds(), StepWarmupS: o.StepWarmup.Seconds(), Repeats: o.Repeats,
		MaxExtensions: o.MaxExtensions, BudgetS: o.Budget.Seconds(), IdleTimeoutS: o.IdleTimeout.Seconds(), Recovery: o.Recovery, CostPerHour: o.CostPerHour}
	if o.Search != nil {
		p.Levels = nil
		p.SearchBound = o.Search.Bound(o.MaxExtensions)
	}
	return p
}

func doneSteps(steps []Step) []Step {
	var out []Step
	for _, s := range steps {
		if s.Status == "done" {
			out = append(out, s)
		}
	}
	return out
}

func newSweepID() string {
	b := make([]byte, 3)
	rand.Read(b)
	return "sweep-" + time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

func (s *sweeper) wall() float64 { return s.prevWall + time.Since(s.start).Seconds() }

// save rewrites sweep.json.
func (s *sweeper) save() error {
	s.rec.WallS = s.wall()
	return writeRecord(s.dir, s.rec)
}

// stop records the sweep's end.
func (s *sweeper) stop(status, reason string) error {
	s.rec.Status, s.rec.Reason = status, reason
	return s.save()
}

func (s *sweeper) run(ctx context.Context) (*Record, error) {
	s.rec.Notes = s.shortStepNotes() // the plan's, the same on a resume
	for _, n := range s.rec.Notes {
		s.progress("note: %s", n)
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	for {
		if ctx.Err() != nil {
			return s.rec, errors.Join(ErrInterrupted, s.stop("interrupted", "interrupted before a step began"))
		}
		n, why, ok := s.o.planNext(doneSteps(s.rec.Steps))
		if !ok {
			s.rec.Decisions = append(s.rec.Decisions, "done: "+why)
			break
		}
		length, _ := s.stepLength(n)
		if b := s.o.Budget; b > 0 && s.wall()+(length+s.o.StepWarmup).Seconds() > b.Seconds() {
			reason := fmt.Sprintf("the next step (%s) would end past the budget of %s", why, b)
			s.rec.Decisions = append(s.rec.Decisions, "stopped: "+reason)
			if err := s.stop("budget", reason); err != nil {
				return s.rec, err
			}
			return s.finish()
		}
		s.rec.Decisions = append(s.rec.Decisions, fmt.Sprintf("step %d: %s", len(s.rec.Steps)+1, why))
		if err := s.step(ctx, n); err != nil {
			return s.rec, err
		}
	}
	if err := s.stop("complete", ""); err != nil {
		return s.rec, err
	}
	return s.finish()
}

// finish computes the results and writes them.
func (s *sweeper) finish() (*Record, error) {
	results, envs, err := s.results()
	if err != nil {
		return s.rec, err
	}
	s.rec.Results = results
	if err := s.save(); err != nil {
		return s.rec, err
	}
	return s.rec, writeHTML(s.dir, s.rec, envs)
}

// config returns the named configuration.
func (s *sweeper) config(name string) Config {
	for _, c := range s.o.Configs {
		if c.Name == name {
			return c
		}
	}
	return Config{}
}

// step runs one replay and judges it.
func (s *sweeper) step(ctx context.Context, n next) error {
	cfg := s.config(n.Config)
	idx := len(s.rec.Steps) + 1
	length, why := s.stepLength(n)
	st := Step{Index: idx, Config: n.Config, Level: n.Level, Purpose: n.Purpose, Repeat: n.Repeat,
		RunDir: fmt.Sprintf("step-%03d-%s-%s-%s", idx, n.Config, s.o.Mode, fmtLevel(n.Level)), RunID: fmt.Sprintf("%s-step-%03d", s.rec.SweepID, idx),
		Status: "running", StartedAt: time.Now().UTC().Format(time.RFC3339Nano), DurationS: length.Seconds(), DurationWhy: why}
	if why != "" {
		s.rec.Decisions = append(s.rec.Decisions, fmt.Sprintf("step %d lasts %s: %s", idx, length, why))
	}
	s.rec.Steps = append(s.rec.Steps, st)
	if err := s.save(); err != nil {
		return err
	}
	rec := &s.rec.Steps[len(s.rec.Steps)-1]
	ro := s.replayOptions(cfg, n, rec)
	s.progress("step %d (%s): %s at %s %s for %s%s", idx, n.Purpose, n.Config, fmtLevel(n.Level), unit(s.o.Mode), length, waitNote(ro.WaitIdle))
	began := time.Now()
	var info *trace.RunInfo
	var err error
	if n.Purpose == "recovery" {
		info, err = s.runRecovery(ctx, cfg, n, rec, ro)
	} else {
		info, err = replay.Run(ctx, cfg.Workload, filepath.Join(s.dir, rec.RunDir), ro)
	}
	rec.WallS = time.Since(began).Seconds()
	if err != nil {
		if ctx.Err() != nil {
			rec.Status, rec.Error = "interrupted", err.Error()
			return errors.Join(ErrInterrupted, s.stop("interrupted", fmt.Sprintf("interrupted in step %d", idx)))
		}
		rec.Status, rec.Error = "failed", err.Error()
		return errors.Join(fmt.Errorf("sweep step %d (%s at %s): %w", idx, n.Config, fmtLevel(n.Level), err), s.stop("failed", err.Error()))
	}
	if !info.Complete {
		rec.Status, rec.Error = "interrupted", info.Reason
		return errors.Join(ErrInterrupted, s.stop("interrupted", fmt.Sprintf("step %d: %s", idx, info.Reason)))
	}
	if info.IdleWaitMs != nil {
		rec.IdleWaitS = new(*info.IdleWaitMs / 1e3)
	}
	if err := s.judgeStep(rec, info); err != nil {
		rec.Status, rec.Error = "failed", err.Error()
		return errors.Join(err, s.stop("failed", err.Error()))
	}
	rec.Status = "done"
	s.rec.Decisions = append(s.rec.Decisions, fmt.Sprintf("step %d: %d of %d requests met the SLO (%.2f%%, %.0f%% interval [%.2f%%, %.2f%%]): %s%s", idx, rec.Good, rec.Counted,
		100*rec.Attainment, 100*s.o.Confidence, 100*rec.AttainmentCI[0], 100*rec.AttainmentCI[1], rec.Verdict, steadyNote(rec)))
	idle := ""
	if rec.IdleWaitS != nil {
		idle = fmt.Sprintf("; waited %.1f s for the server to drain", *rec.IdleWaitS)
	}
	s.progress("step %d: %d requests, attainment %.2f%% [%.2f, %.2f] → %s%s; p99 TTFT %.0f ms%s", idx, rec.Counted, 100*rec.Attainment,
		100*rec.AttainmentCI[0], 100*rec.AttainmentCI[1], rec.Verdict, steadyNote(rec), rec.TTFTP99Ms, idle)
	return s.save()
}

// runRecovery replays the overload level and, from the moment its
// schedule ends, the recovery level, concurrently: the recovery meets the
// backlog the overload leaves. The overload waits for an idle server as
// any step does; the recovery does not. It returns the recovery's run.
func (s *sweeper) runRecovery(ctx context.Context, cfg Config, n next, rec *Step, ro replay.Options) (*trace.RunInfo, error) {
	over := n
	over.Level = n.Overload
	rec.OverloadLevel, rec.OverloadRunDir = n.Overload, rec.RunDir+"-overload"
	oo := s.replayOptions(cfg, over, rec)
	oo.RunID, oo.WarmupDuration, oo.Duration = rec.RunID+"-overload", 0, rec.length()
	oo.Labels["sweep_purpose"] = "recovery-overload"
	// The overload's idle wait and setup come first; both schedules are
	// then pinned to the wall clock, the recovery's zero at the overload's
	// end.
	if oo.WaitIdle > 0 {
		waited, err := replay.WaitIdle(ctx, oo)
		if err != nil {
			return nil, err
		}
		rec.IdleWaitS, oo.WaitIdle = new(waited.Seconds()), 0
	}
	zero := time.Now().Add(2 * time.Second)
	oo.StartAt, ro.StartAt, ro.WaitIdle = zero, zero.Add(rec.length()), 0
	type result struct {
		info *trace.RunInfo
		err  error
	}
	overDone := make(chan result, 1)
	go func() {
		info, err := replay.Run(ctx, cfg.Workload, filepath.Join(s.dir, rec.OverloadRunDir), oo)
		overDone <- result{info, err}
	}()
	info, err := replay.Run(ctx, cfg.Workload, filepath.Join(s.dir, rec.RunDir), ro)
	o := <-overDone
	if o.err != nil {
		return nil, fmt.Errorf("the overload replay before recovery: %w", o.err)
	}
	if o.info != nil && !o.info.Complete {
		return o.info, nil
	}
	return info, err
}

// replayOptions are the step's replay settings.
func (s *sweeper) replayOptions(cfg Config, n next, rec *Step) replay.Options {
	ro := s.o.Replay
	ro.Target, ro.RunID, ro.Progress = cfg.Target, rec.RunID, nil
	// Each step's prompts are new to the server's prefix cache: replaying
	// the same requests at each level, a later step met the prompts an
	// earlier one had cached, and passed levels it could not sustain.
	h := fnv.New64a()
	h.Write([]byte(rec.RunID))
	ro.PromptSalt = h.Sum64() | 1
	ro.Rate, ro.Concurrency, ro.Speed = 0, 0, 1
	switch s.o.Mode {
	case ModeRate:
		ro.Rate = n.Level
		ro.Seed = s.o.Replay.Seed + uint64(rec.Index)
	case ModeSpeed:
		ro.Speed = n.Level
	case ModeConcurrency:
		ro.Concurrency = int(n.Level)
	}
	ro.Duration, ro.WarmupDuration, ro.WarmupRequests = rec.length()+s.o.StepWarmup, s.o.StepWarmup, 0
	ro.WaitIdle = 0
	if s.o.engineMetrics() {
		ro.WaitIdle = max(s.o.IdleTimeout, time.Second)
	}
	ro.Labels = maps.Clone(s.o.Replay.Labels)
	if ro.Labels == nil {
		ro.Labels = map[string]string{}
	}
	maps.Copy(ro.Labels, map[string]string{"sweep": s.rec.SweepID, "config": cfg.Name, "sweep_step": strconv.Itoa(rec.Index),
		"sweep_level": fmtLevel(n.Level), "sweep_mode": string(s.o.Mode), "sweep_purpose": n.Purpose})
	return ro
}

// judgeStep measures a finished step.
func (s *sweeper) judgeStep(rec *Step, info *trace.RunInfo) error {
	m, err := analyze.MeasureStep([]string{filepath.Join(s.dir, rec.RunDir)}, s.envelopeOptions())
	if err != nil {
		return fmt.Errorf("measuring step %d: %w", rec.Index, err)
	}
	rec.Counted, rec.Good, rec.Attainment = m.Counted, m.Good, m.Attainment
	rec.Verdict, rec.AttainmentCI = s.o.judge(m.Good, m.Counted)
	rec.OfferedRate, rec.GoodputRate, rec.TTFTP99Ms, rec.E2EP99Ms = m.OfferedRate, m.GoodputRate, quantile(m.TTFT, 99), quantile(m.E2E, 99)
	if rec.Steadiness = m.Steadiness; rec.Steadiness != nil && !rec.Steadiness.Steady {
		// A queue still growing at the step's end meets, for a while, an
		// SLO that a longer step at the same level fails.
		rec.Verdict = fail
	}
	if err := s.judgeAccuracy(rec); err != nil {
		return err
	}
	rec.Complete = info.Complete
	if m, err := trace.ReadManifest(s.config(rec.Config).Workload); err == nil && s.o.Mode != ModeConcurrency && info.Scheduled >= m.Rows {
		rec.Notes = append(rec.Notes, fmt.Sprintf("the step used all %d requests of the workload before its %s were up: it ran short; generate a longer workload", m.Rows, rec.length()+s.o.StepWarmup))
	}
	if s.o.StepWarmup > 0 {
		if rec.Cold, err = coldStart(filepath.Join(s.dir, rec.RunDir)); err != nil {
			return fmt.Errorf("step %d's warmup: %w", rec.Index, err)
		}
	}
	if change := s.identityChange(rec, info); change != "" {
		rec.Notes = append(rec.Notes, change)
		s.rec.Decisions = append(s.rec.Decisions, fmt.Sprintf("step %d: %s", rec.Index, change))
	}
	if info.ClientSaturated {
		rec.Notes = append(rec.Notes, fmt.Sprintf("the client was saturated (lateness p99 %.2f ms): this step's latencies may be the load generator's", info.Lateness.P99Ms))
	}
	if m.Counted == 0 {
		rec.Notes = append(rec.Notes, "no request was counted (all warmup, or none sent): the step decides nothing")
	}
	return nil
}

// judgeAccuracy grades the step's probe answers: below MinAccuracy, or
// with none graded while MinAccuracy asks, the step fails, however fast.
func (s *sweeper) judgeAccuracy(rec *Step) error {
	if s.o.Replay.Probes == 0 { // no probe was sent: nothing to read
		return nil
	}
	p, err := analyze.ProbeAccuracy([]string{filepath.Join(s.dir, rec.RunDir)}, 0)
	if err != nil {
		return fmt.Errorf("grading step %d's probes: %w", rec.Index, err)
	}
	if p != nil {
		rec.Accuracy = &p.Accuracy
	}
	switch {
	case s.o.MinAccuracy == 0:
	case rec.Accuracy == nil || rec.Accuracy.Graded == 0:
		rec.Inaccurate = "no probe answer was graded: the accuracy floor cannot be checked"
	case rec.Accuracy.Accuracy < s.o.MinAccuracy:
		a := rec.Accuracy
		rec.Inaccurate = fmt.Sprintf("answers %.1f%% correct [95%% %.1f, %.1f] of %d probes, below the accuracy floor %.1f%%",
			100*a.Accuracy, 100*a.Lo, 100*a.Hi, a.Graded, 100*s.o.MinAccuracy)
	}
	if rec.Inaccurate != "" {
		rec.Verdict = fail
	}
	return nil
}

func (s *sweeper) envelopeOptions() analyze.EnvelopeOptions {
	// A step's runs are the sweep's own, as long as its plan made them:
	// no row bound but the plan's.
	return analyze.EnvelopeOptions{Options: analyze.Options{SLO: s.o.SLO, TTFTMode: s.o.TTFTMode, InMemoryRows: math.MaxInt}, Attainment: s.o.Attainment, Confidence: s.o.Confidence}
}

func (s *sweeper) progress(format string, args ...any) {
	if s.o.Progress != nil {
		fmt.Fprintf(s.o.Progress, "sweep "+format+"\n", args...)
	}
}

func unit(m Mode) string {
	switch m {
	case ModeRate:
		return "req/s"
	case ModeSpeed:
		return "× speed"
	}
	return "in flight"
}

func waitNote(d time.Duration) string {
	if d > 0 {
		return ", after the server drains"
	}
	return ""
}

// steadyNote is ", not steady: …" for a step whose queue was still
// growing, else "".
func steadyNote(rec *Step) string {
	note := ""
	if st := rec.Steadiness; st != nil && !st.Steady {
		note = " (" + st.Reason + ")"
	}
	if rec.Inaccurate != "" {
		note += " (" + rec.Inaccurate + ")"
	}
	return note
}

// quantile returns a distribution's p-th percentile, else its maximum.
func quantile(d analyze.Distribution, p float64) float64 {
	for _, q := range d.Quantiles {
		if q.P == p {
			return q.Value
		}
	}
	return d.Max
}
