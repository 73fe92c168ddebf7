package analyze

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// dcgmScrape is a scrape file as replay writes it, of a DCGM exporter's
// text for two GPUs (dcgm-exporter's default counters: utilisation %,
// power W, frame buffer MiB, total energy mJ).
func dcgmScrape(runNs int64, util, power [2]float64, energyMJ [2]float64) string {
	var b strings.Builder
	b.WriteString("# servetrace scrape phase=during run_ns=" + itoa(runNs) + " unix_ns=1\n")
	b.WriteString("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
	for g := range 2 {
		labels := `{gpu="` + itoa(int64(g)) + `",UUID="GPU-0000000` + itoa(int64(g)) + `",device="nvidia` + itoa(int64(g)) + `",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"}`
		b.WriteString("DCGM_FI_DEV_GPU_UTIL" + labels + " " + ftoa(util[g]) + "\n")
		b.WriteString("DCGM_FI_DEV_POWER_USAGE" + labels + " " + ftoa(power[g]) + "\n")
		b.WriteString("DCGM_FI_DEV_FB_USED" + labels + " 61440\n")
		b.WriteString("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" + labels + " " + ftoa(energyMJ[g]) + "\n")
	}
	return b.String()
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// TestEnergyFromDCGM: two GPUs at 150 W each, then 200 W each 5 s later,
// then 150 W again at 10 s: 3,500 J by the trapezoid, and the energy
// counters rise by the same 3,500 J (1,750,000 mJ each); over the hand
// rows' 4 output tokens, 875 J per token. Without the counters, the power
// samples give the same figure; the windows carry the gauges.
func TestEnergyFromDCGM(t *testing.T) {
	for _, withCounter := range []bool{true, false} {
		run := filepath.Join(t.TempDir(), "run")
		writeRun(t, run, "r", handRows(), 1)
		if err := os.MkdirAll(filepath.Join(run, "metrics"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range []struct {
			at     int64
			w      float64
			energy float64
		}{{0, 150, 9e6}, {5e9, 200, 9e6 + 875e3}, {10e9, 150, 9e6 + 1750e3}} {
			text := dcgmScrape(s.at, [2]float64{40, 60}, [2]float64{s.w, s.w}, [2]float64{s.energy, s.energy})
			if !withCounter {
				text = dropLines(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
			}
			writeFile(t, filepath.Join(run, "metrics", "scrape-0000"+itoa(int64(i))+".prom"), text)
		}
		rep, err := Analyze([]string{run}, Options{Window: 1e9, Bootstrap: BootstrapOptions{Resamples: 100}})
		if err != nil {
			t.Fatal(err)
		}
		e := rep.Energy
		wantSource := map[bool]string{true: "energy counter", false: "power samples"}[withCounter]
		if e == nil || e.Source != wantSource || math.Abs(e.Joules-3500) > 1e-6 || math.Abs(e.PerOutputTokenJ-875) > 1e-6 || math.Abs(e.MeanPowerW-350) > 1e-6 {
			t.Fatalf("counter %v: energy %+v, want 3500 J from %s, 875 J per token, 350 W", withCounter, e, wantSource)
		}
		w := rep.Series.Windows[0]
		if w.GPUUtilPct == nil || *w.GPUUtilPct != 50 || *w.GPUPowerW != 300 || *w.GPUMemUsedMiB != 122880 {
			t.Errorf("window 0 gauges: util %v power %v mem %v; want 50%%, 300 W, 122880 MiB", w.GPUUtilPct, w.GPUPowerW, w.GPUMemUsedMiB)
		}
	}
}

func dropLines(text, prefix string) string {
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, prefix) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
