package sim

import (
	"math"
	"testing"
	"time"
)

// TestBusyMeterUtilisation feeds the meter known busy patterns and reads
// the utilisation of the last second and the total back.
func TestBusyMeterUtilisation(t *testing.T) {
	for _, c := range []struct {
		name      string
		busyPer   time.Duration // busy time per 10 ms iteration slot
		want      float64
		wantTotal time.Duration
	}{
		{"always busy", 10 * time.Millisecond, 1, 3 * time.Second},
		{"half busy", 5 * time.Millisecond, 0.5, 1500 * time.Millisecond},
		{"idle", 0, 0, 0},
	} {
		m := &busyMeter{start: time.Unix(0, 0)}
		for i := 1; i <= 300; i++ { // 3 s of 10 ms slots
			m.add(m.start.Add(time.Duration(i)*10*time.Millisecond-time.Nanosecond), c.busyPer)
		}
		_, total, util := m.read(m.start.Add(3*time.Second + 20*time.Millisecond))
		if math.Abs(util-c.want) > 1e-9 || total != c.wantTotal {
			t.Errorf("%s: utilisation %.4f, total %v; want %.2f, %v", c.name, util, total, c.want, c.wantTotal)
		}
		// A second later with nothing run, the window is idle.
		if _, _, util := m.read(m.start.Add(4100 * time.Millisecond)); util != 0 {
			t.Errorf("%s: utilisation %.3f a second after the last iteration, want 0", c.name, util)
		}
	}
}

// TestDCGMPowerModel: the exporter's power and energy follow the preset's
// model from the meter's readings.
func TestDCGMPowerModel(t *testing.T) {
	o := DefaultOptions()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.engine.busy = &busyMeter{start: time.Now().Add(-10 * time.Second)}
	now := time.Now()
	for i := range 100 { // the last second, 40% busy
		s.engine.busy.add(now.Add(-time.Second+time.Duration(i)*10*time.Millisecond), 4*time.Millisecond)
	}
	r := s.readGPU(now.Add(utilBucket))
	g := o.GPU
	if math.Abs(r.UtilPct-40) > 2.5 || math.Abs(r.PowerW-(g.IdleW+(g.MaxW-g.IdleW)*r.UtilPct/100)) > 1e-9 {
		t.Errorf("util %.2f%%, power %.2f W; want about 40%% and idle + slope × util", r.UtilPct, r.PowerW)
	}
	wantMJ := 1e3 * (g.IdleW*(10*time.Second+utilBucket).Seconds() + (g.MaxW-g.IdleW)*0.4)
	if math.Abs(r.EnergyMJ-wantMJ) > 1e3 {
		t.Errorf("energy %.0f mJ, want %.0f", r.EnergyMJ, wantMJ)
	}
	if r.FBUsedMiB != g.WeightsMiB {
		t.Errorf("memory used %.0f MiB with no KV blocks, want the weights' %.0f", r.FBUsedMiB, g.WeightsMiB)
	}
}
