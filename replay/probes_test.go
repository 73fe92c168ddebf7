package replay

import (
	"bytes"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/trace"
)

// TestProbesAreGraded: a third of the requests get a probe beside them,
// the same ones in the check and the schedule; the simulator answers each
// right, and wrong when it corrupts every answer; no probe's answer or
// prompt reaches the run's files.
func TestProbesAreGraded(t *testing.T) {
	wl := workload(t, 120, 2*time.Millisecond)
	run := func(corrupt float64) ([]trace.Result, *trace.RunInfo, string) {
		o := fastSim()
		o.CorruptShare = corrupt
		opts := DefaultOptions()
		opts.Target, opts.Probes, opts.Seed = startSim(t, o), 1.0/3, 5
		dir := filepath.Join(t.TempDir(), "run")
		rows, info := runAndRead(t, wl, dir, opts)
		return rows, info, dir
	}
	rows, info, dir := run(0)
	// The probes expected: the prober's draw over the workload's ids.
	pr := newProber(&Options{Requests: Requests{Probes: 1.0 / 3}, Schedule: Schedule{Seed: 5}})
	want := map[string]*probe.Probe{}
	for _, r := range rows {
		if r.Probe == "" {
			if p := pr.probeFor(&trace.Request{Identity: r.Identity}); p != nil {
				want[probeIDPrefix+r.RequestID] = p
			}
		}
	}
	if len(want) < 25 || len(want) > 55 {
		t.Fatalf("%d of 120 requests drew a probe; want about 40", len(want))
	}
	got := 0
	for _, r := range rows {
		if r.Probe == "" {
			continue
		}
		got++
		p := want[r.RequestID]
		if p == nil || r.Probe != p.Kind {
			t.Errorf("%s: kind %q, not a probe drawn (%v)", r.RequestID, r.Probe, p)
			continue
		}
		if r.Outcome != trace.OutcomeOK || r.ProbeCorrect == nil || !*r.ProbeCorrect {
			t.Errorf("%s (%s): outcome %s, correct %v; the simulator answers probes right", r.RequestID, r.Probe, r.Outcome, r.ProbeCorrect)
		}
	}
	if got != len(want) || info.Scheduled != int64(120+len(want)) {
		t.Errorf("%d probe results, %d scheduled; want %d and %d", got, info.Scheduled, len(want), 120+len(want))
	}
	// Neither a probe's answer nor its prompt is kept anywhere.
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(path)
		for _, p := range want {
			if p.Kind == probe.KindCopy && bytes.Contains(b, []byte(p.Expect)) || bytes.Contains(b, []byte(p.Prompt)) {
				t.Errorf("%s holds a probe's %s text", path, p.Kind)
				return fs.SkipAll
			}
		}
		return nil
	})
	bad, _, _ := run(1)
	for _, r := range bad {
		if r.Probe != "" && (r.ProbeCorrect == nil || *r.ProbeCorrect) {
			t.Errorf("%s: correct %v against a server answering every request wrong", r.RequestID, r.ProbeCorrect)
		}
		if r.Probe == "" && r.ProbeCorrect != nil || strings.HasPrefix(r.RequestID, probeIDPrefix) != (r.Probe != "") {
			t.Errorf("%s: probe %q, correct %v", r.RequestID, r.Probe, r.ProbeCorrect)
		}
	}
}

// TestProbeShareIsUniform: over ids as alike as r0 … r9999, the share of
// requests drawing a probe is the share asked, within four standard
// deviations, at several shares and seeds.
func TestProbeShareIsUniform(t *testing.T) {
	for _, c := range []struct {
		share float64
		seed  uint64
	}{{0.3, 0}, {0.3, 2}, {0.05, 7}, {0.9, 1}} {
		pr := newProber(&Options{Requests: Requests{Probes: c.share}, Schedule: Schedule{Seed: c.seed}})
		n, hits := 10_000, 0
		for i := range n {
			if pr.probeFor(&trace.Request{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i)}}) != nil {
				hits++
			}
		}
		mean, sd := c.share*float64(n), math.Sqrt(float64(n)*c.share*(1-c.share))
		if math.Abs(float64(hits)-mean) > 4*sd {
			t.Errorf("share %g, seed %d: %d of %d drew a probe; want %.0f ± %.0f", c.share, c.seed, hits, n, mean, 4*sd)
		}
	}
}
