package replay

import (
	"context"
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// TestTimingCalibrateRoundTrip replays a probe workload against a simulator
// with known constants, calibrates from the results, and recovers each
// constant within 10%.
func TestTimingCalibrateRoundTrip(t *testing.T) {
	skipUnderRace(t)
	truth := sim.CostModel{IterBase: 8 * time.Millisecond, PerPrefillToken: 100 * time.Microsecond,
		PerDecodeSeq: 800 * time.Microsecond, PerKVToken: 400 * time.Nanosecond}
	o := sim.DefaultOptions()
	o.Engine.Cost = truth
	o.Engine.PrefixCaching = false
	target := startSim(t, o)

	dir := filepath.Join(t.TempDir(), "wl")
	w, _ := trace.NewBucketWriter(dir, trace.WriterOptions{})
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	add := func(at time.Duration, in, out int64) {
		w.Write(trace.Request{Identity: trace.Identity{RequestID: strconv.Itoa(n)}, TS: t0.Add(at).UnixMicro(),
			Shape: trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, API: trace.APICompletions, Stream: true, N: 1}})
		n++
	}
	// Idle probes of 16 prompt sizes, 0.5 s apart: prefill against size.
	for i := range 16 {
		add(time.Duration(i)*500*time.Millisecond, int64(200*(i+1)), 2)
	}
	// Bursts whose batch sizes and prompt lengths vary independently:
	// decode cost against batch and KV read.
	for g, burst := range []struct {
		size int
		in   int64
	}{{4, 3000}, {12, 200}, {24, 1500}, {8, 2500}, {16, 800}} {
		for range burst.size {
			add(9*time.Second+time.Duration(g)*4*time.Second, burst.in, 80)
		}
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target, opts.IgnoreEOS = target, true
	if _, err := Run(context.Background(), dir, run, opts); err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	cal, err := sim.Calibrate(rows)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("calibrated %+v from %d prefill and %d decode samples (R² %.3f, %.3f); notes %v",
		cal.Cost, cal.PrefillSamples, cal.DecodeSamples, cal.PrefillR2, cal.DecodeR2, cal.Notes)
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"iteration base", cal.Cost.IterBase, truth.IterBase},
		{"prefill per token", cal.Cost.PerPrefillToken, truth.PerPrefillToken},
		{"decode per sequence", cal.Cost.PerDecodeSeq, truth.PerDecodeSeq},
		{"KV per token", cal.Cost.PerKVToken, truth.PerKVToken},
	} {
		if rel := float64(c.got)/float64(c.want) - 1; math.Abs(rel) > 0.10 {
			t.Errorf("%s: calibrated %v, true %v (%+.1f%%)", c.name, c.got, c.want, 100*rel)
		}
	}
}
