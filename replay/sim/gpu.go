package sim

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/servetrace/servetrace/internal/promtext"
)

// GPUModel is the simulated hardware behind a preset, for the DCGM
// exporter the simulator serves at /dcgm/metrics. Every GPU of a tensor
// parallel group does the same work, so each reports the same utilisation
// and an equal share of memory.
//
// Utilisation is the busy share of the last second (the engine is busy
// while an iteration runs), as DCGM_FI_DEV_GPU_UTIL is over its sample
// period. Power is IdleW + (MaxW − IdleW) × utilisation per GPU: the
// linear model most GPU power studies start from. The energy counter is
// that power's exact integral since the simulator started, so a client's
// estimate from power samples can be checked against it. Memory used is the
// weights plus the KV blocks in use.
type GPUModel struct {
	// Name is the modelName label, e.g. "NVIDIA H100 80GB HBM3".
	Name string
	// Count GPUs serve the model (0: no GPU, no exporter).
	Count int
	// IdleW and MaxW are one GPU's power at 0% and 100% utilisation.
	IdleW, MaxW float64
	// MemoryMiB is one GPU's frame buffer; WeightsMiB the weights on it.
	MemoryMiB, WeightsMiB float64
	// KVBlockMiB is one KV block's size over all the GPUs.
	KVBlockMiB float64
}

// utilWindow is the span utilisation and power average over; utilBucket
// the resolution it is kept at.
const (
	utilWindow = time.Second
	utilBucket = 50 * time.Millisecond
	nBuckets   = int(utilWindow / utilBucket)
)

// busyMeter accumulates the engine's busy time: in total, for the energy
// counter, and per bucket of the last utilWindow, for utilisation. The ring
// has one slot more than the window's buckets, for the bucket filling now.
type busyMeter struct {
	mu      sync.Mutex
	start   time.Time
	total   time.Duration
	buckets [nBuckets + 1]time.Duration
	index   [nBuckets + 1]int64 // which bucket (time since start / utilBucket) each slot holds
}

// newBusyMeter starts a meter at start, the engine clock's now: its buckets
// count from there, so the iterations it records must end after it.
func newBusyMeter(start time.Time) *busyMeter { return &busyMeter{start: start} }

// add records an iteration of busy time that ended at end.
func (m *busyMeter) add(end time.Time, busy time.Duration) {
	k := int64(end.Sub(m.start) / utilBucket)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.total += busy
	slot := k % int64(nBuckets+1)
	if m.index[slot] != k {
		m.index[slot], m.buckets[slot] = k, 0
	}
	m.buckets[slot] += busy
}

// read returns the time since start, the total busy time, and the busy
// share of the utilWindow before now (whole buckets).
func (m *busyMeter) read(now time.Time) (elapsed, busy time.Duration, util float64) {
	k := int64(now.Sub(m.start) / utilBucket)
	m.mu.Lock()
	defer m.mu.Unlock()
	var inWindow time.Duration
	for s := range nBuckets + 1 {
		if m.index[s] >= k-int64(nBuckets) && m.index[s] < k {
			inWindow += m.buckets[s]
		}
	}
	return now.Sub(m.start), m.total, min(1, max(0, inWindow.Seconds()/utilWindow.Seconds()))
}

// GPUReading is the exporter's figures at one instant, per GPU.
type GPUReading struct {
	UtilPct, PowerW, EnergyMJ, FBUsedMiB, FBFreeMiB float64
	// BusyS is the engine's total busy time, the power model's input.
	BusyS float64
}

// readGPU applies the power and memory model.
func (s *Server) readGPU(now time.Time) GPUReading {
	g := s.opts.GPU
	elapsed, busy, util := s.engine.busy.read(now)
	used := g.WeightsMiB + float64(s.engine.referencedBlocks())*g.KVBlockMiB/float64(max(1, g.Count))
	slope := g.MaxW - g.IdleW
	return GPUReading{
		UtilPct: 100 * util, PowerW: g.IdleW + slope*util,
		EnergyMJ:  1e3 * (g.IdleW*elapsed.Seconds() + slope*busy.Seconds()),
		FBUsedMiB: used, FBFreeMiB: max(0, g.MemoryMiB-used), BusyS: busy.Seconds(),
	}
}

// serveDCGM writes the DCGM exporter's default counters for each GPU in
// dcgm-exporter's shape (etc/default-counters.csv; labels gpu, UUID,
// device, modelName, Hostname).
func (s *Server) serveDCGM(w http.ResponseWriter, _ *http.Request) {
	g := s.opts.GPU
	if g.Count == 0 {
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("preset %s simulates no GPU", s.opts.Preset))
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	r := s.readGPU(time.Now())
	host, _ := os.Hostname()
	labels := make([]string, g.Count)
	for i := range labels {
		labels[i] = promtext.Labels("gpu", fmt.Sprint(i), "UUID", fmt.Sprintf("GPU-5e7a0000-0000-4000-8000-%012d", i),
			"device", fmt.Sprintf("nvidia%d", i), "modelName", g.Name, "Hostname", host)
	}
	for _, m := range []struct {
		name, typ, help string
		v               float64
	}{
		{"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", float64(int(r.UtilPct + 0.5))},
		{"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", float64(int(r.FBFreeMiB))},
		{"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", float64(int(r.FBUsedMiB + 0.5))},
		{"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", r.PowerW},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", float64(int64(r.EnergyMJ))},
	} {
		promtext.WriteHeader(w, m.name, m.typ, m.help)
		for _, l := range labels {
			promtext.WriteSample(w, m.name, l, m.v)
		}
	}
	promtext.WriteHeader(w, "servetrace_sim_busy_seconds_total", "counter", "Engine busy time, the power model's input (simulator).")
	promtext.WriteSample(w, "servetrace_sim_busy_seconds_total", "", r.BusyS)
}
