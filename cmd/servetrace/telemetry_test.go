package main

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// steadyThenQuiet writes a workload of n requests over span, then one
// small request quiet later: the run ends on an idle GPU, as a power
// reading averaged over the last second needs for its integral to close.
func steadyThenQuiet(t *testing.T, n int, span, quiet time.Duration) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "workload")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n + 1 {
		at, in, out := t0.Add(time.Duration(i)*span/time.Duration(n)), int64(120), int64(24)
		if i == n {
			at, in, out = t0.Add(span+quiet), 8, 1
		}
		r := trace.Request{Identity: trace.Identity{RequestID: "q" + strconv.Itoa(i)}, TS: at.UnixMicro(),
			Shape: trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, API: trace.APICompletions, Stream: true, N: 1}}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// scrapeValue returns a sample's value summed over label sets, and the
// scrape's run_ns.
func scrapeValue(t *testing.T, path, name string) (v float64, runNs int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# servetrace scrape "); ok {
			for _, fld := range strings.Fields(rest) {
				if s, ok := strings.CutPrefix(fld, "run_ns="); ok {
					runNs, _ = strconv.ParseInt(s, 10, 64)
				}
			}
		}
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			x, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			v += x
		}
	}
	return v, runNs
}

// TestGPUEnergyMatchesThePowerModel replays against the simulator with its
// engine and its DCGM exporter as two --metrics-url roles. The truth is the
// power model's integral over the run's first to last GPU scrape: idle
// power over the span plus (TDP − idle) × the engine's busy time in it (the
// simulator's busy-seconds counter). analyze's energy, from the energy
// counter and again from the power samples alone, must equal it within 2%,
// and so must the energy per output token.
func TestGPUEnergyMatchesThePowerModel(t *testing.T) {
	var gpu sim.GPUModel
	target := startFastSim(t, func(o *sim.Options) {
		o.Engine.Cost = sim.CostModel{IterBase: 3 * time.Millisecond, PerPrefillToken: 20 * time.Microsecond}
		gpu = o.GPU
	})
	if gpu.Count == 0 {
		t.Fatal("the default preset simulates no GPU")
	}
	wl := steadyThenQuiet(t, 160, 4*time.Second, 1600*time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	if code, _, errOut := runCLI(t, "replay", wl, "--target", target, "--metrics-url", target+"/metrics",
		"--metrics-url", "gpu="+target+"/dcgm/metrics", "--metrics-interval", "200ms", "--out", run); code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errOut)
	}
	gpuScrapes, _ := filepath.Glob(filepath.Join(run, "metrics", "gpu-scrape-*.prom"))
	engineScrapes, _ := filepath.Glob(filepath.Join(run, "metrics", "scrape-*.prom"))
	if len(gpuScrapes) < 10 || len(engineScrapes) < 10 {
		t.Fatalf("%d GPU and %d engine scrapes, want at least 10 of each", len(gpuScrapes), len(engineScrapes))
	}
	busy0, at0 := scrapeValue(t, gpuScrapes[0], "servetrace_sim_busy_seconds_total")
	busy1, at1 := scrapeValue(t, gpuScrapes[len(gpuScrapes)-1], "servetrace_sim_busy_seconds_total")
	span := float64(at1-at0) / 1e9
	truth := float64(gpu.Count) * (gpu.IdleW*span + (gpu.MaxW-gpu.IdleW)*(busy1-busy0))
	if busy1-busy0 < 0.2*span {
		t.Fatalf("the engine was busy %.2f s of %.2f s: too idle to test the power model", busy1-busy0, span)
	}

	analyzeRun := func() *analyze.Report {
		t.Helper()
		code, out, errOut := runCLI(t, "analyze", run, "--json", "--window", "500ms")
		if code != 0 {
			t.Fatalf("analyze: exit %d: %s", code, errOut)
		}
		var rep analyze.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	check := func(rep *analyze.Report, source string) {
		t.Helper()
		e := rep.Energy
		if e == nil || e.Source != source {
			t.Fatalf("energy %+v, want one from the %s", e, source)
		}
		rel := math.Abs(e.Joules-truth) / truth
		t.Logf("%s: %.1f J against the power model's %.1f J (%.2f%% off)", source, e.Joules, truth, 100*rel)
		if rel > 0.02 {
			t.Errorf("%s: %.1f J, the power model's integral %.1f J (%.2f%% off, want within 2%%)", source, e.Joules, truth, 100*rel)
		}
		perToken := truth / float64(rep.Throughput.OutputTokens)
		if rel := math.Abs(e.PerOutputTokenJ-perToken) / perToken; rel > 0.02 {
			t.Errorf("%s: %.4g J per output token, want %.4g", source, e.PerOutputTokenJ, perToken)
		}
	}
	rep := analyzeRun()
	check(rep, "energy counter")
	// The windows carry both endpoints' gauges, scraped apart.
	both := 0
	for _, w := range rep.Series.Windows {
		if w.Running != nil && w.GPUUtilPct != nil && w.GPUPowerW != nil && w.GPUMemUsedMiB != nil {
			both++
			if *w.GPUMemUsedMiB < gpu.WeightsMiB {
				t.Errorf("window at %.1f s: %.0f MiB used, below the weights' %.0f MiB", w.StartS, *w.GPUMemUsedMiB, gpu.WeightsMiB)
			}
		}
	}
	if both < 5 {
		t.Errorf("%d windows carry both engine and GPU gauges, want at least 5", both)
	}
	// The text report's time series has the engine counters' and the GPU
	// gauges' columns.
	if code, out, errOut := runCLI(t, "analyze", run, "--window", "500ms"); code != 0 || !strings.Contains(out, "prefix hit") || !strings.Contains(out, "power W") || !strings.Contains(out, "GPU energy") {
		t.Errorf("analyze: exit %d, the time series lacks the engine or GPU columns, or the energy line:\n%s%s", code, out, errOut)
	}
	// Without the energy counter, the power samples' integral.
	for _, f := range gpuScrapes {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") {
				keep = append(keep, l)
			}
		}
		if err := os.WriteFile(f, []byte(strings.Join(keep, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check(analyzeRun(), "power samples")
}
