package replay

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("timing figures are distorted by -race; run by make test-timing")
	}
}

// TestTimingOpenLoopLateness replays 200 req/s for 2 s against a simulator
// that answers at once, and checks that the client sent on time.
func TestTimingOpenLoopLateness(t *testing.T) {
	skipUnderRace(t)
	o := sim.DefaultOptions()
	o.PrefillBase, o.PrefillPerToken, o.DecodePerToken = 0, 0, 0
	target := startSim(t, o)
	wl := workload(t, 400, 5*time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = target
	info, err := Run(context.Background(), wl, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lateness p50 %.3f ms p99 %.3f ms max %.3f ms; offered %.1f/s achieved %.1f/s",
		info.Lateness.P50Ms, info.Lateness.P99Ms, info.Lateness.MaxMs, info.OfferedRate, info.AchievedRate)
	if info.ClientSaturated || info.Lateness.P99Ms > 5 {
		t.Errorf("lateness p99 %.2f ms at 200 req/s on loopback; want under 5 ms", info.Lateness.P99Ms)
	}
	if math.Abs(info.AchievedRate/info.OfferedRate-1) > 0.02 {
		t.Errorf("achieved %.1f req/s vs offered %.1f", info.AchievedRate, info.OfferedRate)
	}
	// Sent times follow the schedule, not the responses.
	rows, _ := trace.ReadResults(run)
	for _, r := range rows {
		if r.SentNs == nil || *r.SentNs < r.ScheduledNs {
			t.Fatalf("request %s sent at %v before its schedule %d", r.RequestID, r.SentNs, r.ScheduledNs)
		}
	}
}

// TestTimingTokenPacing checks that the client measures the simulator's
// configured decode time as ITL and its prefill as TTFT.
func TestTimingTokenPacing(t *testing.T) {
	skipUnderRace(t)
	o := sim.DefaultOptions()
	o.PrefillBase, o.PrefillPerToken, o.DecodePerToken = 30*time.Millisecond, 0, 10*time.Millisecond
	target := startSim(t, o)
	wl := workload(t, 20, 20*time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = target
	if _, err := Run(context.Background(), wl, run, opts); err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	var itl, ttft []float64
	for _, r := range rows {
		ttft = append(ttft, float64(*r.FirstTokenNs-*r.SentNs)/1e6)
		for i := 1; i < len(r.TokenTimesNs); i++ {
			itl = append(itl, float64(r.TokenTimesNs[i]-r.TokenTimesNs[i-1])/1e6)
		}
	}
	slices.Sort(itl)
	slices.Sort(ttft)
	if med := itl[len(itl)/2]; math.Abs(med-10) > 1 {
		t.Errorf("ITL median %.2f ms, simulator decodes every 10 ms", med)
	}
	if med := ttft[len(ttft)/2]; med < 30 || med > 35 {
		t.Errorf("TTFT median %.2f ms, simulator prefill is 30 ms", med)
	}
}
